#include "backends/etcd/queue_waiter.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/etcd/queue.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

using std::chrono::milliseconds;

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

}  // namespace

std::unique_ptr<backend::Waiter> make_queue_waiter(EtcdBackend& backend,
                                                   const backend::AcquireRequest& request) {
  return std::make_unique<QueueWaiter>(backend, request);
}

}  // namespace dlock::backends::etcd
