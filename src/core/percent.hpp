#pragma once

// Percent-decoding (%XX), for URLs and for the stores that name a key's node or directory after
// the key (zookeeper://, etcd://).

#include <optional>
#include <string>
#include <string_view>

namespace dlock::core {

enum class HexDigits {
  any_case,  // %2f and %2F
  upper,     // %2F only: the form the stores write, so that a key has one name
};

// `in` with every %XX replaced by its byte; nothing when a '%' is not followed by two hex digits
// of `digits`.
std::optional<std::string> percent_decode(std::string_view in, HexDigits digits = HexDigits::any_case);

}  // namespace dlock::core
