// zookeeper://: the lock recipe of ZooKeeper's documentation (seed 003), with Curator's
// read-write lock and semaphores on the same queue. Every acquirer makes an ephemeral
// sequential node under the key's container node; an exclusive node holds when it is first, a
// shared one when no exclusive node and fewer than its permits precede it (nodes.hpp). A
// waiter watches only the nodes it awaits: a writer the two nodes just before its own, so a
// release wakes at most two writers (FIFO, no herd): the next holder, which takes the key
// without reading anything, and the one behind it, which reads the queue while the new holder
// works and so is next in line with nothing to read either; a reader its nearest writer; a
// semaphore waiter its `permits` predecessors. The session is the lease: a holder's node
// disappears when its session ends, and the holder trusts its lock only until the session
// could have expired, measured from its last answer (Acquired::lease). Fencing tokens are the
// holder node's czxid, the ensemble's transaction id, which never goes back across leader
// changes, restarts and the deletion and re-creation of the key's node (layout: nodes.hpp).

#include "backends/zookeeper/zookeeper_backend.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/zookeeper/activity.hpp"
#include "backends/zookeeper/admin.hpp"
#include "backends/zookeeper/errors.hpp"
#include "backends/zookeeper/held_nodes.hpp"
#include "backends/zookeeper/nodes.hpp"
#include "backends/zookeeper/queue.hpp"
#include "backends/zookeeper/session.hpp"
#include "backends/zookeeper/sets.hpp"
#include "backends/zookeeper/settings.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace zookeeper {
namespace {

using std::chrono::milliseconds;

// Wakes one waiting call: a node it watches before its own changed or went, or the session
// ended.
struct Signal {
  std::mutex mutex;
  std::condition_variable cv;
  bool fired = false;
  std::set<std::string> gone;      // nodes seen deleted since the call last looked
  std::set<std::string> watching;  // nodes with a watch of the call's that has not fired
  // True when `path` is not watched yet, and marks it watched.
  bool watch(const std::string& path) {
    std::lock_guard lock(mutex);
    return watching.insert(path).second;
  }
  bool watched(const std::string& path) {
    std::lock_guard lock(mutex);
    return watching.count(path) != 0;
  }
  void fire(const std::string& path, bool deleted) {
    {
      std::lock_guard lock(mutex);
      fired = true;
      watching.erase(path);
      if (deleted) gone.insert(path);
    }
    cv.notify_all();
  }
};

class ZooKeeperBackend;

class ZooKeeperBackend final : public backend::Backend {
 public:
  explicit ZooKeeperBackend(Settings settings) : settings_(std::move(settings)) { session(); }

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override {
    // A holder's node lives as long as its session: a killed holder frees the key when the
    // ensemble expires the session (the lease), a process that exits closes it at once.
    return {.spans_processes = true,
            .lease_is_the_session = true,
            .records_acquisition_time = true,
            .counts_waiters = true,
            .names_waiters = true,
            .shared_holders = true,
            .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    for (;;) {
      Look look = enqueue(request);
      std::optional<backend::AcquireResult> result;
      try {
        result = settle(request, look, nullptr);
      } catch (...) {
        // A try-once call leaves no node behind, whatever failed.
        try {
          if (!look.node.empty()) drop(*look.session, look.node, request.key);
        } catch (...) {
        }
        throw;
      }
      if (result) return *result;
    }
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;

  bool renew(const backend::LeaseRef& lease, milliseconds) override {
    auto s = session();
    auto place = find(s, lease);
    if (!place) return false;
    // Each renewal watches the node again if the last watch fired: a force-release reaches the
    // holder at once.
    auto reply = place->watched ? s->get(place->path) : s->get(place->path, held_.watch_for(lease.key, place->path));
    const int rc = reply.rc();
    if (rc == ZNONODE) {
      held_.forget(lease);
      return false;
    }
    check(rc, "renew", lease.key);
    const auto data = from_data(reply.value().data);
    if (!data || data->owner != lease.owner || data->evicted ||
        static_cast<std::uint64_t>(reply.value().stat.czxid) != lease.token) {
      return false;
    }
    held_.remember(lease, place->path, *data, reply.value().stat.version);
    return true;
  }


  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    auto s = session();
    auto place = find(s, lease);
    if (!place) return std::nullopt;
    if (place->data.evicted) {
      // The evicted holder's release acknowledges the loss: the key opens, and the answer is
      // that the lease was no longer ours.
      remove_surely(*s, place->path, -1);
      held_.forget(lease);
      return std::nullopt;
    }
    for (int attempt = 0; attempt < 100; ++attempt) {
      if (place->data.holds <= 1) {
        held_.releasing(lease);
        const auto [rc, retried] = remove_surely(*s, place->path, place->version);
        if (rc == ZOK || (rc == ZNONODE && retried)) {  // gone: by this release, if retried
          held_.forget(lease);
          return 0;
        }
        if (rc == ZNONODE) {
          held_.forget(lease);
          return std::nullopt;
        }
        if (rc != ZBADVERSION) check(rc, "release", lease.key, Write::yes);
      } else {
        NodeData data = place->data;
        --data.holds;
        auto reply = s->set(place->path, to_data(data), place->version);
        const int rc = reply.rc();
        if (rc == ZOK) {
          held_.remember(lease, place->path, data, reply.value().stat.version);
          return data.holds;
        }
        if (rc == ZNONODE) {
          held_.forget(lease);
          return std::nullopt;
        }
        if (rc != ZBADVERSION) check(rc, "release", lease.key, Write::yes);
      }
      // Changed since this client saw it: a re-entry by another client of the owner, or a
      // force-release with a lock delay, which the release acknowledges by deleting the node.
      auto reply = s->get(place->path);
      const int rc = reply.rc();
      if (rc == ZNONODE) {
        held_.forget(lease);
        return std::nullopt;
      }
      check(rc, "release", lease.key);
      const auto data = from_data(reply.value().data);
      if (!data || data->owner != lease.owner) return std::nullopt;
      place->version = reply.value().stat.version;
      place->data = *data;
      if (data->evicted) {
        s->remove(place->path, -1).rc();
        held_.forget(lease);
        return std::nullopt;
      }
    }
    throw BackendError("'" + std::string(lease.key) + "' kept changing during release", kName, std::string(lease.key),
                       true);
  }

  std::optional<backend::AcquireSetResult> acquire_set(std::span<const backend::AcquireRequest> requests) override {
    return take_set(session(), settings_.root, requests,
                    [this](const backend::AcquireRequest& request, const Look& look) { return granted(request, look); },
                    contended_);
  }

  // One transaction drops a hold of every lease whose node this client knows (sets.hpp); any
  // other is left to release(), one by one.
  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override {
    std::vector<HeldNode> nodes;
    for (const auto& lease : leases) {
      const auto place = held_.find(lease);
      if (!place || place->data.evicted) return std::nullopt;
      nodes.push_back({place->path, place->data, place->version});
    }
    for (std::size_t i = 0; i < leases.size(); ++i) {
      if (nodes[i].data.holds <= 1) held_.releasing(leases[i]);
    }
    const auto left = drop_holds(*session(), nodes, leases.front().key);
    if (!left) return std::nullopt;
    std::vector<std::optional<std::uint32_t>> answers;
    for (std::size_t i = 0; i < leases.size(); ++i) {
      const auto& node = (*left)[i];
      if (node.data.holds == 0) {
        held_.forget(leases[i]);
      } else {
        held_.remember(leases[i], node.path, node.data, node.version);
      }
      answers.emplace_back(node.data.holds);
    }
    return answers;
  }

  std::vector<LockInfo> inspect(std::string_view key) override { return inspect_key(*session(), settings_.root, key); }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return list_keys(*session(), settings_.root, prefix, after, limit);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    return evict(*session(), settings_.root, key, eviction, token);
  }

