// etcd://: the lock recipe of etcd's own concurrency package, with dlock's semantics on top.
// A client's session is one lease, kept alive in the background (session.hpp); every
// acquisition or waiter puts a node of its own under that lease in the key's directory, and the
// nodes hold in create order: an exclusive one when first, shared ones together up to their
// permits (holders.hpp). A try-once exclusive acquire puts its node only if the directory is
// empty, so a busy key never sees it; a try-once shared one joins the queue and leaves it again
// when busy; a waiter joins the queue and watches only the nodes it awaits (a writer the one
// just before its own), so a release wakes one waiter (FIFO, no herd), which then reads the
// queue once. The fencing token is the holder node's create revision, which the cluster never
// reuses or lowers (restarts, leader changes). Every later write of a holder's node (re-entry,
// release, force-release) compares that create revision, so a late call cannot touch a newer
// holder.

#include "backends/etcd/etcd_backend.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/etcd/activity.hpp"
#include "backends/etcd/admin.hpp"
#include "backends/etcd/connection.hpp"
#include "backends/etcd/held_nodes.hpp"
#include "backends/etcd/holders.hpp"
#include "backends/etcd/nodes.hpp"
#include "backends/etcd/queue.hpp"
#include "backends/etcd/repairs.hpp"
#include "backends/etcd/session.hpp"
#include "backends/etcd/settings.hpp"
#include "backends/etcd/watches.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace etcd {
namespace {

using std::chrono::milliseconds;

constexpr const char* kLeaseGone = "etcd no longer had its lease when a request used it (expired or revoked)";

// How many times a call starts over when the queue changed under it before giving up.
constexpr int kAttempts = 100;

// Wakes one waiting call: a node it awaits went, or the watch stream broke. Each round of
// watches has a generation of its own, so that a watch cancelled from an earlier round that
// fires late is not taken for one of the current round.
struct Signal {
  std::mutex mutex;
  std::condition_variable cv;
  bool fired = false;
  std::uint64_t generation = 0;
  std::optional<std::int64_t> deleted_at;  // the revision of the deletion that fired this round
  void fire(std::uint64_t round, std::optional<std::int64_t> deleted) {
    {
      std::lock_guard lock(mutex);
      if (round != generation) return;
      fired = true;
      if (deleted) deleted_at = deleted;
    }
    cv.notify_all();
  }
  // A new round: what fired before is forgotten.
  std::uint64_t next_round() {
    std::lock_guard lock(mutex);
    fired = false;
    deleted_at.reset();
    return ++generation;
  }
  std::optional<std::int64_t> deletion() {
    std::lock_guard lock(mutex);
    return deleted_at;
  }
};

class EtcdBackend final : public backend::Backend {
 public:
  explicit EtcdBackend(const Settings& settings)
      : connection_(std::make_shared<Connection>(settings)), root_(settings.root) {}

