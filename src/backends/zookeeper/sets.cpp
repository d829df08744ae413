#include "backends/zookeeper/sets.hpp"

#include <algorithm>
#include <utility>

#include "backends/zookeeper/errors.hpp"

namespace dlock::backends::zookeeper {
namespace {

// Sends `ops` again while the connection breaks and the session comes back, as remove_surely()
// does: the answer, and whether it was sent again.
std::pair<Reply<std::vector<OpResult>>, bool> multi_surely(Session& s, const std::vector<Op>& ops) {
  auto reply = s.multi(ops);
  bool retried = false;
  for (int attempt = 0; lost_connection(reply.rc()) && attempt < 5 && reconnected(s); ++attempt) {
    retried = true;
    reply = s.multi(ops);
  }
  return {reply, retried};
}

// Removes the looks' nodes in one transaction (one by one if one is gone already); throws
// ConnectionError as drop() does. `key`: for errors.
void drop_set(Session& s, std::vector<Look>& looks, std::string_view key) {
  std::vector<Op> ops;
  for (const auto& look : looks) {
    if (!look.node.empty()) ops.push_back({.kind = Op::Kind::remove, .path = look.node});
  }
  if (!ops.empty() && multi_surely(s, ops).first.rc() != ZOK) {
    // One was gone (force-released, or removed by a send whose answer was lost): the others.
    for (const auto& look : looks) drop(s, look.node, key);
  }
  for (auto& look : looks) look.node.clear();
}

// Makes the caller's node in every request's queue, all or none (the key nodes first where
// missing, as enqueue() does), and reads every queue: one round trip. One Look per request, in
// order; the nodes' czxid, their token, is the transaction's zxid.
std::vector<Look> enqueue_set(const std::shared_ptr<Session>& session, const std::string& root,
                              std::span<const backend::AcquireRequest> requests) {
  Session& s = *session;
  // One attempt tag for the set: a transaction whose answer was lost is found again by it.
  const std::string attempt_id = attempt_tag();
  std::vector<Look> looks(requests.size());
  std::vector<Op> ops;
  std::vector<std::string_view> keys;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& request = requests[i];
    looks[i].session = session;
    looks[i].data = {.owner = std::string(request.owner),
                     .session_timeout = s.timeout(),
                     .mode = request.mode,
                     .permits = request.permits};
    ops.push_back({.kind = Op::Kind::create,
                   .path = key_path(root, request.key) + "/" +
                           node_prefix(owner_tag(request.owner), attempt_id, request.mode, request.permits),
                   .data = to_data(looks[i].data),
                   .mode = ZOO_EPHEMERAL_SEQUENTIAL});
    keys.push_back(request.key);
  }
  // The C client's transaction answers a create with its path alone; a set in it answers with
  // a Stat whose mzxid is the transaction's zxid, the czxid of every node it makes. It writes
  // the first key's node, whose data no one reads.
  ops.push_back({.kind = Op::Kind::set, .path = key_path(root, requests.front().key)});
  for (int attempt = 0;; ++attempt) {
    auto made = s.multi(ops);
    std::vector<Reply<std::vector<std::string>>> names;
    for (const auto key : keys) names.push_back(s.children(key_path(root, key)));
    const int rc = made.rc();
    if (rc == ZNONODE && attempt < 3) {
      make_key_nodes(s, root, keys);
      continue;
    }
    if (lost_connection(rc) && attempt < 3 && reconnected(s)) {
      // The transaction may have been made: find its nodes by their attempt tag, or make them
      // now (removing any found: one went since).
      bool all = true;
      for (std::size_t i = 0; i < looks.size(); ++i) all = found(looks[i], root, keys[i], attempt_id) && all;
      if (all) return looks;
      drop_set(s, looks, keys.front());
      continue;
    }
    check(rc, "acquire", keys.front(), Write::yes);
    for (std::size_t i = 0; i < looks.size(); ++i) {
      looks[i].node = made.value()[i].path;
      looks[i].stat.czxid = made.value().back().stat.mzxid;
      take_queue(looks[i], names[i], keys[i]);
    }
    return looks;
  }
}

// What a set's looks say, request by request in order, by the single key's rules.
struct SetVerdict {
  bool reenters = false;            // a request may re-enter a hold of its owner
  std::optional<std::size_t> busy;  // else the first request whose node does not hold
};

// Throws InvalidArgument as check_permits() does.
SetVerdict judge(std::span<const backend::AcquireRequest> requests, const std::vector<Look>& looks) {
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!own_holds(looks[i], requests[i]).empty()) return {.reenters = true};
    check_permits(requests[i], looks[i]);
    if (!holds(looks[i].queue, looks[i].index)) return {.busy = i};
  }
  return {};
}

