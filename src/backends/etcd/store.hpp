#pragma once

// The etcd:// backend (its recipe: etcd_backend.cpp), declared for its waiter
// (queue_waiter.hpp), which shares the client's session, watches and repairs, and the rules
// that settle an attempt.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/etcd/activity.hpp"
#include "backends/etcd/connection.hpp"
#include "backends/etcd/held_nodes.hpp"
#include "backends/etcd/holders.hpp"
#include "backends/etcd/nodes.hpp"
#include "backends/etcd/repairs.hpp"
#include "backends/etcd/session.hpp"
#include "backends/etcd/settings.hpp"
#include "backends/etcd/watches.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

inline constexpr const char* kLeaseGone =
    "etcd no longer had its lease when a request used it (expired or revoked)";

// How many times a call starts over when the queue changed under it before giving up.
inline constexpr int kAttempts = 100;

class EtcdBackend final : public backend::Backend {
 public:
  explicit EtcdBackend(const Settings& settings);
  ~EtcdBackend() override;

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override;
  backend::AcquireResult acquire(const backend::AcquireRequest& request) override;
  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;
  // A set of exclusive requests of one owner, in one Txn (queue.hpp's take_set_if_free); nothing
  // (the core goes key by key) for a set with a shared request, or where a busy key is held by
  // the request's owner (a re-entry reads and writes that hold first).
  std::optional<backend::AcquireSetResult> acquire_set(
      std::span<const backend::AcquireRequest> requests) override;
  // The last hold of every lease in one Txn; nothing (the core goes one by one) where a lease has
  // more holds, was evicted, is not known to this client, or changed since it last saw it.
  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override;
  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override;
  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override;
  std::vector<LockInfo> inspect(std::string_view key) override;
  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override;
  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override;
  bool watch(std::shared_ptr<backend::Events> events) override;
  backend::ActivityLedger* activity() noexcept override { return &activity_; }
  void ping() override;

  // ---- for the waiter ----

  // Makes the repairs of writes whose answer never came (repairs.hpp): before a call looks at a
  // queue, where such a node would be taken for a hold of its owner.
  void make_repairs() { repairs_.make(); }
  Repairs* repairs() { return &repairs_; }
  // The client's session, granted on first use and again after a loss.
  std::shared_ptr<Session> session();
  Connection& connection() { return *connection_; }
  Watches& watches() { return watches_; }
  const std::string& root() const { return root_; }

  // The answer to an attempt from the queue it read: its nodes up to the caller's own at `own`
  // (or the whole queue, own == its size, when the caller has no node), read at `revision`. A
  // re-entry of the owner's hold (dropping the caller's node with it), the caller's node
  // granted, or Busy. Nothing when a holder changed meanwhile.
  std::optional<backend::AcquireResult> settle(const backend::AcquireRequest& request, const Line& line,
                                               std::size_t own, std::int64_t revision);

  // The caller's node holds: the lease's now, watched for a force-release.
  // `sent`: when the request was sent that the grant rests on, if before this attempt.
  backend::Acquired granted(const backend::AcquireRequest& request, const pb::KeyValue& node,
                            const NodeValue& value, std::int64_t revision,
                            std::optional<std::chrono::steady_clock::time_point> sent = std::nullopt);

 private:
  // A node's value for `request` under session `s`.
  static NodeValue value_of(const backend::AcquireRequest& request, const Session& s);
  // The try-once exclusive acquire: the key taken if it has no node, else a re-entry or Busy.
  std::optional<backend::AcquireResult> take(const backend::AcquireRequest& request, const std::string& node,
                                             const NodeValue& value, Session& s);
  // The try-once shared acquire: its node joins the queue, and leaves it again unless it holds.
  std::optional<backend::AcquireResult> join(const backend::AcquireRequest& request, const std::string& node,
                                             const NodeValue& value, Session& s);
  // Re-enters the owner's hold at `holder`; `drop`, the caller's node, goes with it.
  std::optional<backend::AcquireResult> reenter(const backend::AcquireRequest& request,
                                                const pb::KeyValue& holder, NodeValue value,
                                                const std::string& drop);
  // The node of an acquisition: as this client remembers it, or found in the key's queue (a
  // client of the same owner took it, or re-entered it since). `revision`: the read's.
  std::optional<Place> find(const backend::LeaseRef& lease, std::int64_t* revision = nullptr);
  // An evicted holder refreshes its lease before it acts on the eviction, so that its lock delay
  // runs a whole TTL from then, as the TTL holder reports say (Session::keep_alive_then).
  void keep_alive_before_acting();
  static BackendError changing(std::string_view key, const std::string& what);

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

}  // namespace dlock::backends::etcd
