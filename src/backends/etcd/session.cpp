#include "backends/etcd/session.hpp"

#include <signal.h>

#include <algorithm>
#include <utility>

namespace dlock::backends::etcd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The pause between tries while keep-alives go unanswered.
constexpr milliseconds kRetryPause{100};

}  // namespace

Session::Session(std::shared_ptr<Connection> connection, std::function<void(const std::string&)> on_lost)
    : connection_(std::move(connection)), on_lost_(std::move(on_lost)) {
  trusted_since_ = Clock::now();
  const auto granted = connection_->grant(connection_->settings().ttl);
  id_ = granted.id();
  ttl_ = std::chrono::seconds(granted.ttl());
  // No signal for this thread either (see Connection).
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  thread_ = std::jthread([this](std::stop_token stop) { run(std::move(stop)); });
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

Session::~Session() {
  thread_.request_stop();
  wake_.notify_all();
  thread_.join();
  if (!over()) connection_->revoke(id_, std::min(ttl_, connection_->settings().connect_timeout));
}

bool Session::over() const {
  std::lock_guard lock(mutex_);
  return over_;
}

Clock::time_point Session::trusted_since() const {
  std::lock_guard lock(mutex_);
  return trusted_since_;
}

void Session::keep_alive_then(std::function<void()> then) {
  {
    std::lock_guard lock(mutex_);
    if (!over_) {
      after_keep_alive_.push_back(std::move(then));
      wake_.notify_all();
      return;
    }
  }
  then();  // no lease left to keep alive
}

void Session::end(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (over_) return;
    over_ = true;
  }
  on_lost_(why);
}

void Session::run(std::stop_token stop) {
  // Trusted for a TTL from the grant's sending.
  auto last_answered = trusted_since();
  auto next = last_answered + ttl_ / 3;
  std::vector<std::function<void()>> then;
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait_until(lock, stop, next, [&] { return !after_keep_alive_.empty(); });
      if (stop.stop_requested()) return;
      then.swap(after_keep_alive_);
    }
    const auto trusted_until = last_answered + ttl_;
    const auto sent = Clock::now();
    const auto left = connection_->keep_alive(id_, std::max(trusted_until, sent + kRetryPause));
    for (auto& call : then) call();
    then.clear();
    if (left && *left > 0) {
      last_answered = sent;
      {
        std::lock_guard lock(mutex_);
        trusted_since_ = sent;
      }
      next = sent + ttl_ / 3;
    } else if (left) {
      end("its etcd lease " + std::to_string(id_) +
          " is gone (revoked, or expired before a keep-alive reached it)");
      return;
    } else if (Clock::now() >= trusted_until) {
      end("no keep-alive of its etcd lease was answered for the lease's TTL (" +
          std::to_string(ttl_.count()) + " ms): the cluster may have expired it");
      return;
    } else {
      next = Clock::now() + kRetryPause;
    }
  }
}

}  // namespace dlock::backends::etcd
