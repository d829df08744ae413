#include "backends/etcd/admin.hpp"

#include <algorithm>
#include <map>

#include "backends/etcd/holders.hpp"
#include "backends/etcd/nodes.hpp"
#include "backends/etcd/queue.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

// A queue (its nodes in create order) as an administrator sees it: nodes that are not dlock's
// are passed over rather than refused.
Line admin_line(std::string_view key, const std::vector<pb::KeyValue>& nodes, std::int64_t count) {
  std::vector<pb::KeyValue> ours;
  for (const auto& node : nodes) {
    if (from_value(node.value())) ours.push_back(node);
  }
  return line_of(key, std::move(ours), static_cast<std::size_t>(count));
}

// The holders of a queue, with the waiters behind them named.
std::vector<LockInfo> holders_of(std::string_view key, const Line& line) {
  std::vector<LockInfo> holders;
  std::vector<std::string> queue;
  for (std::size_t i = 0; i < line.nodes.size(); ++i) {
    if (holds(line, i)) {
      holders.push_back(to_info(key, line.nodes[i], line.values[i], 0));
    } else if (queue.size() < kQueueShown) {
      queue.push_back(line.values[i].owner);
    }
  }
  for (auto& holder : holders) {
    holder.waiters = static_cast<std::uint32_t>(line.count - holders.size());
    holder.queue = queue;
  }
  return holders;
}

}  // namespace

std::vector<LockInfo> inspect_key(Connection& c, const std::string& root, std::string_view key) {
  const Queue queue = read_queue(c, root, key);
  return holders_of(key, admin_line(key, queue.nodes, queue.count));
}

ListPage list_keys(Connection& c, const std::string& root, std::string_view prefix, std::string_view after,
                   std::size_t limit) {
  ListPage page;
  if (limit == 0) return page;
  const std::string from = keys_from(root, prefix);
  pb::RangeRequest request;
  request.set_key(from);
  request.set_range_end(prefix_end(from));
  const auto range = c.range(request, "list", prefix);
  std::map<std::string, std::vector<pb::KeyValue>> queues;  // by key, in byte order
  std::size_t listed = 0;                                   // keys
  for (const auto& node : range.kvs()) {
    auto key = key_of_node(root, node.key());
    if (!key || key->compare(0, prefix.size(), prefix) != 0 || (!after.empty() && *key <= after)) continue;
    queues[*key].push_back(node);
  }
  for (auto& [key, nodes] : queues) {
    std::sort(nodes.begin(), nodes.end(), [](const pb::KeyValue& a, const pb::KeyValue& b) {
      return a.create_revision() < b.create_revision();
    });
    auto holders = holders_of(key, admin_line(key, nodes, static_cast<std::int64_t>(nodes.size())));
    if (holders.empty()) continue;
    if (listed == limit) {
      page.next_after = page.locks.back().key;
      return page;
    }
    ++listed;
    page.locks.insert(page.locks.end(), holders.begin(), holders.end());
  }
  return page;
}

std::vector<LockInfo> evict(Connection& c, const std::string& root, std::string_view key, Eviction eviction,
                            std::optional<std::uint64_t> token) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const Queue queue = read_queue(c, root, key);
    const Line line = admin_line(key, queue.nodes, queue.count);
    const auto holders = holders_of(key, line);
    if (holders.empty()) return {};
    std::vector<LockInfo> evicted;
    for (std::size_t i = 0, h = 0; i < line.nodes.size(); ++i) {
      if (!holds(line, i)) continue;
      const LockInfo& info = holders[h++];
      if (token && info.token != *token) continue;
      bool done = true;
      if (eviction == Eviction::immediate) {
        done = remove_node(c, nullptr, line.nodes[i].key(), line.nodes[i].create_revision(), key);
      } else if (!line.values[i].evicted) {
        // Whatever its hold count is now: the node is this holder's, and an evicted holder's count is 0.
        NodeValue value = line.values[i];
        value.evicted = true;
        done = mark_evicted(c, line.nodes[i], value, key);
      }
      if (done) evicted.push_back(info);  // else released first
    }
    if (evicted.empty() && !token) continue;  // every holder went meanwhile: the next ones hold now
    return evicted;
  }
  throw BackendError("'" + std::string(key) + "' kept changing hands during force-release", kName,
                     std::string(key), true);
}

}  // namespace dlock::backends::etcd
