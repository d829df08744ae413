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
#include <utility>

#include "backends/etcd/admin.hpp"
#include "backends/etcd/queue.hpp"
#include "backends/etcd/queue_waiter.hpp"
#include "backends/etcd/store.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace etcd {

EtcdBackend::EtcdBackend(const Settings& settings)
    : connection_(std::make_shared<Connection>(settings)), root_(settings.root) {}

EtcdBackend::~EtcdBackend() {
  held_.stop_arming();
  watches_.close();  // no watch reaches held_ or a session from now on
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(mutex_);
    session.swap(session_);
  }
  session.reset();  // revokes the lease: this client's nodes go at once
}

backend::Capabilities EtcdBackend::capabilities() const noexcept {
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

backend::AcquireResult EtcdBackend::acquire(const backend::AcquireRequest& request) {
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

std::optional<backend::AcquireSetResult> EtcdBackend::acquire_set(
    std::span<const backend::AcquireRequest> requests) {
  for (const auto& request : requests) {
    if (request.mode != LockMode::exclusive || request.owner != requests.front().owner) return std::nullopt;
  }
  repairs_.make();
  std::vector<std::string> keys;
  for (const auto& request : requests) keys.emplace_back(request.key);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const auto s = session();
    std::vector<std::string> nodes;
    for (const auto& key : keys) nodes.push_back(new_node(root_, key, s->id()));
    const NodeValue value = value_of(requests.front(), *s);
    TakeSet take;
    try {
      take = take_set_if_free(*connection_, &repairs_, root_, keys, nodes, value, s->id());
    } catch (const LeaseGone&) {
      s->end(kLeaseGone);
      continue;  // under a new lease
    }
    if (take.taken) {
      std::vector<backend::Acquired> granted_all;
      for (std::size_t i = 0; i < requests.size(); ++i) {
        pb::KeyValue made;
        made.set_key(nodes[i]);
        made.set_create_revision(*take.taken);
        made.set_mod_revision(*take.taken);
        granted_all.push_back(granted(requests[i], made, value, *take.taken));
      }
      return granted_all;
    }
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (take.queues[i].nodes.empty()) continue;
      const Line line = line_of(keys[i], std::move(take.queues[i].nodes), take.queues[i].count);
      if (own_hold(line, line.nodes.size(), requests[i])) return std::nullopt;
      return backend::SetBusy{i, busy(keys[i], line, line.nodes.size())};
    }
    // Every key was free by the time it was read: again.
  }
  throw changing(keys.front(), "acquire");
}

std::optional<std::vector<std::optional<std::uint32_t>>> EtcdBackend::release_set(
    std::span<const backend::LeaseRef> leases) {
  std::vector<pb::KeyValue> nodes;
  for (const auto& lease : leases) {
    const auto place = held_.find(lease);
    if (!place || place->value.holds != 1 || place->value.evicted) return std::nullopt;
    nodes.push_back(place->node);
  }
  for (const auto& lease : leases) held_.releasing(lease);
  if (!remove_all_unchanged(*connection_, &repairs_, nodes, leases.front().key)) return std::nullopt;
  for (const auto& lease : leases) held_.forget(lease);
  return std::vector<std::optional<std::uint32_t>>(leases.size(), 0u);
}

bool EtcdBackend::renew(const backend::LeaseRef& lease, std::chrono::milliseconds) {
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

std::optional<std::uint32_t> EtcdBackend::release(const backend::LeaseRef& lease) {
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

std::vector<LockInfo> EtcdBackend::inspect(std::string_view key) {
  return inspect_key(*connection_, root_, key);
}

ListPage EtcdBackend::list(std::string_view prefix, std::string_view after, std::size_t limit) {
  return list_keys(*connection_, root_, prefix, after, limit);
}

std::vector<LockInfo> EtcdBackend::force_release(std::string_view key, Eviction eviction,
                                                 std::optional<std::uint64_t> token) {
  return evict(*connection_, root_, key, eviction, token);
}

bool EtcdBackend::watch(std::shared_ptr<backend::Events> events) {
  held_.report_to(std::move(events));
  return true;
}

void EtcdBackend::ping() {
  pb::RangeRequest request;
  request.set_key(root_);
  request.set_serializable(true);
  request.set_count_only(true);
  connection_->range(request, "ping", {});
}

std::shared_ptr<Session> EtcdBackend::session() {
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

std::optional<backend::AcquireResult> EtcdBackend::settle(const backend::AcquireRequest& request,
                                                          const Line& line, std::size_t own,
                                                          std::int64_t revision) {
  const bool has_node = own < line.nodes.size();
  if (const auto held = own_hold(line, own, request)) {
    return reenter(request, line.nodes[*held], line.values[*held], has_node ? line.nodes[own].key() : "");
  }
  check_permits(line, own, request);
  if (has_node && holds(line, own)) return granted(request, line.nodes[own], line.values[own], revision);
  return busy(request.key, line, own);
}

backend::Acquired EtcdBackend::granted(const backend::AcquireRequest& request, const pb::KeyValue& node,
                                       const NodeValue& value, std::int64_t revision,
                                       std::optional<std::chrono::steady_clock::time_point> sent) {
  const auto token = static_cast<std::uint64_t>(node.create_revision());
  const backend::LeaseRef lease{request.key, request.owner, token};
  held_.remember(lease, node, value);
  held_.arm_later(lease, revision + 1);
  return backend::Acquired{token, 1, sent, value.ttl};
}

NodeValue EtcdBackend::value_of(const backend::AcquireRequest& request, const Session& s) {
  return NodeValue{std::string(request.owner), 1, s.ttl(), false, request.mode, request.permits};
}

std::optional<backend::AcquireResult> EtcdBackend::take(const backend::AcquireRequest& request,
                                                        const std::string& node, const NodeValue& value,
                                                        Session& s) {
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

std::optional<backend::AcquireResult> EtcdBackend::join(const backend::AcquireRequest& request,
                                                        const std::string& node, const NodeValue& value,
                                                        Session& s) {
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

std::optional<backend::AcquireResult> EtcdBackend::reenter(const backend::AcquireRequest& request,
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

std::optional<Place> EtcdBackend::find(const backend::LeaseRef& lease, std::int64_t* revision) {
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

void EtcdBackend::keep_alive_before_acting() {
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

BackendError EtcdBackend::changing(std::string_view key, const std::string& what) {
  return BackendError("'" + std::string(key) + "' kept changing during " + what, kName, std::string(key),
                      true);
}

std::unique_ptr<backend::Waiter> EtcdBackend::waiter(const backend::AcquireRequest& request) {
  return make_queue_waiter(*this, request);
}

}  // namespace etcd

std::shared_ptr<backend::Backend> make_etcd_backend(const core::Url& url) {
  return std::make_shared<etcd::EtcdBackend>(etcd::parse_settings(url));
}

}  // namespace dlock::backends
