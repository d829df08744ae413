#include "core/renewal.hpp"

namespace dlock::core {

RenewalScheduler::~RenewalScheduler() { stop(); }

void RenewalScheduler::stop() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopped = true;
  }
  if (!thread_.joinable()) return;
  thread_.request_stop();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the thread ends when this task returns
  } else {
    thread_.join();
  }
}

RenewalScheduler::TaskId RenewalScheduler::schedule(Clock::time_point due, Task task) {
  TaskId id = 0;
  bool sooner = false;
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->stopped) return 0;  // `task` goes outside the lock
    id = shared_->next_id++;
    shared_->queue.emplace(Key{due, id}, std::move(task));
    shared_->due.emplace(id, due);
    sooner = due < shared_->wakes_at;
    if (!thread_.joinable()) {
      thread_ = std::jthread([shared = shared_](std::stop_token stop) { run(shared, stop); });
    }
  }
  if (sooner) shared_->wake.notify_one();
  return id;
}

void RenewalScheduler::cancel(TaskId id) {
  Task dropped;  // destroyed outside the lock
  std::lock_guard lock(shared_->mutex);
  if (shared_->running == id) shared_->running_cancelled = true;
  const auto it = shared_->due.find(id);
  if (it == shared_->due.end()) return;
  const auto node = shared_->queue.find(Key{it->second, id});
  dropped = std::move(node->second);
  shared_->queue.erase(node);
  shared_->due.erase(it);
}

void RenewalScheduler::run(const std::shared_ptr<Shared>& shared, std::stop_token stop) {
  std::unique_lock lock(shared->mutex);
  auto& queue = shared->queue;
  while (!stop.stop_requested()) {
    if (queue.empty()) {
      shared->wakes_at = Clock::time_point::max();
      shared->wake.wait(lock, stop, [&] { return !queue.empty() && queue.begin()->first.first < shared->wakes_at; });
      shared->wakes_at = Clock::time_point::min();
      continue;
    }
    const Key first = queue.begin()->first;
    if (Clock::now() < first.first) {
      // Sleeps until the earliest task's time even if it is cancelled meanwhile: see wakes_at.
      shared->wakes_at = first.first;
      shared->wake.wait_until(lock, stop, first.first,
                              [&] { return !queue.empty() && queue.begin()->first.first < shared->wakes_at; });
      shared->wakes_at = Clock::time_point::min();
      continue;
    }
    Task task = std::move(queue.begin()->second);
    queue.erase(queue.begin());
    shared->due.erase(first.second);
    shared->running = first.second;
    shared->running_cancelled = false;
    lock.unlock();
    const std::optional<Clock::time_point> next = task();
    lock.lock();
    shared->running = 0;
    if (next && !shared->running_cancelled && !stop.stop_requested()) {
      queue.emplace(Key{*next, first.second}, std::move(task));
      shared->due.emplace(first.second, *next);
    }
  }
}

}  // namespace dlock::core
