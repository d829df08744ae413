#include "backends/zookeeper/session.hpp"

#include <signal.h>

#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {
namespace {

constexpr const char* kName = "zookeeper";
// How long a resolution of the host list stands (see the constructor).
constexpr int kResolutionDelayMs = 10'000;

// A reply and the completion's `data` for it: a heap std::shared_ptr to its state.
template <class T>
std::pair<Reply<T>, void*> make_reply() {
  auto state = std::make_shared<typename Reply<T>::State>();
  void* data = new std::shared_ptr<typename Reply<T>::State>(state);
  return {Reply<T>(std::move(state)), data};
}

// The completion's `data` is a heap std::shared_ptr<State>: taken back here, exactly once.
template <class T, class Fill>
void complete(const void* data, int rc, Fill&& fill) {
  auto* owner = static_cast<std::shared_ptr<typename Reply<T>::State>*>(const_cast<void*>(data));
  std::shared_ptr<typename Reply<T>::State> state = std::move(*owner);
  delete owner;
  {
    std::lock_guard lock(state->mutex);
    state->rc = rc;
    if (rc == ZOK) fill(state->value);
    state->done = true;
  }
  state->done_cv.notify_all();
}

// A request the client refused to send: answered at once.
template <class T>
void refuse(void* data, int rc) {
  complete<T>(data, rc, [](T&) {});
}

void node_done(int rc, const Stat* stat, const void* data) {
  complete<Node>(data, rc, [&](Node& node) {
    if (stat) node.stat = *stat;
  });
}

void data_done(int rc, const char* value, int length, const Stat* stat, const void* data) {
  complete<Node>(data, rc, [&](Node& node) {
    if (stat) node.stat = *stat;
    if (value && length > 0) node.data.assign(value, static_cast<std::size_t>(length));
  });
}

void created_done(int rc, const char* path, const Stat* stat, const void* data) {
  complete<Node>(data, rc, [&](Node& node) {
    if (stat) node.stat = *stat;
    if (path) node.data = path;
  });
}

void children_done(int rc, const String_vector* strings, const void* data) {
  complete<std::vector<std::string>>(data, rc, [&](std::vector<std::string>& names) {
    if (!strings) return;
    names.reserve(static_cast<std::size_t>(strings->count));
    for (int i = 0; i < strings->count; ++i) names.emplace_back(strings->data[i]);
  });
}

void removed_done(int rc, const void* data) {
  complete<Node>(data, rc, [](Node&) {});
}

void auth_done(int rc, const void* data) {
  complete<Node>(data, rc, [](Node&) {});
}

}  // namespace

Session::Session(const SessionSettings& settings, std::function<void()> on_expired)
    : on_expired_(std::move(on_expired)) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { zoo_set_debug_level(static_cast<ZooLogLevel>(0)); });
  {
    // The client's I/O and completion threads start here: they take no signal, like the
    // library's own (core/signal_free_thread.hpp), so that `dlock serve` still gets SIGTERM.
    sigset_t all, previous;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    zh_ = zookeeper_init(settings.hosts.c_str(), &Session::on_event,
                         static_cast<int>(settings.session_timeout.count()), nullptr, this, 0);
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  // By default the client resolves the host list again each time it polls its socket: a
  // netlink dump and a getaddrinfo per request and answer, which made a 4-key lock cost 1.9-2.3
  // times one key. A change of address is still seen within this window, and at once on a
  // connection loss.
  if (zh_) zoo_set_servers_resolution_delay(zh_, kResolutionDelayMs);
  if (!zh_) {
    throw ConfigurationError("zookeeper:// cannot use the servers of " + settings.shown +
                                 " (the client refused the host list: write zookeeper://HOST:PORT[,HOST:PORT...]/PATH)",
                             kName);
  }
  {
    std::unique_lock lock(mutex_);
    const bool up = state_cv_.wait_for(lock, settings.connect_timeout, [&] {
      return state_ == ZOO_CONNECTED_STATE || state_ == ZOO_EXPIRED_SESSION_STATE || state_ == ZOO_AUTH_FAILED_STATE;
    });
    if (up && state_ == ZOO_CONNECTED_STATE) negotiated_ = std::chrono::milliseconds(zoo_recv_timeout(zh_));
    if (!up || state_ != ZOO_CONNECTED_STATE) {
      lock.unlock();
      zookeeper_close(zh_);
      zh_ = nullptr;
      throw ConnectionError("cannot reach the ZooKeeper ensemble of " + settings.shown + " within " +
                                std::to_string(settings.connect_timeout.count()) + " ms",
                            kName);
    }
  }
  if (!settings.user.empty()) {
    const std::string credentials = settings.user + ":" + settings.password;
    auto [reply, data] = make_reply<Node>();
    const int sent = zoo_add_auth(zh_, "digest", credentials.data(), static_cast<int>(credentials.size()), auth_done, data);
    if (sent != ZOK) refuse<Node>(data, sent);
    if (reply.rc() != ZOK) {
      zookeeper_close(zh_);
      zh_ = nullptr;
      throw ConfigurationError("ZooKeeper refused the credentials of user '" + settings.user + "' on " + settings.shown +
                                   " (" + zerror(reply.rc()) + ")",
                               kName);
    }
    digest_ = true;
  }
}

