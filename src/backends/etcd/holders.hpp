#pragma once

// Who holds in a key's queue, its nodes in create order (Curator's read-write lock and
// semaphore on one queue, as zookeeper:// does): an exclusive node holds when it is first; a
// shared one when no exclusive node precedes it and fewer than its permits do (0: no limit, a
// reader), its permits being those of the first shared node. So a writer keeps its place in
// line: readers behind it wait for it, and it waits only for those ahead. A waiter watches the
// nodes it awaits: a writer the one just before its own, a reader its nearest writer, a
// semaphore's waiter its `permits` predecessors.

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "backends/etcd/nodes.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

// A key's queue as read: its nodes in create order, each with its value.
struct Line {
  std::vector<etcdserverpb::KeyValue> nodes;
  std::vector<NodeValue> values;
  std::size_t count = 0;  // every node of the queue, read or not
};

// The values of `nodes`; throws BackendError naming a node that is not dlock's.
Line line_of(std::string_view key, std::vector<etcdserverpb::KeyValue> nodes, std::size_t count);

// Whether node `i` holds.
bool holds(const Line& line, std::size_t i);
// The nodes a waiter at `i` watches (see the top).
std::vector<std::size_t> awaited(const Line& line, std::size_t i);
// The live hold of `request`'s owner among the first `before` nodes that the request re-enters:
// either mode for a shared request, an exclusive one for an exclusive request.
std::optional<std::size_t> own_hold(const Line& line, std::size_t before,
                                    const backend::AcquireRequest& request);
// Throws InvalidArgument when a shared request at `i` asks for other permits than the shared
// nodes ahead of it.
void check_permits(const Line& line, std::size_t i, const backend::AcquireRequest& request);
// The holders among the nodes read, as Busy names them: every node before `before` that holds,
// the rest of the queue counted as their waiters.
backend::Busy busy(std::string_view key, const Line& line, std::size_t before);

}  // namespace dlock::backends::etcd