  ~EtcdBackend() override {
    held_.stop_arming();
    watches_.close();  // no watch reaches held_ or a session from now on
    std::shared_ptr<Session> session;
    {
      std::lock_guard lock(mutex_);
      session.swap(session_);
    }
    session.reset();  // revokes the lease: this client's nodes go at once
  }

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override {
    // A holder's node lives as long as its client's lease, which the client keeps alive: a
    // killed holder frees the key when the cluster expires the lease, a closed client at once.
    // etcd keeps no time of a node's creation: held_for is not known.
    return {.spans_processes = true,
            .lease_is_the_session = true,
            .counts_waiters = true,
            .names_waiters = true,
            .shared_holders = true,
            .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    repairs_.make();
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      const auto s = session();
      const std::string node = new_node(root_, request.key, s->id());
      const NodeValue value = value_of(request, *s);
      std::optional<backend::AcquireResult> result;
      try {
        result = request.mode == LockMode::exclusive ? take(request, node, value, *s)
                                                     : join(request, node, value, *s);
      } catch (const LeaseGone&) {
        s->end(kLeaseGone);
        continue;  // under a new lease
      }
      if (result) return *result;
    }
    throw changing(request.key, "acquire");
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;

  // Makes the repairs of writes whose answer never came (repairs.hpp): before a call looks at a
  // queue, where such a node would be taken for a hold of its owner.
  void make_repairs() { repairs_.make(); }
  Repairs* repairs() { return &repairs_; }

  bool renew(const backend::LeaseRef& lease, milliseconds) override {
    std::int64_t revision = 0;
    const auto place = find(lease, &revision);
    if (!place) return false;
    if (place->value.evicted) {
      keep_alive_before_acting();  // as the watch does before it tells of the eviction
      return false;
    }
    // Each renewal watches the node again if the last watch fired: a force-release reaches the
    // holder at once.
    held_.remember(lease, place->node, place->value);
    held_.arm(lease, revision + 1);
    return true;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      // First as this client last saw the node, with no read: the write compares its create
      // and mod revisions, and a node changed since (a re-entry, a force-release) is read.
      auto place = attempt == 0 ? held_.find(lease) : std::nullopt;
      if (!place) place = find(lease);
      if (!place) return std::nullopt;
      if (place->value.evicted) {
        // The evicted holder's release acknowledges the loss: the key opens, and the answer is
        // that the lease was no longer ours.
        held_.releasing(lease);
        remove_node(*connection_, &repairs_, place->node.key(), place->node.create_revision(), lease.key);
        held_.forget(lease);
        return std::nullopt;
      }
      if (place->value.holds <= 1) {
        held_.releasing(lease);
        if (remove_unchanged(*connection_, &repairs_, place->node, lease.key)) {
          held_.forget(lease);
          return 0;
        }
      } else {
        NodeValue value = place->value;
        --value.holds;
        if (const auto written =
                rewrite(*connection_, &repairs_, Unanswered::redo, place->node, value, lease.key)) {
          pb::KeyValue node = place->node;
          node.set_mod_revision(*written);
          held_.remember(lease, node, value);
          return value.holds;
        }
      }
      // Changed since this client saw it (another client's re-entry, a force-release): read it
      // again.
      held_.forget(lease);
    }
    throw changing(lease.key, "release");
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    return inspect_key(*connection_, root_, key);
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return list_keys(*connection_, root_, prefix, after, limit);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    return evict(*connection_, root_, key, eviction, token);
  }

  bool watch(std::shared_ptr<backend::Events> events) override {
    held_.report_to(std::move(events));
    return true;
  }

  backend::ActivityLedger* activity() noexcept override { return &activity_; }

  void ping() override {
    pb::RangeRequest request;
    request.set_key(root_);
    request.set_serializable(true);
    request.set_count_only(true);
    connection_->range(request, "ping", {});
  }

  // ---- for the waiter ----

  // The client's session, granted on first use and again after a loss.
  std::shared_ptr<Session> session() {
    {
      std::lock_guard lock(mutex_);
      if (session_ && !session_->over()) return session_;
    }
    // A grant is a round trip: not under mutex_. Two threads may both grant; the first to
    // finish is kept, the other's lease revoked.
    auto fresh =
        std::make_shared<Session>(connection_, [this](const std::string& why) { held_.session_lost(why); });
    std::shared_ptr<Session> old;  // destroyed outside mutex_
    std::lock_guard lock(mutex_);
    if (session_ && !session_->over()) return session_;
    old = std::exchange(session_, std::move(fresh));
    return session_;
  }

  Connection& connection() { return *connection_; }
  Watches& watches() { return watches_; }
  const std::string& root() const { return root_; }

  // A node's value for `request` under session `s`.
  static NodeValue value_of(const backend::AcquireRequest& request, const Session& s) {
    return NodeValue{std::string(request.owner), 1, s.ttl(), false, request.mode, request.permits};
  }

  // The answer to an attempt from the queue it read: its nodes up to the caller's own at `own`
  // (or the whole queue, own == its size, when the caller has no node), read at `revision`. A
  // re-entry of the owner's hold (dropping the caller's node with it), the caller's node
  // granted, or Busy. Nothing when a holder changed meanwhile.
  std::optional<backend::AcquireResult> settle(const backend::AcquireRequest& request, const Line& line,
                                               std::size_t own, std::int64_t revision) {
    const bool has_node = own < line.nodes.size();
    if (const auto held = own_hold(line, own, request)) {
      return reenter(request, line.nodes[*held], line.values[*held], has_node ? line.nodes[own].key() : "");
    }
    check_permits(line, own, request);
    if (has_node && holds(line, own)) return granted(request, line.nodes[own], line.values[own], revision);
    return busy(request.key, line, own);
  }

