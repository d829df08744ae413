#include "core/renewal.hpp"

namespace dlock::core {

RenewalScheduler::~RenewalScheduler() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
}

void RenewalScheduler::schedule(Clock::time_point due, std::weak_ptr<void> alive, Task task) {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->queue.push(Entry{due, shared_->next_seq++, std::move(alive), std::move(task)});
    if (!thread_.joinable()) {
      thread_ = std::jthread([shared = shared_](std::stop_token stop) { run(shared, stop); });
    }
  }
  shared_->wake.notify_one();
}

void RenewalScheduler::run(const std::shared_ptr<Shared>& shared, std::stop_token stop) {
  std::unique_lock lock(shared->mutex);
  auto& queue = shared->queue;
  while (!stop.stop_requested()) {
    if (queue.empty()) {
      shared->wake.wait(lock, stop, [&] { return !queue.empty(); });
      continue;
    }
    const auto due = queue.top().due;
    if (Clock::now() < due) {
      shared->wake.wait_until(lock, stop, due, [&] { return queue.top().due < due; });
      continue;
    }
    Entry entry = std::move(const_cast<Entry&>(queue.top()));
    queue.pop();
    lock.unlock();
    std::optional<Clock::time_point> next;
    if (auto alive = entry.alive.lock()) next = entry.task();
    lock.lock();
    if (next && !stop.stop_requested()) {
      queue.push(Entry{*next, shared->next_seq++, std::move(entry.alive), std::move(entry.task)});
    }
  }
}

}  // namespace dlock::core