  backend::ActivityLedger* activity() noexcept override { return &activity_; }

  bool watch(std::shared_ptr<backend::Events> events) override {
    held_.report_to(std::move(events));
    return true;
  }

  void ping() override { check(session()->exists("/").rc(), "ping", {}); }

  std::size_t collect_idle() override { return remove_idle_keys(*session(), settings_.root); }

  // ---- for the waiter ----

  std::shared_ptr<Session> session() {
    std::shared_ptr<Session> old;  // destroyed by whoever drops it last, never under mutex_
    {
      std::lock_guard lock(mutex_);
      if (session_ && !session_->expired()) return session_;
    }
    // Connecting takes a round trip or more: not under mutex_. Two threads may both connect;
    // the first to finish is kept.
    auto fresh = std::make_shared<Session>(settings_.session, [this] { held_.session_expired(); });
    std::lock_guard lock(mutex_);
    if (session_ && !session_->expired()) return session_;
    old = std::exchange(session_, std::move(fresh));
    return session_;
  }

  // The answer to an attempt from its look: Acquired, a re-entry, or Busy. Without a waiting
  // call (`wake` null) the caller's node is removed again unless it holds. Nothing when the
  // attempt must be made again (the queue changed under it).
  std::optional<backend::AcquireResult> settle(const backend::AcquireRequest& request, Look& look,
                                               const std::shared_ptr<Signal>& wake) {
    Session& s = *look.session;
    const std::string dir = key_path(request.key) + "/";
    std::vector<std::pair<std::string, Reply<Node>>> owned;
    for (const auto i : own_holds(look, request)) {
      const std::string path = dir + look.queue[i].name;
      owned.emplace_back(path, s.get(path));
    }
    for (auto& [path, reply] : owned) {
      if (reply.rc() == ZNONODE) continue;
      check(reply.rc(), "acquire", request.key);
      const auto data = from_data(reply.value().data);
      if (data && data->owner == request.owner && !data->evicted) {
        return reenter(request, look, path, *data, reply.value().stat);
      }
    }
    check_permits(request, look);
    if (!holds(look.queue, look.index)) return busy(request, look, wake);
    return granted(request, look);
  }

