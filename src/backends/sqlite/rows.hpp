#pragma once

// How sqlite:// stores a request's TTL and reads a holder's row back: shared by the statements
// on one key, on sets of keys and on shared holds.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backends/sqlite/connection.hpp"
#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::sqlite {

// µs as whole ms, rounded up: a lease with 1 µs left is still held.
std::chrono::milliseconds ceil_ms(std::int64_t us);

// A TTL in µs; TTLs beyond a century are stored as a century, so now + ttl cannot overflow.
std::int64_t ttl_us(std::chrono::milliseconds ttl);

// owner, token, hold_count, the µs left and the µs since it was taken, from column `first` on.
// A live row without holds is a holder evicted with a lock delay.
LockInfo row_info(const Query& query, std::string key, int first);

// The answer to an exclusive request in the row that kAcquire or kAcquireSet returns (from
// column `first` on: the row as row_info reads it, then the µs left of its readers' claim):
// nothing when it is `owner`'s hold; else Busy with the live holder, or with none and the
// claim's time left when only a readers' claim refused it.
std::optional<backend::Busy> refusal(const Query& query, std::string_view key, std::string_view owner, int first);

}  // namespace dlock::backends::sqlite
