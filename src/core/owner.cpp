#include "core/owner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "dlock/types.hpp"

namespace dlock::core {
namespace {

constexpr std::size_t kRandomHexDigits = 16;
// The longest ":PID.THREAD/RANDOM": a 10-digit pid, a 20-digit thread serial.
constexpr std::size_t kMaxSuffixBytes = 1 + 10 + 1 + 20 + 1 + kRandomHexDigits;
// What NAME and HOST share, the '@' left out.
constexpr std::size_t kNameAndHostBytes = kMaxOwnerBytes - kMaxSuffixBytes - 1;

std::string sanitized(std::string_view text, std::string_view fallback) {
  std::string out(text.empty() ? fallback : text);
  for (char& ch : out) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x21 || c > 0x7E || c == '@') ch = '_';
  }
  return out;
}

}  // namespace

std::string host_name() {
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

std::string owner_prefix(std::string_view name, std::string_view host) {
  std::string who = sanitized(name.empty() ? std::string_view(program_invocation_short_name) : name, "unknown");
  std::string where = sanitized(host, "unknown-host");
  // Each keeps what it needs when the other is short; both long, they split the room evenly.
  const std::size_t who_bytes =
      std::min(who.size(), std::max(kNameAndHostBytes / 2, kNameAndHostBytes - std::min(where.size(), kNameAndHostBytes)));
  who.resize(who_bytes);
  where.resize(std::min(where.size(), kNameAndHostBytes - who_bytes));
  return who + '@' + where;
}

std::string owner_of(std::string_view prefix, long pid, std::uint64_t thread_serial, std::string_view client_id) {
  return std::string(prefix) + ':' + std::to_string(pid) + '.' + std::to_string(thread_serial) + '/' +
         std::string(client_id.substr(0, kRandomHexDigits));
}

}  // namespace dlock::core