  // The caller's node holds: the lease's now, watched for a force-release.
  backend::Acquired granted(const backend::AcquireRequest& request, const Look& look) {
    const auto token = static_cast<std::uint64_t>(look.stat.czxid);
    const backend::LeaseRef lease{request.key, request.owner, token};
    held_.remember(lease, look.node, look.data, look.stat.version);
    arm(*look.session, lease);
    return backend::Acquired{token, 1, std::nullopt, look.session->timeout()};
  }

  std::string key_path(std::string_view key) const { return zookeeper::key_path(settings_.root, key); }
  Look enqueue(const backend::AcquireRequest& request) {
    return zookeeper::enqueue(session(), settings_.root, request);
  }
  bool refresh(Look& look, std::string_view key) { return zookeeper::refresh(look, settings_.root, key); }

 private:
  // Re-enters this owner's hold at `path`; the caller's own node goes.
  std::optional<backend::AcquireResult> reenter(const backend::AcquireRequest& request, Look& look,
                                                const std::string& path, NodeData data, const Stat& stat) {
    Session& s = *look.session;
    drop(s, look.node, request.key);
    look.node.clear();
    ++data.holds;
    auto set = s.set(path, to_data(data), stat.version);
    if (set.rc() == ZNONODE || set.rc() == ZBADVERSION) return std::nullopt;
    check(set.rc(), "acquire", request.key, Write::yes);
    const auto token = static_cast<std::uint64_t>(stat.czxid);
    held_.remember({request.key, request.owner, token}, path, data, set.value().stat.version);
    return backend::Acquired{token, data.holds, std::nullopt, s.timeout()};
  }

  // Busy, naming the holders (all before the caller's node). A waiting call watches the nodes
  // it awaits; a holder's read doubles as its watch.
  std::optional<backend::AcquireResult> busy(const backend::AcquireRequest& request, Look& look,
                                             const std::shared_ptr<Signal>& wake) {
    Session& s = *look.session;
    const std::string dir = key_path(request.key) + "/";
    const auto& queue = look.queue;
    Reads reads;
    for (const auto i : wake ? awaited(queue, look.index) : std::vector<std::size_t>()) {
      const std::string path = dir + queue[i].name;
      if (!wake->watch(path)) continue;
      reads.emplace(i, s.get(path, [wake, path](int type) { wake->fire(path, type == ZOO_DELETED_EVENT); }));
    }
    read_holders(s, settings_.root, request.key, look, reads);
    if (!wake) {
      drop(s, look.node, request.key);
      look.node.clear();
      return busy_from(request.key, look, reads, {});
    }
    // A watched node gone already: look again at once.
    auto answer = busy_from(request.key, look, reads, [&](std::size_t i) { wake->fire(dir + queue[i].name, true); });
    return answer ? std::move(*answer) : backend::Busy{{}, milliseconds(0)};
  }

  // The node of an acquisition: as this client remembers it, or found in the queue (another
  // client of the same owner took it).
  std::optional<Place> find(const std::shared_ptr<Session>& s, const backend::LeaseRef& lease) {
    if (auto place = held_.find(lease)) return place;
    auto names = s->children(key_path(lease.key));
    if (names.rc() == ZNONODE) return std::nullopt;
    check(names.rc(), "find", lease.key);
    const std::string tag = owner_tag(lease.owner);
    for (const auto& child : queue_of(names.value())) {
      if (child.tag != tag) continue;
      const std::string path = key_path(lease.key) + "/" + child.name;
      auto reply = s->get(path);
      if (reply.rc() != ZOK || static_cast<std::uint64_t>(reply.value().stat.czxid) != lease.token) continue;
      const auto data = from_data(reply.value().data);
      if (!data || data->owner != lease.owner) continue;
      return Place{path, *data, reply.value().stat.version};
    }
    return std::nullopt;
  }

