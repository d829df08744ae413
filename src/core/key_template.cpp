// Keys built from templates (dlock/with_lock.hpp): "{}" placeholders, "{{" and "}}" escapes.

#include <limits>

#include "core/validate.hpp"
#include "dlock/errors.hpp"
#include "dlock/with_lock.hpp"

namespace dlock::detail {

std::string format_key(std::string_view pattern, const std::vector<std::string>& parts) {
  const auto bad = [&](const std::string& problem) {
    return InvalidArgument("key template '" + std::string(pattern) + "' " + problem);
  };
  std::string key;
  std::size_t next = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const bool doubled = i + 1 < pattern.size() && pattern[i + 1] == c;
    if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == '}') {
      if (next == parts.size()) {
        throw bad("has more {} placeholders than the " + std::to_string(parts.size()) + " arguments given");
      }
      key += parts[next++];
      ++i;
    } else if ((c == '{' || c == '}') && doubled) {
      key += c;
      ++i;
    } else if (c == '{' || c == '}') {
      throw bad(std::string("has a lone '") + c + "' at byte " + std::to_string(i) +
                ": placeholders are {} (no format specification), literal braces are {{ and }}");
    } else {
      key += c;
    }
  }
  if (next != parts.size()) {
    throw bad("has " + std::to_string(next) + " {} placeholders but " + std::to_string(parts.size()) +
              " arguments were given");
  }
  if (key.empty()) throw bad("made an empty key: every lock needs a non-empty key");
  try {
    // The store's own limit on the length is checked when the key is used.
    core::validate_key(key, std::numeric_limits<std::size_t>::max());
  } catch (const InvalidArgument& e) {
    throw bad(std::string("made a key that is not valid: ") + e.what());
  }
  return key;
}

}  // namespace dlock::detail
