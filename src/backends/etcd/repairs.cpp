#include "backends/etcd/repairs.hpp"

#include <chrono>
#include <iterator>

#include "core/signal_free_thread.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

// The pause between rounds while the cluster does not answer.
constexpr std::chrono::milliseconds kRetryPause{200};

}  // namespace

Repairs::Repairs(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

Repairs::~Repairs() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Repairs::add(pb::TxnRequest repair, std::string_view key) {
  std::lock_guard lock(mutex_);
  pending_.emplace_back(std::move(repair), std::string(key));
  if (!thread_.joinable()) thread_ = core::signal_free_thread([this] { run(); });
  wake_.notify_all();
}

void Repairs::make() {
  std::lock_guard making(making_);
  std::vector<std::pair<pb::TxnRequest, std::string>> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
  }
  for (auto at = pending.begin(); at != pending.end(); ++at) {
    try {
      connection_->txn(at->first, "repair a node whose write went unanswered", at->second);
    } catch (...) {
      std::lock_guard lock(mutex_);
      pending_.insert(pending_.end(), std::make_move_iterator(at), std::make_move_iterator(pending.end()));
      throw;
    }
  }
}

void Repairs::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    lock.unlock();
    bool answered = true;
    try {
      make();
    } catch (const Error&) {
      answered = false;
    }
    lock.lock();
    if (!answered) wake_.wait_for(lock, kRetryPause, [&] { return stop_; });
  }
}

}  // namespace dlock::backends::etcd