Session::~Session() {
  if (zh_) zookeeper_close(zh_);  // joins the client's threads: no callback after this
}

std::chrono::milliseconds Session::timeout() const { return std::chrono::milliseconds(zoo_recv_timeout(zh_)); }

bool Session::expired() const {
  std::lock_guard lock(mutex_);
  if (over_ || state_ == ZOO_EXPIRED_SESSION_STATE || state_ == ZOO_AUTH_FAILED_STATE) return true;
  return state_ != ZOO_CONNECTED_STATE && std::chrono::steady_clock::now() - disconnected_at_ >= negotiated_;
}

bool Session::wait_connected(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  state_cv_.wait_until(lock, deadline, [&] {
    return over_ || state_ == ZOO_CONNECTED_STATE || state_ == ZOO_EXPIRED_SESSION_STATE ||
           state_ == ZOO_AUTH_FAILED_STATE;
  });
  return !over_ && state_ == ZOO_CONNECTED_STATE;
}

std::int64_t Session::id() const { return zoo_client_id(zh_)->client_id; }

const ACL_vector* Session::acl() const { return digest_ ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE; }

Reply<Node> Session::create(const std::string& path, const std::string& data, int mode, bool open) {
  auto [reply, state] = make_reply<Node>();
  const int sent = zoo_acreate2(zh_, path.c_str(), data.data(), static_cast<int>(data.size()),
                                open ? &ZOO_OPEN_ACL_UNSAFE : acl(), mode, created_done, state);
  if (sent != ZOK) refuse<Node>(state, sent);
  return reply;
}

Reply<std::vector<std::string>> Session::children(const std::string& path) {
  auto [reply, state] = make_reply<std::vector<std::string>>();
  const int sent = zoo_aget_children(zh_, path.c_str(), 0, children_done, state);
  if (sent != ZOK) refuse<std::vector<std::string>>(state, sent);
  return reply;
}

namespace {
// A watched read's completion data: its reply's, and which watch to drop if none was set.
struct WatchedRead {
  void* reply;
  Session* session;
  std::string path;
  std::uint64_t id;
};
}  // namespace

Reply<Node> Session::get(const std::string& path, Watch watch) {
  auto [reply, state] = make_reply<Node>();
  if (!watch) {
    const int sent = zoo_aget(zh_, path.c_str(), 0, data_done, state);
    if (sent != ZOK) refuse<Node>(state, sent);
    return reply;
  }
  auto* read = new WatchedRead{state, this, path, add_watch(path, std::move(watch))};
  const int sent = zoo_awget(zh_, path.c_str(), &Session::on_event, this, watched_data_done, read);
  if (sent != ZOK) watched_data_done(sent, nullptr, 0, nullptr, read);
  return reply;
}

void Session::watched_data_done(int rc, const char* value, int length, const Stat* stat, const void* data) {
  const std::unique_ptr<WatchedRead> read(static_cast<WatchedRead*>(const_cast<void*>(data)));
  // The ensemble set no watch unless the read succeeded: a callback kept would never be called.
  if (rc != ZOK) read->session->drop_watch(read->path, read->id);
  data_done(rc, value, length, stat, read->reply);
}

Reply<Node> Session::exists(const std::string& path) {
  auto [reply, state] = make_reply<Node>();
  const int sent = zoo_aexists(zh_, path.c_str(), 0, node_done, state);
  if (sent != ZOK) refuse<Node>(state, sent);
  return reply;
}

Reply<Node> Session::set(const std::string& path, const std::string& data, int version) {
  auto [reply, state] = make_reply<Node>();
  const int sent = zoo_aset(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), version, node_done, state);
  if (sent != ZOK) refuse<Node>(state, sent);
  return reply;
}

Reply<Node> Session::remove(const std::string& path, int version) {
  auto [reply, state] = make_reply<Node>();
  const int sent = zoo_adelete(zh_, path.c_str(), version, removed_done, state);
  if (sent != ZOK) refuse<Node>(state, sent);
  return reply;
}