// Whether no key of the set has a node in its queue, all read in one round trip; a key found
// busy is remembered.
bool queues_empty(Session& s, const std::string& root, std::span<const backend::AcquireRequest> requests,
                  ContendedKeys& contended) {
  std::vector<Reply<std::vector<std::string>>> names;
  for (const auto& request : requests) names.push_back(s.children(key_path(root, request.key)));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int rc = names[i].rc();
    if (rc == ZNONODE) continue;
    check(rc, "acquire", requests[i].key);
    if (!names[i].value().empty()) {
      contended.saw_busy(requests[i].key);
      return false;
    }
  }
  return true;
}

}  // namespace

void ContendedKeys::saw_busy(std::string_view key) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  // Bounded: the older entries go as the map grows, and if more keys than that were busy
  // within the memory, all go (a set then goes at once, as on keys it never found busy).
  if (busy_since_.size() >= kMostKeys) {
    std::erase_if(busy_since_, [&](const auto& entry) { return now - entry.second > kMemory; });
    if (busy_since_.size() >= kMostKeys) busy_since_.clear();
  }
  if (auto place = busy_since_.find(key); place != busy_since_.end()) {
    place->second = now;
  } else {
    busy_since_.emplace(std::string(key), now);
  }
}

bool ContendedKeys::any(std::span<const backend::AcquireRequest> requests) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  if (busy_since_.empty()) return false;
  return std::any_of(requests.begin(), requests.end(), [&](const backend::AcquireRequest& request) {
    const auto place = busy_since_.find(request.key);
    return place != busy_since_.end() && now - place->second <= kMemory;
  });
}

std::optional<backend::AcquireSetResult> take_set(const std::shared_ptr<Session>& session,
                                                  const std::string& root,
                                                  std::span<const backend::AcquireRequest> requests,
                                                  const Grant& grant, ContendedKeys& contended) {
  if (contended.any(requests) && !queues_empty(*session, root, requests, contended)) return std::nullopt;
  for (;;) {
    auto looks = enqueue_set(session, root, requests);
    Session& s = *session;
    SetVerdict verdict;
    try {
      verdict = judge(requests, looks);
    } catch (...) {
      // A try-once call leaves no node behind, whatever failed.
      try {
        drop_set(s, looks, requests.front().key);
      } catch (...) {
      }
      throw;
    }
    if (verdict.reenters) {
      drop_set(s, looks, requests.front().key);
      return std::nullopt;
    }
    if (!verdict.busy) {
      std::vector<backend::Acquired> taken;
      for (std::size_t i = 0; i < requests.size(); ++i) taken.push_back(grant(requests[i], looks[i]));
      return taken;
    }
    const std::size_t i = *verdict.busy;
    contended.saw_busy(requests[i].key);
    Reads reads;
    read_holders(s, root, requests[i].key, looks[i], reads);
    drop_set(s, looks, requests[i].key);
    if (auto busy = busy_from(requests[i].key, looks[i], reads, {}))
      return backend::SetBusy{i, std::move(*busy)};
    // Its holders went meanwhile: the set is tried again, as acquire() tries a key.
  }
}

std::optional<std::vector<HeldNode>> drop_holds(Session& s, const std::vector<HeldNode>& nodes,
                                                std::string_view key) {
  std::vector<HeldNode> left = nodes;
  std::vector<Op> ops;
  for (auto& node : left) {
    if (node.data.holds <= 1) {
      node.data.holds = 0;
      ops.push_back({.kind = Op::Kind::remove, .path = node.path, .version = node.version});
    } else {
      --node.data.holds;
      ops.push_back(
          {.kind = Op::Kind::set, .path = node.path, .data = to_data(node.data), .version = node.version});
    }
  }
  auto [reply, retried] = multi_surely(s, ops);
  const int rc = reply.rc();
  if (rc == ZNONODE || rc == ZBADVERSION) {
    // Sent again, a node gone or changed was so by the send whose answer was lost, as
    // remove_surely() takes it (a decremented node's version is then unknown: a release reads
    // it again).
    if (retried) return left;
    return std::nullopt;
  }
  check(rc, "release", key, Write::yes);
  for (std::size_t i = 0; i < left.size(); ++i) left[i].version = reply.value()[i].stat.version;
  return left;
}

}  // namespace dlock::backends::zookeeper
