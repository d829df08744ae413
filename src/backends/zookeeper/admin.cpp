#include "backends/zookeeper/admin.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "backends/zookeeper/errors.hpp"
#include "backends/zookeeper/nodes.hpp"
#include "backends/zookeeper/queue.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {

std::vector<LockInfo> inspect_key(Session& s, const std::string& root, std::string_view key) {
  for (;;) {
    auto names = s.children(key_path(root, key));
    if (names.rc() == ZNONODE) return {};
    check(names.rc(), "inspect", key);
    const auto queue = queue_of(names.value());
    if (queue.empty()) return {};
    if (auto infos = holders(s, root, key, queue); !infos.empty()) return infos;
  }
}

ListPage list_keys(Session& s, const std::string& root, std::string_view prefix, std::string_view after,
                   std::size_t limit) {
  ListPage page;
  if (limit == 0) return page;
  auto names = s.children(root);
  if (names.rc() == ZNONODE) return page;
  check(names.rc(), "list", prefix);
  std::vector<std::string> keys;
  for (const auto& name : names.value()) {
    auto key = decode_key(name);
    if (!key || key->compare(0, prefix.size(), prefix) != 0 || (!after.empty() && *key <= after)) continue;
    keys.push_back(std::move(*key));
  }
  std::sort(keys.begin(), keys.end());
  constexpr std::size_t kBatch = 64;  // requests in flight at once
  std::size_t listed = 0;  // keys
  for (std::size_t start = 0; start < keys.size(); start += kBatch) {
    const std::size_t end = std::min(keys.size(), start + kBatch);
    std::vector<Reply<std::vector<std::string>>> queues;
    for (std::size_t i = start; i < end; ++i) queues.push_back(s.children(key_path(root, keys[i])));
    for (std::size_t i = start; i < end; ++i) {
      auto& reply = queues[i - start];
      if (reply.rc() == ZNONODE) continue;
      check(reply.rc(), "list", keys[i]);
      const auto queue = queue_of(reply.value());
      if (queue.empty()) continue;
      auto infos = holders(s, root, keys[i], queue);
      if (infos.empty()) continue;  // released meanwhile
      if (listed == limit) {
        page.next_after = page.locks.back().key;
        return page;
      }
      ++listed;
      std::move(infos.begin(), infos.end(), std::back_inserter(page.locks));
    }
  }
  return page;
}

std::vector<LockInfo> evict(Session& s, const std::string& root, std::string_view key, Eviction eviction,
                            std::optional<std::uint64_t> token) {
  const std::string dir = key_path(root, key) + "/";
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto names = s.children(key_path(root, key));
    if (names.rc() == ZNONODE) return {};
    check(names.rc(), "force-release", key);
    const auto queue = queue_of(names.value());
    std::vector<std::pair<std::string, Reply<Node>>> held;
    for (std::size_t i = 0; i < queue.size(); ++i) {
      if (holds(queue, i)) held.emplace_back(dir + queue[i].name, s.get(dir + queue[i].name));
    }
    if (held.empty()) return {};
    std::vector<std::pair<LockInfo, std::optional<Reply<Node>>>> evictions;
    for (auto& [path, reply] : held) {
      if (reply.rc() == ZNONODE) continue;
      check(reply.rc(), "force-release", key);
      auto data = from_data(reply.value().data);
      if (!data) continue;
      LockInfo info = to_info(key, reply.value().stat, *data, queue.size() - held.size());
      if (token && info.token != *token) continue;
      std::optional<Reply<Node>> done;
      if (eviction == Eviction::immediate) {
        done = s.remove(path, -1);
      } else if (!data->evicted) {
        // Unversioned: whatever its hold count is now, the node is this holder's, and an
        // evicted holder's count is 0.
        data->evicted = true;
        done = s.set(path, to_data(*data), -1);
      }
      evictions.emplace_back(std::move(info), std::move(done));
    }
    std::vector<LockInfo> evicted;
    for (auto& [info, done] : evictions) {
      if (done && done->rc() == ZNONODE) continue;  // released first
      if (done) check(done->rc(), "force-release", key);
      evicted.push_back(std::move(info));
    }
    if (evicted.empty() && !token) continue;  // every holder went meanwhile: the next ones hold now
    return evicted;
  }
  throw BackendError("'" + std::string(key) + "' kept changing hands during force-release", kName, std::string(key),
                     true);
}

std::size_t remove_idle_keys(Session& s, const std::string& root) {
  auto names = s.children(root);
  if (names.rc() == ZNONODE) return 0;
  check(names.rc(), "collect_idle", {});
  std::vector<Reply<Node>> removals;
  for (const auto& name : names.value()) {
    if (decode_key(name)) removals.push_back(s.remove(root + "/" + name, -1));  // not the ledger
  }
  return static_cast<std::size_t>(
      std::count_if(removals.begin(), removals.end(), [](const Reply<Node>& r) { return r.rc() == ZOK; }));
}

}  // namespace dlock::backends::zookeeper
