#pragma once

// One Watch stream per client, shared by every watch it sets: a waiter's on its predecessor's
// node, a holder's on its own. Each watch is one-shot: its callback runs once, at the first
// event on the key from the revision given (which the cluster replays if it already happened),
// or when the stream breaks (the caller then looks again). Callbacks run on the stream's reader
// thread and must return at once; they are told the revision of the key's deletion when that is
// what fired them.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "backends/etcd/connection.hpp"

namespace dlock::backends::etcd {

class Watches {
 public:
  // The revision at which the key was deleted; nothing for a put, the stream's end, the
  // cluster ending the watch.
  using Callback = std::function<void(std::optional<std::int64_t> deleted_at)>;
  using Handle = std::uint64_t;

  explicit Watches(std::shared_ptr<Connection> connection);
  ~Watches() { close(); }
  Watches(const Watches&) = delete;
  Watches& operator=(const Watches&) = delete;

  // Watches `key` from `revision` on (0: from the cluster's revision when the watch is made):
  // its deletion, or with `any_change` also a put. No round trip is waited for: the cluster
  // replays events from `revision`, so none is missed however late the watch is made. But a
  // watch that starts before the cluster's revision is caught up by a loop of the cluster's that
  // runs every 100 ms, so its events may come that late; one from now is served at once.
  Handle watch(const std::string& key, std::int64_t revision, bool any_change, Callback callback);
  // The cluster's revision when the watch was made, once the stream says it was (a watch from
  // now sees every event after it); nothing when it fired, was cancelled, or the stream ended
  // first, or `deadline` passed.
  std::optional<std::int64_t> created_at(Handle handle, std::chrono::steady_clock::time_point deadline);
  // The callback will not run (unless it runs now, on the reader thread).
  void cancel(Handle handle);
  // Ends the stream; no callback runs after this returns. Later watches open it again.
  void close();

 private:
  struct Entry {
    Callback callback;
    std::int64_t watch_id = -1;   // the cluster's, once the stream said it was created
    std::int64_t created_at = 0;  // the cluster's revision then
  };
  // Opens the stream when there is none, or it ended.
  void open_locked();
  void read(grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>* stream);
  void send_cancel_locked(std::int64_t watch_id);

  const std::shared_ptr<Connection> connection_;
  std::mutex mutex_;                 // guards everything below, and writes to the stream
  std::condition_variable created_;  // a watch was created, or the stream ended
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
