#include "backends/zookeeper/queue.hpp"

#include <algorithm>

#include "backends/zookeeper/errors.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {
namespace {

using std::chrono::milliseconds;

// Finds the caller's node in the queue; false when it is not there.
bool locate(Look& look) {
  const auto slash = look.node.rfind('/');
  const std::string name = look.node.substr(slash + 1);
  for (std::size_t i = 0; i < look.queue.size(); ++i) {
    if (look.queue[i].name == name) {
      look.index = i;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string key_path(const std::string& root, std::string_view key) { return root + "/" + encode_key(key); }

bool reconnected(const Session& s) { return s.wait_connected(std::chrono::steady_clock::now() + s.timeout()); }

bool found(Look& look, const std::string& root, std::string_view key, const std::string& attempt_id) {
  auto names = look.session->children(key_path(root, key));
  if (names.rc() == ZNONODE) return false;
  check(names.rc(), "acquire", key);
  look.queue = queue_of(names.value());
  for (const auto& child : look.queue) {
    if (child.attempt != attempt_id) continue;
    look.node = key_path(root, key) + "/" + child.name;
    auto stat = look.session->exists(look.node);
    if (stat.rc() == ZNONODE) return false;
    check(stat.rc(), "acquire", key);
    look.stat = stat.value().stat;
    return locate(look);
  }
  return false;
}

void make_key_nodes(Session& s, const std::string& root, const std::vector<std::string_view>& keys) {
  make_root(s, root, keys.front());
  std::vector<Reply<Node>> made;
  for (const auto key : keys) made.push_back(s.create(key_path(root, key), "", ZOO_CONTAINER));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const int rc = made[i].rc();
    if (rc != ZOK && rc != ZNODEEXISTS) check(rc, "acquire", keys[i]);
  }
}

bool take_queue(Look& look, Reply<std::vector<std::string>>& names, std::string_view key) {
  if (names.rc() == ZNONODE) return false;
  check(names.rc(), "acquire", key);
  look.queue = queue_of(names.value());
  return locate(look);
}

Look enqueue(std::shared_ptr<Session> session, const std::string& root,
             const backend::AcquireRequest& request) {
  Look look;
  look.session = std::move(session);
  Session& s = *look.session;
  const std::string dir = key_path(root, request.key);
  look.data = {.owner = std::string(request.owner),
               .session_timeout = s.timeout(),
               .mode = request.mode,
               .permits = request.permits};
  const std::string data = to_data(look.data);
  const std::string attempt_id = attempt_tag();
  const std::string prefix = node_prefix(owner_tag(request.owner), attempt_id, request.mode, request.permits);
  for (int attempt = 0;; ++attempt) {
    auto made = s.create(dir + "/" + prefix, data, ZOO_EPHEMERAL_SEQUENTIAL);
    auto names = s.children(dir);
    const int rc = made.rc();
    if (rc == ZNONODE && attempt < 3) {
      names.rc();
      make_key_nodes(s, root, {request.key});
      continue;
    }
    if (lost_connection(rc) && attempt < 3 && reconnected(s)) {
      // The create may have been made: find it by its attempt tag, or make it now.
      if (found(look, root, request.key, attempt_id)) return look;
      continue;
    }
    check(rc, "acquire", request.key, Write::yes);
    look.node = made.value().data;
    look.stat = made.value().stat;
    take_queue(look, names, request.key);
    return look;
  }
}

bool refresh(Look& look, const std::string& root, std::string_view key) {
  auto names = look.session->children(key_path(root, key));
  return take_queue(look, names, key);
}

void drop(Session& s, const std::string& node, std::string_view key) {
  if (node.empty()) return;
  const int rc = remove_surely(s, node, -1).first;
  if (rc != ZOK && rc != ZNONODE) {
    throw ConnectionError("could not remove this client's queue node for '" + std::string(key) + "' (" +
                              zerror(rc) + "); it goes when the session ends",
                          kName, std::string(key));
  }
}

std::pair<int, bool> remove_surely(Session& s, const std::string& path, int version) {
  int rc = s.remove(path, version).rc();
  bool retried = false;
  for (int attempt = 0; lost_connection(rc) && attempt < 5 && reconnected(s); ++attempt) {
    retried = true;
    rc = s.remove(path, version).rc();
  }
  return {rc, retried};
}

std::vector<LockInfo> holders(Session& s, const std::string& root, std::string_view key,
                              const std::vector<Child>& queue) {
  const std::string dir = key_path(root, key) + "/";
  std::vector<Reply<Node>> held, waiting;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (holds(queue, i)) {
      held.push_back(s.get(dir + queue[i].name));
    } else if (waiting.size() < kQueueShown) {
      waiting.push_back(s.get(dir + queue[i].name));
    }
  }
  std::vector<std::string> queued;
  for (auto& waiter : waiting) {
    if (waiter.rc() != ZOK) continue;  // gone meanwhile
    if (const auto data = from_data(waiter.value().data)) queued.push_back(data->owner);
  }
  std::vector<LockInfo> infos;
  for (auto& reply : held) {
    if (reply.rc() == ZNONODE) continue;
    check(reply.rc(), "inspect", key);
    const auto data = from_data(reply.value().data);
    if (!data) continue;
    infos.push_back(to_info(key, reply.value().stat, *data, queue.size() - held.size()));
    infos.back().queue = queued;
  }
  return infos;
}

std::vector<std::size_t> own_holds(const Look& look, const backend::AcquireRequest& request) {
  const std::string tag = owner_tag(request.owner);
  std::vector<std::size_t> owned;
  for (std::size_t i = 0; i < look.index; ++i) {
    const Child& node = look.queue[i];
    if (node.tag == tag && holds(look.queue, i) &&
        (request.mode == LockMode::shared || node.mode == LockMode::exclusive)) {
      owned.push_back(i);
    }
  }
  return owned;
}

void check_permits(const backend::AcquireRequest& request, const Look& look) {
  if (request.mode != LockMode::shared) return;
  const auto first = first_shared(look.queue, look.index);
  if (!first || look.queue[*first].permits == request.permits) return;
  throw backend::permits_disagree(request.key, look.queue[*first].permits, request.permits,
                                  holds(look.queue, *first) ? "held" : "waited for");
}

void read_holders(Session& s, const std::string& root, std::string_view key, const Look& look, Reads& reads) {
  const std::string dir = key_path(root, key) + "/";
  for (std::size_t i = 0; i < look.index; ++i) {
    if (holds(look.queue, i) && reads.count(i) == 0) reads.emplace(i, s.get(dir + look.queue[i].name));
  }
}

std::optional<backend::Busy> busy_from(std::string_view key, const Look& look, Reads& reads,
                                       const std::function<void(std::size_t)>& gone) {
  std::size_t holders = 0;
  for (std::size_t i = 0; i < look.index; ++i) holders += holds(look.queue, i) ? 1 : 0;
  std::vector<LockInfo> infos;
  auto retry = milliseconds::max();
  for (auto& [i, reply] : reads) {
    if (reply.rc() == ZNONODE) {
      if (gone) gone(i);
      continue;
    }
    check(reply.rc(), "acquire", key);
    const auto data = from_data(reply.value().data);
    if (!data || !holds(look.queue, i)) continue;
    infos.push_back(to_info(key, reply.value().stat, *data, look.queue.size() - holders));
    retry = std::min(retry, data->session_timeout);
  }
  if (infos.empty()) return std::nullopt;
  // A holder's node goes when it releases or its session ends, and a watch fires; the core's
  // bound on the wait is only a fallback.
  return backend::Busy{std::move(infos), std::max(retry, milliseconds(1000))};
}

LockInfo to_info(std::string_view key, const Stat& stat, const NodeData& data, std::size_t waiters) {
  LockInfo info;
  info.key = std::string(key);
  info.owner = data.owner;
  info.token = static_cast<std::uint64_t>(stat.czxid);
  info.hold_count = data.evicted ? 0 : data.holds;
  // Held until its holder releases it or its session ends: at most this long after the
  // holder's last contact with the ensemble.
  info.ttl_left = data.session_timeout;
  // ctime is the ensemble's clock when the node was made, read here against this host's.
  const auto now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  info.held_for = std::max(milliseconds(0), now_ms - milliseconds(stat.ctime));
  info.waiters = static_cast<std::uint32_t>(waiters);
  info.evicted = data.evicted;
  info.mode = data.mode;
  return info;
}

}  // namespace dlock::backends::zookeeper
