#pragma once

// A key's queue of nodes (layout: nodes.hpp) and the transactions on it, each one round trip:
// taking a free key, joining the queue, re-entering the owner's hold, changing or removing a
// node only while it is still the acquisition it was (same create revision, so a late call
// never touches a newer one).
//
// Every write takes `repairs`: where it leaves its repair when its answer never came
// (repairs.hpp), so that the node ends as its caller, told of the failure, believes it is;
// nullptr for a caller that reports the unknown outcome instead (an admin's force-release).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/etcd/connection.hpp"
#include "backends/etcd/nodes.hpp"
#include "backends/etcd/repairs.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

// A read of a key's queue: its nodes in create order (the holder first), as many as were asked.
struct Queue {
  std::vector<pb::KeyValue> nodes;
  std::int64_t count = 0;     // every node in the queue, read or not
  std::int64_t revision = 0;  // the cluster's revision the read saw
};

// The queue's first `limit` nodes (0: all), of those created at or before `max_create` (0: any).
Queue read_queue(Connection& c, const std::string& root, std::string_view key, std::int64_t limit = 0,
                 std::int64_t max_create = 0);

// The nodes of a waiter's queue up to its own, created at `created`, as the member this client
// talks to has them (a serializable read: no round of consensus, so it does not wait behind
// the writes in flight, such as the releaser's next join). As good as a linearizable read here:
// a snapshot at or after `created` has every node ahead, and nodes ahead only ever go. A member
// that has not applied `created` yet is asked again, linearizably.
Queue read_queue_ahead(Connection& c, const std::string& root, std::string_view key, std::int64_t created);

// Puts `node` under `lease` if the key has no node at all: the try-once exclusive acquire, which
// never leaves a node behind. Taken: the node's create revision; else the whole queue.
struct Take {
  std::optional<std::int64_t> taken;
  Queue queue;  // when not taken
};
// Unanswered, the node goes if it still holds what was put.
Take take_if_free(Connection& c, Repairs* repairs, const std::string& root, std::string_view key,
                  const std::string& node, const NodeValue& value, std::int64_t lease);

// The try-once acquire of a set of keys, all or nothing: puts `nodes[i]` (each holding `value`)
// in the queue of `keys[i]` under `lease` if no key has a node at all. Taken: the nodes' create
// revision (one for all); else every key's whole queue, in order. Unanswered, the nodes go if
// they still hold what was put.
struct TakeSet {
  std::optional<std::int64_t> taken;
  std::vector<Queue> queues;  // when not taken
};
TakeSet take_set_if_free(Connection& c, Repairs* repairs, const std::string& root,
                         const std::vector<std::string>& keys, const std::vector<std::string>& nodes,
                         const NodeValue& value, std::int64_t lease);

// Puts `node` under `lease` and reads the whole queue: a waiter's place in line. The node's
// create revision is the queue's revision. Unanswered, the node goes if it still holds what was put.
Queue join_queue(Connection& c, Repairs* repairs, const std::string& root, std::string_view key,
                 const std::string& node, const NodeValue& value, std::int64_t lease);

// Writes `value` into `node` (keeping its lease) if it is still the node read (create and mod
// revisions), and deletes `drop` (a waiter's own node, when it re-enters) with it. The write's
// revision, or nothing when the node changed or went. Unanswered, the write is made later if the
// node is still as read (`redo`: a release), or the node is put back as read if the write was
// made and nothing since (`undo`: a re-entry, whose caller hears it failed; `drop` stays gone).
enum class Unanswered { redo, undo };
std::optional<std::int64_t> rewrite(Connection& c, Repairs* repairs, Unanswered unanswered,
                                    const pb::KeyValue& node, const NodeValue& value, std::string_view key,
                                    const std::string& drop = {});

// Deletes `node` if its create revision is `created`; false when it was not there as that.
// Unanswered, the deletion is made later.
bool remove_node(Connection& c, Repairs* repairs, const std::string& node, std::int64_t created,
                 std::string_view key);
// The same, only if its mod revision is still as read too.
bool remove_unchanged(Connection& c, Repairs* repairs, const pb::KeyValue& node, std::string_view key);

// Marks `node` evicted (writing `value`, whatever the node's hold count is now) if its create
// revision is still the one read; false when it went.
bool mark_evicted(Connection& c, const pb::KeyValue& node, const NodeValue& value, std::string_view key);

// The node of the key's queue created at revision `created`, if it is there.
std::optional<pb::KeyValue> read_created(Connection& c, const std::string& root, std::string_view key,
                                         std::int64_t created, std::int64_t* revision = nullptr);

// Whether no node created before `created` is left in the key's queue: the revision of the read
// that found so, or nothing. One read of at most one node's name, as read_queue_ahead() reads.
std::optional<std::int64_t> first_in_line(Connection& c, const std::string& root, std::string_view key,
                                          std::int64_t created);

// Whether `node` is there in a snapshot at or after `revision`: read from the member this client
// talks to (serializable), linearizably if that member has not reached `revision`.
bool node_there(Connection& c, const std::string& node, std::string_view key, std::int64_t revision);

// Deletes every node of `nodes`, each if it is still as read (create and mod revisions), in one
// Txn: false, and nothing deleted, when one changed or went. Unanswered, made later.
bool remove_all_unchanged(Connection& c, Repairs* repairs, const std::vector<pb::KeyValue>& nodes,
                          std::string_view key);

// One node, if it is there.
std::optional<pb::KeyValue> read_node(Connection& c, const std::string& node, std::string_view key,
                                      std::int64_t* revision = nullptr);

}  // namespace dlock::backends::etcd
