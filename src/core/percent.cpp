#include "core/percent.hpp"

namespace dlock::core {
namespace {

int hex_value(char c, HexDigits digits) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (digits == HexDigits::any_case && c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view in, HexDigits digits) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return std::nullopt;
    const int high = hex_value(in[i + 1], digits);
    const int low = hex_value(in[i + 2], digits);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

}  // namespace dlock::core
