#pragma once

// One Watch stream per client, shared by every watch it sets: a waiter's on its predecessor's
// node, a holder's on its own. Each watch is one-shot: its callback runs once, at the first
// event on the key from the revision given (which the cluster replays if it already happened),
// or when the stream breaks (the caller then looks again). Callbacks run on the stream's reader
// thread and must return at once.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/etcd/connection.hpp"

namespace dlock::backends::etcd {

class Watches {
 public:
  using Callback = std::function<void()>;
  using Handle = std::uint64_t;

  explicit Watches(std::shared_ptr<Connection> connection);
  ~Watches() { close(); }
  Watches(const Watches&) = delete;
  Watches& operator=(const Watches&) = delete;

  // Watches `key` from `revision` on: its deletion, or with `any_change` also a put. No round
  // trip is waited for: the cluster replays events from `revision`, so none is missed however
  // late the watch is made.
  Handle watch(const std::string& key, std::int64_t revision, bool any_change, Callback callback);
  // The callback will not run (unless it runs now, on the reader thread).
  void cancel(Handle handle);
  // Ends the stream; no callback runs after this returns. Later watches open it again.
  void close();

 private:
  struct Entry {
    Callback callback;
    std::int64_t watch_id = -1;  // the cluster's, once the stream said it was created
  };
  // Opens the stream when there is none, or it ended.
  void open_locked();
  void read(grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>* stream);
  void send_cancel_locked(std::int64_t watch_id);

  const std::shared_ptr<Connection> connection_;
  std::mutex mutex_;  // guards everything below, and writes to the stream
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream_;
  std::thread reader_;
  bool broken_ = false;  // the reader saw the stream end: open again at the next watch
  Handle last_handle_ = 0;
  std::map<Handle, Entry> entries_;
  std::deque<Handle> creating_;  // sent, not yet created: the stream answers creates in order
  std::map<std::int64_t, Handle> by_id_;
};

}  // namespace dlock::backends::etcd