  // Watches a new holder's node, so that a force-release reaches it at once. Not waited for:
  // the answer comes before any later request's on the session.
  void arm(Session& s, const backend::LeaseRef& lease) {
    if (auto path = held_.unwatched(lease)) s.get(*path, held_.watch_for(lease.key, *path));
  }

  const Settings settings_;
  ActivityNode activity_{[this] { return session(); }, settings_.root};
  std::mutex mutex_;  // guards session_; never held while waiting for an answer
  std::shared_ptr<Session> session_;
  HeldNodes held_;
  ContendedKeys contended_;  // which sets read their queues first (sets.hpp)
};

// A waiting call's place in the queue: its node, made by the first attempt and kept until the
// call ends, and watches on the nodes before it that it awaits.
class QueueWaiter final : public backend::Waiter {
 public:
  QueueWaiter(ZooKeeperBackend& backend, const backend::AcquireRequest& request)
      : backend_(backend),
        key_(request.key),
        owner_(request.owner),
        ttl_(request.ttl),
        mode_(request.mode),
        permits_(request.permits) {}
  ~QueueWaiter() override {
    if (look_.node.empty()) return;
    try {
      drop(*look_.session, look_.node, key_);
    } catch (...) {
      // Unreachable: the node goes with the session.
    }
  }
  QueueWaiter(const QueueWaiter&) = delete;
  QueueWaiter& operator=(const QueueWaiter&) = delete;

  backend::AcquireResult attempt() override {
    const backend::AcquireRequest request{key_, owner_, ttl_, mode_, permits_, /*waiting=*/true};
    for (;;) {
      std::set<std::string> gone;
      {
        std::lock_guard lock(signal_->mutex);
        gone.swap(signal_->gone);
      }
      const bool queued = !look_.node.empty() && look_.session == backend_.session();
      if (!queued || (!skip(gone) && !backend_.refresh(look_, key_))) {
        // First attempt, or the node went with a session that ended: queue (again).
        look_ = Look{};
        look_ = backend_.enqueue(request);
      }
      auto result = backend_.settle(request, look_, signal_);
      if (!result) continue;
      if (std::holds_alternative<backend::Acquired>(*result)) look_.node.clear();  // the lease's now
      return *result;
    }
  }

  void wait_until(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock lock(signal_->mutex);
    signal_->cv.wait_until(lock, deadline, [&] { return signal_->fired; });
    signal_->fired = false;
  }

 private:
  ZooKeeperBackend& backend_;
  const std::string key_;
  const std::string owner_;
  const milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  // Takes the nodes seen deleted out of the queue as last read, when that tells where this
  // call's node stands without reading it again. Sequence numbers only grow, so no node can
  // come before it: the nodes left before it are at most those, and it holds if it holds among
  // them; if not, that is enough when it watches every node it awaits among them.
  bool skip(const std::set<std::string>& gone) {
    if (gone.empty()) return false;
    const std::string dir = backend_.key_path(key_) + "/";
    const auto ahead = look_.queue.begin() + static_cast<std::ptrdiff_t>(look_.index);
    const auto left = std::remove_if(look_.queue.begin(), ahead,
                                     [&](const Child& child) { return gone.count(dir + child.name) != 0; });
    const auto removed = static_cast<std::size_t>(ahead - left);
    look_.queue.erase(left, ahead);
    look_.index -= removed;
    if (removed == 0) return false;
    if (holds(look_.queue, look_.index)) return true;
    const auto awaits = awaited(look_.queue, look_.index);
    return std::all_of(awaits.begin(), awaits.end(),
                       [&](std::size_t i) { return signal_->watched(dir + look_.queue[i].name); });
  }

  const std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  Look look_;
};

std::unique_ptr<backend::Waiter> ZooKeeperBackend::waiter(const backend::AcquireRequest& request) {
  return std::make_unique<QueueWaiter>(*this, request);
}

}  // namespace
}  // namespace zookeeper

std::shared_ptr<backend::Backend> make_zookeeper_backend(const core::Url& url) {
  return std::make_shared<zookeeper::ZooKeeperBackend>(zookeeper::parse_settings(url));
}

}  // namespace dlock::backends
