#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "dlock/client.hpp"

namespace dlock {

std::chrono::milliseconds parse_duration(std::string_view text) {
  const auto fail = [&](const char* why) -> std::chrono::milliseconds {
    throw InvalidArgument("invalid duration '" + std::string(text) + "': " + why +
                          " (write seconds, as in flock: 5, 0.5; or a number with a unit: 500ms, 30s, 1.5s, 5m, 2h)");
  };
  std::size_t unit_at = 0;
  while (unit_at < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[unit_at])) || text[unit_at] == '.')) {
    ++unit_at;
  }
  if (unit_at == 0) return fail("it does not start with a number");
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + unit_at, value);
  if (ec != std::errc() || end != text.data() + unit_at) return fail("the number is malformed");
  const std::string_view unit = text.substr(unit_at);
  double ms_per_unit = 0;
  if (unit.empty() || unit == "s") {  // a bare number is seconds, as flock(1)'s -w takes it
    ms_per_unit = 1000;
  } else if (unit == "us") {
    ms_per_unit = 0.001;
  } else if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "m") {
    ms_per_unit = 60'000;
  } else if (unit == "h") {
    ms_per_unit = 3'600'000;
  } else {
    return fail("unknown unit");
  }
  const double ms = std::ceil(value * ms_per_unit);
  if (!(ms < 1e15)) return fail("it is too long");
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

}  // namespace dlock
