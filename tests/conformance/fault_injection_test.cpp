// Loss and failure paths, through a fault-injecting decorator (support/fault_backend.hpp) over
// each backend: renewals that fail, renewals answered "lost", stalled renewals, failing
// releases. Names read Backends/FaultInjection.<Case>/<backend>.

#include <future>
#include <stop_token>
#include <thread>

#include "conformance/conformance_fixture.hpp"

using namespace std::chrono_literals;

namespace dlock::test {
namespace {

class FaultInjection : public BackendTest {};

// Records the first loss and when it happened.
struct LossProbe {
  std::promise<std::pair<LossInfo, Clock::time_point>> promise;
  std::future<std::pair<LossInfo, Clock::time_point>> future = promise.get_future();
  std::atomic<int> calls{0};

  std::function<void(const LossInfo&)> callback() {
    return [this](const LossInfo& info) {
      if (calls++ == 0) promise.set_value({info, Clock::now()});
    };
  }
  bool wait(std::chrono::milliseconds timeout) {
    return future.wait_for(timeout) == std::future_status::ready;
  }
};

// An acquisition whose attempt was sent before acquire() was called (a wake channel took the
// key inside its wait) is timed from that send: valid_until never trusts the later call.
TEST_P(FaultInjection, LeaseIsTimedFromAnEarlierSend) {
  auto faulty = open_faulty();
  // A TTL no session store shortens (their tests' sessions last 2 s).
  faulty.faults->backdate_acquisitions(1s);
  const auto before_call = Clock::now();
  Lease lease = faulty.client.acquire(key(), {.ttl = 2s});
  EXPECT_LE(lease.valid_until(), before_call + 1500ms) << "the lease was timed from the acquire() call";
  EXPECT_GT(lease.valid_until(), before_call + 900ms);
  lease.release();
}

// Renewals fail (store unreachable) until valid_until passes: the lease is lost, reason
// renewal_failed, not before valid_until (it might still be ours until then).
TEST_P(FaultInjection, RenewalsFailingUntilValidUntilLoseWithRenewalFailed) {
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  LossProbe probe;
  faults->fail_renewals(true);
  Lease lease = client.acquire(k, {.ttl = 400ms, .auto_renew = true});
  const auto valid_until = lease.valid_until();
  lease.on_lost(probe.callback());
  ASSERT_TRUE(probe.wait(5s)) << "failing renewals never lost the lease";
  const auto [info, lost_at] = probe.future.get();
  EXPECT_EQ(info.reason, LossReason::renewal_failed) << to_string(info.reason) << ": " << info.message;
  EXPECT_EQ(info.key, k);
  EXPECT_EQ(info.token, lease.token());
  EXPECT_GE(ms(lost_at - valid_until), 0)
      << "ms from valid_until to the loss: lost while possibly still ours";
  EXPECT_LT(ms(lost_at - valid_until), 2000) << "ms from valid_until to the loss";
  EXPECT_GE(faults->renew_calls(), 2u) << "a failed renewal was not retried";
  EXPECT_EQ(faults->renewals_ok(), 0u);
  EXPECT_EQ(lease.valid_until(), valid_until) << "valid_until moved without a successful renewal";
  EXPECT_TRUE(lease.lost());
  EXPECT_TRUE(lease.stop_token().stop_requested());
  EXPECT_TRUE(LogCapture::contains({k})) << "failed renewals were not logged";
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_EQ(probe.calls.load(), 1);
}

// A renewal answered "not yours": lost at once (reason not_owner), long before valid_until.
TEST_P(FaultInjection, RenewAnsweringLostLosesWithNotOwner) {
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  LossProbe probe;
  faults->renewals_report_lost(true);
  Lease lease = client.acquire(k, {.ttl = 600ms, .auto_renew = true});
  const auto valid_until = lease.valid_until();
  lease.on_lost(probe.callback());
  ASSERT_TRUE(probe.wait(5s)) << "a renewal answered 'lost' was not reported";
  const auto [info, lost_at] = probe.future.get();
  EXPECT_EQ(info.reason, LossReason::not_owner) << to_string(info.reason) << ": " << info.message;
  EXPECT_EQ(info.token, lease.token());
  EXPECT_LT(ms(lost_at - valid_until), 0) << "ms from valid_until to the loss: only noticed at expiry";
  EXPECT_EQ(faults->renew_calls(), 1u) << "a lease known lost was renewed again";
  EXPECT_TRUE(lease.lost());
  EXPECT_TRUE(lease.stop_token().stop_requested());
  EXPECT_THROW(lease.release(), LockLostError);
}

// One bad patch of renewals, then success: the lease was never lost.
TEST_P(FaultInjection, TransientRenewFailureIsNotALoss) {
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  Client other = open();
  const std::string k = key();
  LossProbe probe;
  faults->fail_next_renewals(2);
  Lease lease = client.acquire(k, {.ttl = 600ms, .auto_renew = true});
  const auto first_until = lease.valid_until();
  lease.on_lost(probe.callback());
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(lease.lost());
  EXPECT_TRUE(lease.held());
  EXPECT_FALSE(lease.stop_token().stop_requested());
  EXPECT_EQ(probe.calls.load(), 0);
  EXPECT_GE(faults->renew_calls(), 4u);
  EXPECT_GE(faults->renewals_ok(), 2u);
  EXPECT_GT(ms(lease.valid_until() - first_until), 500) << "valid_until did not move with the renewals";
  EXPECT_FALSE(other.try_acquire(k)) << "the key was free while its holder was renewing";
  EXPECT_TRUE(LogCapture::contains({k, "injected fault"})) << "the failed renewals were not logged";
  EXPECT_NO_THROW(lease.release());
  EXPECT_TRUE(other.try_acquire(k));
}

// A renewal that hangs (slow network, stalled server) must not hide the end of the lease:
// the holder is told to stop when valid_until passes, not when the hung call returns.
TEST_P(FaultInjection, StalledRenewalStillStopsTheHolderAtValidUntil) {
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  std::promise<Clock::time_point> stopped;
  faults->delay_renewals(1500ms);
  Lease lease = client.acquire(k, {.ttl = 300ms, .auto_renew = true});
  const auto valid_until = lease.valid_until();
  std::stop_callback on_stop(lease.stop_token(), [&] { stopped.set_value(Clock::now()); });
  auto future = stopped.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the stop token was never requested";
  const auto stop_at = future.get();
  EXPECT_GE(ms(stop_at - valid_until), 0) << "ms from valid_until to the stop request";
  EXPECT_LT(ms(stop_at - valid_until), 700)
      << "ms from valid_until to the stop request: the holder ran on past its lease while a renewal hung";
  EXPECT_TRUE(lease.lost());
}

// A release that cannot reach the store: Lease::release() throws a retryable error, the
// destructor and Mutex::unlock() only log, and the key frees itself at the TTL (or, where a
// lock ends with its holder's connection, stays held while that connection lives).
TEST_P(FaultInjection, FailedReleaseThrowsFromReleaseButNotFromDestructorOrUnlock) {
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  Client other = open();
  const std::string k = key();
  // TTLs of seconds: each lease must outlive the calls up to its release on a loaded machine
  // (an acquire on a new connection under asan can take hundreds of milliseconds).
  {
    Lease lease = client.acquire(k, {.ttl = 2s});
    faults->fail_releases(true);
    try {
      lease.release();
      ADD_FAILURE() << "release() hid a failure to reach the store";
    } catch (const ConnectionError& e) {
      EXPECT_TRUE(e.retryable());
    }
  }  // the destructor tries again, fails, and logs
  EXPECT_TRUE(LogCapture::contains({k})) << "the failed release was not logged";
  EXPECT_FALSE(other.try_acquire(k)) << "the key is free though no release reached the store";
  if (capabilities().lease_is_the_session) {
    // No lease to run out: the lock lasts as long as its holder's connection or session.
    EXPECT_FALSE(other.try_acquire_for(k, 1s)) << "a lock bound to a live connection expired";
  } else {
    EXPECT_TRUE(other.try_acquire_for(k, 10s)) << "the unreleased key did not expire";
  }

  const std::string k2 = key("mutex");
  Mutex mutex = client.mutex(k2, {.ttl = 10s});
  faults->fail_releases(false);
  mutex.lock();
  faults->fail_releases(true);
  LogCapture::clear();
  mutex.unlock();  // noexcept: logged
  EXPECT_EQ(mutex.lease(), nullptr);
  EXPECT_TRUE(LogCapture::contains({k2})) << "the failed unlock was not logged";
  faults->fail_releases(false);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjection, ::testing::ValuesIn(all_backends()), BackendParamName());

}  // namespace
}  // namespace dlock::test