  // The caller's node holds: the lease's now, watched for a force-release.
  // `sent`: when the request was sent that the grant rests on, if before this attempt.
  backend::Acquired granted(const backend::AcquireRequest& request, const pb::KeyValue& node,
                            const NodeValue& value, std::int64_t revision,
                            std::optional<std::chrono::steady_clock::time_point> sent = std::nullopt) {
    const auto token = static_cast<std::uint64_t>(node.create_revision());
    const backend::LeaseRef lease{request.key, request.owner, token};
    held_.remember(lease, node, value);
    held_.arm_later(lease, revision + 1);
    return backend::Acquired{token, 1, sent, value.ttl};
  }

 private:
  // The try-once exclusive acquire: the key taken if it has no node, else a re-entry or Busy.
  std::optional<backend::AcquireResult> take(const backend::AcquireRequest& request, const std::string& node,
                                             const NodeValue& value, Session& s) {
    Take take = take_if_free(*connection_, &repairs_, root_, request.key, node, value, s.id());
    if (take.taken) {
      pb::KeyValue made;
      made.set_key(node);
      made.set_create_revision(*take.taken);
      made.set_mod_revision(*take.taken);
      return granted(request, made, value, *take.taken);
    }
    const Line line = line_of(request.key, std::move(take.queue.nodes), take.queue.count);
    return settle(request, line, line.nodes.size(), take.queue.revision);
  }

  // The try-once shared acquire: its node joins the queue, and leaves it again unless it holds.
  std::optional<backend::AcquireResult> join(const backend::AcquireRequest& request, const std::string& node,
                                             const NodeValue& value, Session& s) {
    Queue queue = join_queue(*connection_, &repairs_, root_, request.key, node, value, s.id());
    const std::int64_t created = queue.revision;
    std::optional<backend::AcquireResult> result;
    try {
      const Line line = line_of(request.key, std::move(queue.nodes), queue.count);
      const auto own =
          static_cast<std::size_t>(std::find_if(line.nodes.begin(), line.nodes.end(),
                                                [&](const pb::KeyValue& n) { return n.key() == node; }) -
                                   line.nodes.begin());
      result = settle(request, line, own, queue.revision);
    } catch (...) {
      remove_node(*connection_, &repairs_, node, created, request.key);
      throw;
    }
    const auto* acquired = result ? std::get_if<backend::Acquired>(&*result) : nullptr;
    // Granted, the node is the hold; re-entered, it went with the re-entry.
    if (!acquired) remove_node(*connection_, &repairs_, node, created, request.key);
    return result;
  }

  // Re-enters the owner's hold at `holder`; `drop`, the caller's node, goes with it.
  std::optional<backend::AcquireResult> reenter(const backend::AcquireRequest& request,
                                                const pb::KeyValue& holder, NodeValue value,
                                                const std::string& drop) {
    ++value.holds;
    const auto written = rewrite(*connection_, &repairs_, Unanswered::undo, holder, value, request.key, drop);
    if (!written) return std::nullopt;
    pb::KeyValue node = holder;
    node.set_mod_revision(*written);
    const auto token = static_cast<std::uint64_t>(holder.create_revision());
    held_.remember({request.key, request.owner, token}, node, value);
    return backend::Acquired{token, value.holds, std::nullopt, value.ttl};
  }

  // The node of an acquisition: as this client remembers it, or found in the key's queue (a
  // client of the same owner took it, or re-entered it since). `revision`: the read's.
  std::optional<Place> find(const backend::LeaseRef& lease, std::int64_t* revision = nullptr) {
    const auto known = held_.find(lease);
    std::optional<pb::KeyValue> node;
    if (known) {
      node = read_node(*connection_, known->node.key(), lease.key, revision);
    } else {
      node = read_created(*connection_, root_, lease.key, static_cast<std::int64_t>(lease.token), revision);
    }
    if (!node || static_cast<std::uint64_t>(node->create_revision()) != lease.token) {
      held_.forget(lease);
      return std::nullopt;
    }
    const auto value = from_value(node->value());
    if (!value || value->owner != lease.owner) return std::nullopt;
    return Place{*node, *value};
  }

