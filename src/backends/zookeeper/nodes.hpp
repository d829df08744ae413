#pragma once

// The zookeeper:// layout. Under the URL's path (default /dlock) each key has a container
// node, its name the key percent-encoded, and under it one ephemeral sequential node per
// holder or waiter, named OWNERTAG-ATTEMPT-SEQUENCE: OWNERTAG, 16 hex digits of a hash of the
// owner, so one getChildren shows whether the first node may be the caller's own; ATTEMPT, 16
// random hex digits, so a create whose answer was lost with the connection is found again
// (Curator's "protected" nodes). The lowest sequence holds the key. A node's data: owner, hold count, the session timeout of the client
// that made it, and whether it was force-released with a lock delay.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::backends::zookeeper {

// A key as a node name: bytes outside [A-Za-z0-9_~-] as %XX, so '/', '.' and '..' never occur.
std::string encode_key(std::string_view key);
std::optional<std::string> decode_key(std::string_view name);

std::string owner_tag(std::string_view owner);
// A fresh ATTEMPT part.
std::string attempt_tag();

struct Child {
  std::string name;
  std::string tag;      // OWNERTAG
  std::string attempt;  // ATTEMPT
  std::uint64_t sequence = 0;
};
// The queue under a key: its dlock children, lowest sequence (the holder) first.
std::vector<Child> queue_of(const std::vector<std::string>& names);

struct NodeData {
  std::string owner;
  std::uint32_t holds = 1;
  std::chrono::milliseconds session_timeout{0};
  bool evicted = false;
};
std::string to_data(const NodeData& data);
std::optional<NodeData> from_data(std::string_view text);

class Session;
// Makes the root path and its missing ancestors, persistent: the ancestors open to every user
// (they are not dlock's), the root itself with the session's ACL. `key`: for errors.
void make_root(Session& s, const std::string& root, std::string_view key);

}  // namespace dlock::backends::zookeeper
