#pragma once

// How sqlite:// stores a request's TTL and reads a holder's row back: shared by the statements
// on one key, on sets of keys and on shared holds.

#include <chrono>
#include <cstdint>
#include <string>

#include "backends/sqlite/connection.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::sqlite {

// µs as whole ms, rounded up: a lease with 1 µs left is still held.
std::chrono::milliseconds ceil_ms(std::int64_t us);

// A TTL in µs; TTLs beyond a century are stored as a century, so now + ttl cannot overflow.
std::int64_t ttl_us(std::chrono::milliseconds ttl);

// owner, token, hold_count, the µs left and the µs since it was taken, from column `first` on.
// A live row without holds is a holder evicted with a lock delay.
LockInfo row_info(const Query& query, std::string key, int first);

}  // namespace dlock::backends::sqlite