  // An evicted holder refreshes its lease before it acts on the eviction, so that its lock delay
  // runs a whole TTL from then, as the TTL holder reports say (Session::keep_alive_then).
  void keep_alive_before_acting() {
    std::shared_ptr<Session> s;
    {
      std::lock_guard lock(mutex_);
      s = session_;
    }
    if (s && !s->over()) {
      connection_->keep_alive(s->id(),
                              std::chrono::steady_clock::now() + connection_->settings().connect_timeout);
    }
  }

  static BackendError changing(std::string_view key, const std::string& what) {
    return BackendError("'" + std::string(key) + "' kept changing during " + what, kName, std::string(key),
                        true);
  }

  const std::shared_ptr<Connection> connection_;
  const std::string root_;
  std::mutex mutex_;  // guards session_; never held while waiting for an answer
  std::shared_ptr<Session> session_;
  Repairs repairs_{connection_};
  ActivityKey activity_{connection_, root_};
  Watches watches_{connection_};
  HeldNodes held_{watches_, [this](std::function<void()> notice) {
                    std::shared_ptr<Session> s;
                    {
                      std::lock_guard lock(mutex_);
                      s = session_;
                    }
                    if (s) {
                      s->keep_alive_then(std::move(notice));
                    } else {
                      notice();
                    }
                  }};
};

// A waiting call's place in the queue: its node, made by the first attempt and kept until the
// call ends, and a watch on the node just before it.
class QueueWaiter final : public backend::Waiter {
 public:
  QueueWaiter(EtcdBackend& backend, const backend::AcquireRequest& request)
      : backend_(backend),
        key_(request.key),
        owner_(request.owner),
        ttl_(request.ttl),
        mode_(request.mode),
        permits_(request.permits) {}
  ~QueueWaiter() override {
    cancel_watches();
    if (node_.empty()) return;
    try {
      remove_node(backend_.connection(), backend_.repairs(), node_, created_, key_);
    } catch (...) {
      // Left to the repairs.
    }
  }
  QueueWaiter(const QueueWaiter&) = delete;
  QueueWaiter& operator=(const QueueWaiter&) = delete;

  backend::AcquireResult attempt() override {
    backend_.make_repairs();
    const backend::AcquireRequest request{key_, owner_, ttl_, mode_, permits_, /*waiting=*/true};
    if (auto taken = take_over(request)) return *taken;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      cancel_watches();
      Queue queue;
      if (!node_.empty()) {
        // The nodes up to this call's own: the holders, and those it waits for.
        queue = read_queue_ahead(backend_.connection(), backend_.root(), key_, created_);
        if (queue.nodes.empty() || queue.nodes.back().key() != node_) node_.clear();  // gone with its lease
      }
      if (node_.empty()) {
        session_ = backend_.session();
        node_ = new_node(backend_.root(), key_, session_->id());
        value_ = NodeValue{owner_, 1, session_->ttl(), false, mode_, permits_};
        try {
          queue = join_queue(backend_.connection(), backend_.repairs(), backend_.root(), key_, node_, value_,
                             session_->id());
        } catch (const LeaseGone&) {
          node_.clear();
          session_->end(kLeaseGone);
          continue;  // under a new lease
        } catch (const Error&) {
          node_.clear();  // left to the repairs
          throw;
        }
        created_ = queue.revision;
        const auto own = std::find_if(queue.nodes.begin(), queue.nodes.end(),
                                      [&](const pb::KeyValue& node) { return node.key() == node_; });
        queue.nodes.erase(own + 1, queue.nodes.end());
      }
      const Line line = line_of(key_, std::move(queue.nodes), static_cast<std::size_t>(queue.count));
      const std::size_t own = line.nodes.size() - 1;
      auto result = backend_.settle(request, line, own, queue.revision);
      if (!result) continue;  // a holder changed meanwhile
      if (std::holds_alternative<backend::Acquired>(*result)) {
        node_.clear();  // the lease's now, or deleted by the re-entry
        return *result;
      }
      // Busy: wait for the nodes it awaits (a node behind never holds first).
      if (!watch_awaited(line, own, queue.revision)) continue;  // one went meanwhile: look again
      sole_ahead_ = own == 1;
      return *result;
    }
    throw BackendError("'" + key_ + "' kept changing while waiting", kName, key_, true);
  }

