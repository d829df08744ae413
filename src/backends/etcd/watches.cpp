#include "backends/etcd/watches.hpp"

#include <signal.h>

#include <utility>
#include <vector>

namespace dlock::backends::etcd {

Watches::Watches(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

void Watches::close() {
  std::thread reader;
  {
    std::lock_guard lock(mutex_);
    entries_.clear();  // nothing fires while the stream ends
    if (context_) context_->TryCancel();
    reader.swap(reader_);
  }
  if (reader.joinable()) reader.join();
  std::lock_guard lock(mutex_);
  stream_.reset();
  context_.reset();
}

void Watches::open_locked() {
  if (stream_ && !broken_) return;
  if (reader_.joinable()) reader_.join();  // it has ended: it set broken_, and takes no lock after
  stream_.reset();
  context_ = connection_->context(std::nullopt);
  stream_ = connection_->watch_stub().Watch(context_.get());
  broken_ = false;
  creating_.clear();
  by_id_.clear();
  // No signal for the reader either (see Connection).
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  reader_ = std::thread([this, stream = stream_.get()] { read(stream); });
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

Watches::Handle Watches::watch(const std::string& key, std::int64_t revision, bool any_change,
                               Callback callback) {
  std::lock_guard lock(mutex_);
  open_locked();
  const Handle handle = ++last_handle_;
  entries_.emplace(handle, Entry{std::move(callback)});
  creating_.push_back(handle);
  pb::WatchRequest request;
  auto* create = request.mutable_create_request();
  create->set_key(key);
  create->set_start_revision(revision);
  if (!any_change) create->add_filters(pb::WatchCreateRequest::NOPUT);
  // A failed write means a broken stream: the reader sees it end and fires this watch too.
  stream_->Write(request);
  return handle;
}

std::optional<std::int64_t> Watches::created_at(Handle handle,
                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  std::optional<std::int64_t> revision;
  created_.wait_until(lock, deadline, [&] {
    const auto it = entries_.find(handle);
    if (it == entries_.end()) return true;  // fired, cancelled, or the stream ended
    if (it->second.watch_id < 0) return false;
    revision = it->second.created_at;
    return true;
  });
  return revision;
}

void Watches::cancel(Handle handle) {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(handle);
  if (it == entries_.end()) return;
  if (it->second.watch_id >= 0) {
    by_id_.erase(it->second.watch_id);
    send_cancel_locked(it->second.watch_id);
  }
  entries_.erase(it);  // one still being created is cancelled when the stream says it was
}

void Watches::send_cancel_locked(std::int64_t watch_id) {
  pb::WatchRequest request;
  request.mutable_cancel_request()->set_watch_id(watch_id);
  if (stream_ && !broken_) stream_->Write(request);
}

void Watches::read(grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>* stream) {
  pb::WatchResponse response;
  while (stream->Read(&response)) {
    Callback fired;
    std::optional<std::int64_t> deleted_at;
    {
      std::lock_guard lock(mutex_);
      const std::int64_t id = response.watch_id();
      if (response.created()) {
        if (creating_.empty()) continue;
        const Handle handle = creating_.front();
        creating_.pop_front();
        const auto it = entries_.find(handle);
        if (it == entries_.end()) {
          send_cancel_locked(id);
        } else {
          it->second.watch_id = id;
          it->second.created_at = response.header().revision();
          by_id_[id] = handle;
          created_.notify_all();
        }
        if (!response.canceled()) continue;
      }
      // An event, or the cluster ending the watch (its revision compacted away): either way
      // the watcher looks again.
      if (response.events_size() == 0 && !response.canceled()) continue;
      const auto found = by_id_.find(id);
      if (found == by_id_.end()) continue;
      const auto entry = entries_.find(found->second);
      by_id_.erase(found);
      if (entry == entries_.end()) continue;
      fired = std::move(entry->second.callback);
      entries_.erase(entry);
      if (!response.canceled() && response.events(0).type() == pb::Event::DELETE) {
        deleted_at = response.events(0).kv().mod_revision();
      }
      if (!response.canceled()) send_cancel_locked(id);
    }
    if (fired) fired(deleted_at);
  }
  stream->Finish();
  std::map<Handle, Entry> ended;
  {
    std::lock_guard lock(mutex_);
    broken_ = true;
    ended.swap(entries_);
  }
  created_.notify_all();
  for (auto& [handle, entry] : ended) entry.callback(std::nullopt);
}

}  // namespace dlock::backends::etcd
