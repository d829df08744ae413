#pragma once

// The zookeeper:// layout. Under the URL's path (default /dlock) each key has a container
// node, its name the key percent-encoded, and under it one ephemeral sequential node per
// holder or waiter, named OWNERTAG-ATTEMPT-MODE-SEQUENCE: OWNERTAG, 16 hex digits of a hash of
// the owner, so one getChildren shows whether a holder may be the caller's own; ATTEMPT, 16
// random hex digits, so a create whose answer was lost with the connection is found again
// (Curator's "protected" nodes); MODE, `x` (exclusive) or `s` and the permits (shared: `s0` a
// reader, `s3` one of a semaphore's 3 permits), so one getChildren shows who holds. A node's
// data: owner, hold count, the session timeout of the client that made it, whether it was
// force-released with a lock delay, its mode and permits.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/types.hpp"

namespace dlock::backends::zookeeper {

// A key as a node name: bytes outside [A-Za-z0-9_~-] as %XX, so '/', '.' and '..' never occur.
std::string encode_key(std::string_view key);
std::optional<std::string> decode_key(std::string_view name);

std::string owner_tag(std::string_view owner);
// A fresh ATTEMPT part.
std::string attempt_tag();
// What a new node's name starts with; the ensemble appends SEQUENCE.
std::string node_prefix(std::string_view tag, std::string_view attempt, LockMode mode,
                        std::uint32_t permits);

struct Child {
  std::string name;
  std::string tag;      // OWNERTAG
  std::string attempt;  // ATTEMPT
  std::uint64_t sequence = 0;
  LockMode mode = LockMode::exclusive;
  std::uint32_t permits = 0;  // shared: the most shared holders it admits, 0 for no limit
};
// The queue under a key: its dlock children, lowest sequence (the first holder) first.
std::vector<Child> queue_of(const std::vector<std::string>& names);

// The rules on a queue (Curator's read-write lock, with semaphores): an exclusive node holds
// when it is first; a shared node when no exclusive node precedes it and fewer than its permits
// (0: no limit) precede it. The first shared node sets the key's permits: a shared node that
// asks for others holds nothing (its request is refused, and its node goes).
bool holds(const std::vector<Child>& queue, std::size_t i);
// The first shared node before queue[i], whose permits a shared request must ask; nothing when
// there is none.
std::optional<std::size_t> first_shared(const std::vector<Child>& queue, std::size_t i);
// The nodes before queue[i], which does not hold, whose going may let it hold: a writer's two
// predecessors (the second so that it is next in line when the first goes); a shared node's
// nearest writer, or without one the `permits` nodes just before it (so a release wakes at
// most that many waiters).
std::vector<std::size_t> awaited(const std::vector<Child>& queue, std::size_t i);

struct NodeData {
  std::string owner;
  std::uint32_t holds = 1;
  std::chrono::milliseconds session_timeout{0};
  bool evicted = false;
  LockMode mode = LockMode::exclusive;
  std::uint32_t permits = 0;
};
std::string to_data(const NodeData& data);
std::optional<NodeData> from_data(std::string_view text);

class Session;
// Makes the root path and its missing ancestors, persistent: the ancestors open to every user
// (they are not dlock's), the root itself with the session's ACL. `key`: for errors.
void make_root(Session& s, const std::string& root, std::string_view key);

}  // namespace dlock::backends::zookeeper
