#include "core/validate.hpp"

#include <string>

#include "dlock/errors.hpp"
#include "dlock/types.hpp"

namespace dlock::core {
namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 when it is malformed (overlong forms,
// surrogates and code points above U+10FFFF included).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t j) { return static_cast<unsigned char>(s[j]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned min_second = 0x80, max_second = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) min_second = 0xA0;
    if (c == 0xED) max_second = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) min_second = 0x90;
    if (c == 0xF4) max_second = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < min_second || byte(i + 1) > max_second) return 0;
  for (std::size_t j = 2; j < n; ++j) {
    if (byte(i + j) < 0x80 || byte(i + j) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

void validate_key(std::string_view key, std::size_t max_bytes) {
  if (key.empty()) throw InvalidArgument("lock key is empty: give a non-empty key such as \"orders/42\"");
  if (key.size() > max_bytes) {
    throw InvalidArgument("lock key is " + std::to_string(key.size()) + " bytes; this backend accepts at most " +
                              std::to_string(max_bytes) + " (hash long identifiers into the key)",
                          std::string(key.substr(0, 64)) + "...");
  }
  for (std::size_t i = 0; i < key.size();) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c == 0x7F) {
      throw InvalidArgument("lock key contains control character 0x" +
                            std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15] +
                            " at byte " + std::to_string(i) +
                            ": keys must be printable UTF-8 text (no NUL, newline or other control bytes)");
    }
    const std::size_t n = utf8_sequence_length(key, i);
    if (n == 0) {
      throw InvalidArgument("lock key is not valid UTF-8 at byte " + std::to_string(i) +
                            ": keys must be text; encode binary identifiers (hex, base64)");
    }
    // U+0080..U+009F, the C1 controls, encode as C2 80..C2 9F.
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(key[i + 1]) <= 0x9F) {
      const auto low = static_cast<unsigned char>(key[i + 1]);
      throw InvalidArgument("lock key contains control character U+00" + std::string(1, "0123456789ABCDEF"[low >> 4]) +
                            "0123456789ABCDEF"[low & 15] + " at byte " + std::to_string(i) +
                            ": keys must be printable UTF-8 text (no C0 or C1 control characters)");
    }
    i += n;
  }
}

void validate_owner(std::string_view owner) {
  if (owner.empty()) throw InvalidArgument("owner is empty: give a non-empty owner string or leave it unset");
  if (owner.size() > kMaxOwnerBytes) {
    throw InvalidArgument("owner is " + std::to_string(owner.size()) + " bytes; at most " +
                          std::to_string(kMaxOwnerBytes) + " are allowed");
  }
  for (const char ch : owner) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x21 || c > 0x7E) {
      throw InvalidArgument("owner must be printable ASCII without spaces; got byte 0x" +
                            std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15]);
    }
  }
}

void validate_ttl(std::chrono::milliseconds ttl, std::string_view key) {
  if (ttl.count() <= 0) {
    throw InvalidArgument("lease TTL must be positive, got " + std::to_string(ttl.count()) +
                              " ms: give a duration such as 30s",
                          std::string(key));
  }
}

}  // namespace dlock::core