  void wait_until(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock lock(signal_->mutex);
    signal_->cv.wait_until(lock, deadline, [&] { return signal_->fired; });
    signal_->fired = false;
  }

 private:
  void cancel_watches() {
    for (const auto handle : watches_) backend_.watches().cancel(handle);
    watches_.clear();
    round_ = signal_->next_round();
    sole_ahead_ = false;
  }

  // Watches the nodes a waiter at `own` awaits for their deletion after the read at `revision`.
  // The watches start from the cluster's revision when they are made, so that their events come
  // at once (a watch from the past waits for the cluster's catch-up loop, up to 100 ms), and a
  // node deleted between the read and the watch is looked for. False when one is gone.
  bool watch_awaited(const Line& line, std::size_t own, std::int64_t revision) {
    const auto nodes = awaited(line, own);
    for (const std::size_t i : nodes) {
      watches_.push_back(
          backend_.watches().watch(line.nodes[i].key(), 0, /*any_change=*/false,
                                   [signal = signal_, round = round_](std::optional<std::int64_t> deleted) {
                                     signal->fire(round, deleted);
                                   }));
    }
    const auto deadline = std::chrono::steady_clock::now() + backend_.connection().settings().connect_timeout;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const auto created = backend_.watches().created_at(watches_[n], deadline);
      if (!created) return true;  // fired or broken: the signal says so
      if (*created > revision &&
          !node_there(backend_.connection(), line.nodes[nodes[n]].key(), key_, *created)) {
        return false;
      }
    }
    return true;
  }

  // The handoff on a deletion, without reading the queue: nodes ahead only ever go (a later node
  // is created later), so when the one node ahead of this call's own was deleted, its node is
  // first; an exclusive waiter further back learns it is first from one count of the nodes older
  // than its own. Its node lives as long as its session's lease, which nothing else deletes while
  // it waits: the hold is trusted from the last confirmation of that lease (Acquired::sent).
  // Nothing when that is not known, and the caller reads the queue.
  std::optional<backend::AcquireResult> take_over(const backend::AcquireRequest& request) {
    if (node_.empty() || session_->over()) return std::nullopt;
    const auto deleted_at = signal_->deletion();
    if (!deleted_at) return std::nullopt;
    const auto trusted_since = session_->trusted_since();
    std::int64_t revision = *deleted_at;
    if (!sole_ahead_) {
      if (mode_ != LockMode::exclusive) return std::nullopt;
      const auto first = first_in_line(backend_.connection(), backend_.root(), key_, created_);
      if (!first) return std::nullopt;
      revision = *first;
    }
    cancel_watches();
    pb::KeyValue own;
    own.set_key(node_);
    own.set_create_revision(created_);
    own.set_mod_revision(created_);  // a waiter's node is never written after its creation
    own.set_value(to_value(value_));
    node_.clear();  // the lease's now
    return backend_.granted(request, own, value_, revision, trusted_since);
  }

  EtcdBackend& backend_;
  const std::string key_;
  const std::string owner_;
  const milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  std::shared_ptr<Session> session_;  // the lease its node lives under
  std::string node_;                  // its node, while it waits
  std::int64_t created_ = 0;          // that node's create revision
  NodeValue value_;                   // what it holds
  std::vector<Watches::Handle> watches_;
  bool sole_ahead_ = false;  // the watches are on the one node ahead of its own
  const std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::uint64_t round_ = 0;  // the generation of the current watches
};

std::unique_ptr<backend::Waiter> EtcdBackend::waiter(const backend::AcquireRequest& request) {
  return std::make_unique<QueueWaiter>(*this, request);
}

}  // namespace
}  // namespace etcd

std::shared_ptr<backend::Backend> make_etcd_backend(const core::Url& url) {
  return std::make_shared<etcd::EtcdBackend>(etcd::parse_settings(url));
}

}  // namespace dlock::backends