namespace {
// A transaction in flight: where the client writes each operation's result until it answers.
struct Transaction {
  void* reply;
  std::vector<zoo_op_result_t> results;
  std::vector<std::vector<char>> paths;  // a create's path made
  std::vector<Stat> stats;               // a set's Stat
};

void multi_done(int rc, const void* data) {
  const std::unique_ptr<Transaction> t(static_cast<Transaction*>(const_cast<void*>(data)));
  complete<std::vector<OpResult>>(t->reply, rc, [&](std::vector<OpResult>& results) {
    results.resize(t->results.size());
    for (std::size_t i = 0; i < results.size(); ++i) {
      results[i].stat = t->stats[i];
      if (!t->paths[i].empty()) results[i].path = t->paths[i].data();
    }
  });
}
}  // namespace

Reply<std::vector<OpResult>> Session::multi(const std::vector<Op>& ops) {
  auto [reply, state] = make_reply<std::vector<OpResult>>();
  auto* t = new Transaction{state, std::vector<zoo_op_result_t>(ops.size()), std::vector<std::vector<char>>(ops.size()),
                            std::vector<Stat>(ops.size())};
  std::vector<zoo_op_t> zops(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const auto size = static_cast<int>(op.data.size());
    switch (op.kind) {
      case Op::Kind::create:
        t->paths[i].assign(op.path.size() + 32, '\0');  // room for the sequence suffix
        zoo_create_op_init(&zops[i], op.path.c_str(), op.data.data(), size, acl(), op.mode, t->paths[i].data(),
                           static_cast<int>(t->paths[i].size()));
        break;
      case Op::Kind::remove:
        zoo_delete_op_init(&zops[i], op.path.c_str(), op.version);
        break;
      case Op::Kind::set:
        zoo_set_op_init(&zops[i], op.path.c_str(), op.data.data(), size, op.version, &t->stats[i]);
        break;
    }
  }
  // The operations are serialized here; only the results are written to later.
  const int sent = zoo_amulti(zh_, static_cast<int>(zops.size()), zops.data(), t->results.data(), multi_done, t);
  if (sent != ZOK) {
    delete t;
    refuse<std::vector<OpResult>>(state, sent);
  }
  return reply;
}

std::uint64_t Session::add_watch(const std::string& path, Watch watch) {
  std::lock_guard lock(mutex_);
  watches_.emplace(path, std::pair(++last_watch_id_, std::move(watch)));
  return last_watch_id_;
}

void Session::drop_watch(const std::string& path, std::uint64_t id) {
  std::lock_guard lock(mutex_);
  const auto [first, last] = watches_.equal_range(path);
  for (auto it = first; it != last; ++it) {
    if (it->second.first == id) {
      watches_.erase(it);
      return;
    }
  }
}

void Session::on_event(zhandle_t*, int type, int state, const char* path, void* context) {
  static_cast<Session*>(context)->event(type, state, path);
}

void Session::event(int type, int state, const char* path) {
  if (type == ZOO_SESSION_EVENT) {
    bool ended = state == ZOO_EXPIRED_SESSION_STATE;
    {
      // Every watcher hears session events: the first report of an end counts.
      std::lock_guard lock(mutex_);
      if (over_ || state_ == ZOO_EXPIRED_SESSION_STATE) return;
      const auto now = std::chrono::steady_clock::now();
      if (state_ == ZOO_CONNECTED_STATE && state != ZOO_CONNECTED_STATE) disconnected_at_ = now;
      if (state == ZOO_CONNECTED_STATE && state_ != ZOO_CONNECTED_STATE && state_ != 0 &&
          now - disconnected_at_ >= negotiated_) {
        // Back after the ensemble may have expired it: its holders have been told their
        // leases are lost (renewals failed until then), so it must not keep their keys.
        over_ = true;
        ended = true;
      }
      state_ = state;
    }
    state_cv_.notify_all();
    if (ended) {
      // Every watched node of this session is gone or unwatched: wake every watcher.
      fire_all();
      if (on_expired_) on_expired_();
    }
    return;
  }
  if (!path) return;
  std::vector<Watch> fired;
  {
    std::lock_guard lock(mutex_);
    const auto [first, last] = watches_.equal_range(path);
    for (auto it = first; it != last; ++it) fired.push_back(std::move(it->second.second));
    watches_.erase(first, last);
  }
  for (auto& watch : fired) watch(type);
}

void Session::fire_all() {
  std::multimap<std::string, std::pair<std::uint64_t, Watch>> fired;
  {
    std::lock_guard lock(mutex_);
    fired.swap(watches_);
  }
  for (auto& [path, watch] : fired) watch.second(ZOO_SESSION_EVENT);
}

}  // namespace dlock::backends::zookeeper
