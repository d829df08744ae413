#pragma once

// One ZooKeeper session over the multi-threaded C client (libzookeeper_mt): requests are sent
// at once and answered later, so several can be in flight together (ZooKeeper answers one
// session's requests in order), and watches are delivered by path to callbacks.
//
// The C client calls back on its completion thread; nothing here blocks there.

#include <zookeeper/zookeeper.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dlock::backends::zookeeper {

struct SessionSettings {
  std::string hosts;  // the C client's host list: "h1:p1,h2:p2"
  std::string shown;  // the URL without its password, for messages
  std::chrono::milliseconds session_timeout{10'000};
  std::chrono::milliseconds connect_timeout{10'000};
  std::string user, password;  // digest auth when user is not empty
};

// A ZooKeeper answer code other than ZOK, with what was asked.
struct ZkError {
  int rc = ZOK;
  std::string what;
};

// A node's Stat and data.
struct Node {
  Stat stat{};
  std::string data;
};

// One operation of a transaction (Session::multi).
struct Op {
  enum class Kind { create, remove, set } kind = Kind::create;
  std::string path;
  std::string data;  // create, set
  int mode = 0;      // create: ZOO_EPHEMERAL_SEQUENTIAL, ...
  int version = -1;  // remove, set: -1 for any
};

// One operation's result in a transaction that was made: the path a create made, a set's Stat.
struct OpResult {
  std::string path;
  Stat stat{};
};

// One request's answer, filled in on the completion thread.
template <class T>
class Reply {
 public:
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    int rc = ZOK;
    T value{};
  };
  explicit Reply(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // The answer code once it came; the client itself answers ZCONNECTIONLOSS or
  // ZOPERATIONTIMEOUT when the server does not.
  int rc() const {
    std::unique_lock lock(state_->mutex);
    state_->done_cv.wait(lock, [&] { return state_->done; });
    return state_->rc;
  }
  T& value() const {
    rc();
    return state_->value;
  }

 private:
  std::shared_ptr<State> state_;
};

class Session {
 public:
  // Called once with the event's type: ZOO_DELETED_EVENT, ZOO_CHANGED_EVENT, ..., or
  // ZOO_SESSION_EVENT when the session ended.
  using Watch = std::function<void(int type)>;

  // Connects, authenticates and waits until the session is usable; throws ConnectionError (or
  // ConfigurationError for refused credentials) naming the servers.
  explicit Session(const SessionSettings& settings, std::function<void()> on_expired);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The negotiated session timeout: how long the ensemble keeps the session after it last
  // heard from this client.
  std::chrono::milliseconds timeout() const;
  // The session is over: expired, refused, or disconnected for longer than its timeout (the
  // ensemble may have expired it, or may revive it when the client reconnects; either way its
  // holders have already been told their leases are lost, so it is closed, not revived).
  bool expired() const;
  // Waits until the session is connected (true), or over, or the deadline (false): a request
  // that failed with a connection loss may then be made again on the same session.
  bool wait_connected(std::chrono::steady_clock::time_point deadline) const;
  std::int64_t id() const;
  // The ACL of every node dlock creates: the digest user's alone with credentials, else open.
  const ACL_vector* acl() const;

  // `open`: with OPEN_ACL_UNSAFE whatever the credentials (the parents of dlock's own path).
  Reply<Node> create(const std::string& path, const std::string& data, int mode, bool open = false);  // data: the path made
  Reply<std::vector<std::string>> children(const std::string& path);
  // With a watch: called when the node changes or goes, or the session ends; a node not there
  // gets no watch (the read answers ZNONODE), as ZooKeeper sets none on a missing node's data.
  Reply<Node> get(const std::string& path, Watch watch = {});
  Reply<Node> exists(const std::string& path);
  Reply<Node> set(const std::string& path, const std::string& data, int version);
  Reply<Node> remove(const std::string& path, int version);
  // Every operation in one transaction, all or none (zoo_amulti): the answer is the first
  // failed operation's code; each operation's result when it was made.
  Reply<std::vector<OpResult>> multi(const std::vector<Op>& ops);

 private:
  static void on_event(zhandle_t* zh, int type, int state, const char* path, void* context);
  void event(int type, int state, const char* path);
  static void watched_data_done(int rc, const char* value, int length, const Stat* stat, const void* data);
  std::uint64_t add_watch(const std::string& path, Watch watch);
  void drop_watch(const std::string& path, std::uint64_t id);
  void fire_all();

  const std::function<void()> on_expired_;
  ACL_vector creator_acl_{};
  bool digest_ = false;
  mutable std::mutex mutex_;
  mutable std::condition_variable state_cv_;
  int state_ = 0;
  bool over_ = false;  // see expired()
  std::chrono::steady_clock::time_point disconnected_at_{};
  std::chrono::milliseconds negotiated_{0};
  std::uint64_t last_watch_id_ = 0;
  std::multimap<std::string, std::pair<std::uint64_t, Watch>> watches_;
  zhandle_t* zh_ = nullptr;
};

}  // namespace dlock::backends::zookeeper
