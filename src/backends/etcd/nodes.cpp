#include "backends/etcd/nodes.hpp"

#include <charconv>
#include <cstdio>
#include <random>
#include <vector>

#include "core/percent.hpp"

namespace dlock::backends::etcd {
namespace {

std::string encode_key(std::string_view key) {
  std::string name;
  name.reserve(key.size());
  for (const char c : key) {
    if (c == '%') {
      name += "%25";
    } else if (c == '/') {
      name += "%2F";
    } else {
      name += c;
    }
  }
  return name;
}

std::optional<std::string> decode_key(std::string_view name) {
  auto key = core::percent_decode(name, core::HexDigits::upper);
  if (!key || key->empty()) return std::nullopt;
  return key;
}

template <class T>
std::optional<T> number(std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::string key_dir(const std::string& root, std::string_view key) {
  return root + "/" + encode_key(key) + "/";
}

std::string keys_from(const std::string& root, std::string_view prefix) {
  return root + "/" + encode_key(prefix);
}

std::optional<std::string> key_of_node(const std::string& root, std::string_view node) {
  if (node.size() <= root.size() + 1 || node.substr(0, root.size()) != root || node[root.size()] != '/') {
    return std::nullopt;
  }
  const std::string_view rest = node.substr(root.size() + 1);
  const auto slash = rest.rfind('/');
  if (slash == std::string_view::npos || rest.size() - slash - 1 != 33) return std::nullopt;
  return decode_key(rest.substr(0, slash));
}

std::string new_node(const std::string& root, std::string_view key, std::int64_t lease) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char name[40];
  std::snprintf(name, sizeof name, "%016llx-%016llx", static_cast<unsigned long long>(lease),
                static_cast<unsigned long long>(random()));
  return key_dir(root, key) + name;
}

std::string prefix_end(std::string prefix) {
  // The last byte that can go up does; every byte after it is dropped.
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // etcd: every key from the start
}

std::string to_value(const NodeValue& value) {
  return value.owner + "\n" + std::to_string(value.holds) + "\n" + std::to_string(value.ttl.count()) + "\n" +
         (value.evicted ? "evicted" : "held") + "\n" +
         (value.mode == LockMode::shared ? "shared" : "exclusive") + "\n" + std::to_string(value.permits);
}

std::optional<NodeValue> from_value(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at <= text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (lines.size() != 6 || lines[0].empty()) return std::nullopt;
  const auto holds = number<std::uint32_t>(lines[1]);
  const auto ttl = number<std::int64_t>(lines[2]);
  const auto permits = number<std::uint32_t>(lines[5]);
  if (!holds || !ttl || !permits || (lines[3] != "held" && lines[3] != "evicted") ||
      (lines[4] != "exclusive" && lines[4] != "shared")) {
    return std::nullopt;
  }
  return NodeValue{std::string(lines[0]),
                   *holds,
                   std::chrono::milliseconds(*ttl),
                   lines[3] == "evicted",
                   lines[4] == "shared" ? LockMode::shared : LockMode::exclusive,
                   *permits};
}

LockInfo to_info(std::string_view key, const etcdserverpb::KeyValue& node, const NodeValue& value,
                 std::size_t waiters) {
  LockInfo info;
  info.key = std::string(key);
  info.owner = value.owner;
  info.token = static_cast<std::uint64_t>(node.create_revision());
  info.hold_count = value.evicted ? 0 : value.holds;
  info.ttl_left = value.ttl;
  info.waiters = static_cast<std::uint32_t>(waiters);
  info.evicted = value.evicted;
  info.mode = value.mode;
  return info;
}

}  // namespace dlock::backends::etcd
