#include "backends/zookeeper/nodes.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>

#include "backends/zookeeper/errors.hpp"
#include "backends/zookeeper/session.hpp"
#include "core/percent.hpp"
#include "core/stable_hash.hpp"

namespace dlock::backends::zookeeper {
namespace {

bool plain(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '~' ||
         c == '-';
}

template <class T>
std::optional<T> number(std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::string encode_key(std::string_view key) {
  std::string name;
  name.reserve(key.size());
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (plain(byte)) {
      name += c;
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", byte);
      name += escaped;
    }
  }
  return name;
}

std::optional<std::string> decode_key(std::string_view name) {
  for (const char c : name) {
    if (c != '%' && !plain(static_cast<unsigned char>(c))) return std::nullopt;
  }
  auto key = core::percent_decode(name, core::HexDigits::upper);
  if (!key || key->empty()) return std::nullopt;
  return key;
}

std::string owner_tag(std::string_view owner) {
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(core::stable_hash(owner)));
  return tag;
}

std::string attempt_tag() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(random()));
  return tag;
}

std::string node_prefix(std::string_view tag, std::string_view attempt, LockMode mode,
                        std::uint32_t permits) {
  const std::string kind =
      mode == LockMode::exclusive ? std::string("x") : std::string("s").append(std::to_string(permits));
  return std::string(tag) + "-" + std::string(attempt) + "-" + kind + "-";
}

std::vector<Child> queue_of(const std::vector<std::string>& names) {
  std::vector<Child> queue;
  for (const auto& name : names) {
    if (name.size() <= 34 || name[16] != '-' || name[33] != '-') continue;  // not dlock's
    const std::string_view rest = std::string_view(name).substr(34);
    const auto dash = rest.find('-');
    if (dash == std::string_view::npos || dash == 0) continue;
    const auto sequence = number<std::uint64_t>(rest.substr(dash + 1));
    const bool shared = rest[0] == 's';
    const auto permits =
        shared ? number<std::uint32_t>(rest.substr(1, dash - 1)) : std::optional<std::uint32_t>(0);
    if (!sequence || !permits || (!shared && rest.substr(0, dash) != "x")) continue;
    queue.push_back({name, name.substr(0, 16), name.substr(17, 16), *sequence,
                     shared ? LockMode::shared : LockMode::exclusive, *permits});
  }
  std::sort(queue.begin(), queue.end(),
            [](const Child& a, const Child& b) { return a.sequence < b.sequence; });
  return queue;
}

bool holds(const std::vector<Child>& queue, std::size_t i) {
  const Child& node = queue[i];
  if (node.mode == LockMode::exclusive) return i == 0;
  for (std::size_t j = 0; j < i; ++j) {
    if (queue[j].mode == LockMode::exclusive) return false;
  }
  return queue.front().permits == node.permits && (node.permits == 0 || i < node.permits);
}

std::optional<std::size_t> first_shared(const std::vector<Child>& queue, std::size_t i) {
  for (std::size_t j = 0; j < i; ++j) {
    if (queue[j].mode == LockMode::shared) return j;
  }
  return std::nullopt;
}

std::vector<std::size_t> awaited(const std::vector<Child>& queue, std::size_t i) {
  const Child& node = queue[i];
  std::vector<std::size_t> nodes;
  if (node.mode == LockMode::exclusive) {
    for (std::size_t back = 1; back <= std::min<std::size_t>(2, i); ++back) nodes.push_back(i - back);
    return nodes;
  }
  for (std::size_t j = i; j-- > 0;) {
    if (queue[j].mode == LockMode::exclusive) return {j};
  }
  for (std::size_t j = i - std::min<std::size_t>(node.permits, i); j < i; ++j) nodes.push_back(j);
  return nodes;
}

std::string to_data(const NodeData& data) {
  return data.owner + "\n" + std::to_string(data.holds) + "\n" +
         std::to_string(data.session_timeout.count()) + "\n" + (data.evicted ? "evicted" : "held") + "\n" +
         (data.mode == LockMode::shared ? "shared" : "exclusive") + "\n" + std::to_string(data.permits);
}

std::optional<NodeData> from_data(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at <= text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (lines.size() != 6 || lines[0].empty()) return std::nullopt;
  const auto holds = number<std::uint32_t>(lines[1]);
  const auto timeout = number<std::int64_t>(lines[2]);
  const auto permits = number<std::uint32_t>(lines[5]);
  if (!holds || !timeout || !permits || (lines[3] != "held" && lines[3] != "evicted") ||
      (lines[4] != "exclusive" && lines[4] != "shared")) {
    return std::nullopt;
  }
  return NodeData{std::string(lines[0]),
                  *holds,
                  std::chrono::milliseconds(*timeout),
                  lines[3] == "evicted",
                  lines[4] == "shared" ? LockMode::shared : LockMode::exclusive,
                  *permits};
}

void make_root(Session& s, const std::string& root, std::string_view key) {
  for (std::size_t at = 1; at <= root.size(); ++at) {
    if (at != root.size() && root[at] != '/') continue;
    const int rc = s.create(root.substr(0, at), "", 0, at != root.size()).rc();
    if (rc != ZOK && rc != ZNODEEXISTS) check(rc, "create " + root.substr(0, at), key);
  }
}

}  // namespace dlock::backends::zookeeper
