#pragma once

// Input checks shared by every entry point, so each backend receives only valid requests.

#include <chrono>
#include <cstddef>
#include <string_view>

namespace dlock::core {

// Throws InvalidArgument naming the problem: empty, longer than max_bytes, invalid UTF-8,
// or containing a control character (NUL, newline, ...).
void validate_key(std::string_view key, std::size_t max_bytes);
// Throws InvalidArgument unless 1..kMaxOwnerBytes printable ASCII bytes.
void validate_owner(std::string_view owner);
// Throws InvalidArgument unless ttl > 0.
void validate_ttl(std::chrono::milliseconds ttl, std::string_view key);

}  // namespace dlock::core
