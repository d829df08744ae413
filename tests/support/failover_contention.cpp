#include "support/failover_contention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/holders.hpp"
#include "support/loss_record.hpp"
#include "support/server_test.hpp"

namespace dlock::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One acquisition as the contenders saw it: when they first and last touched the shared
// counter under it (first == last when they found the lease unusable before the write).
struct Use {
  int client = 0;
  std::uint64_t token = 0;
  std::uint32_t hold_count = 0;
  Clock::time_point first, last;
  int writes = 0;
  bool across_kill = false;  // the lease held while the member was killed
};

// What the lease held across the kill came to.
enum class KillOutcome { none, kept, learned_lost, release_failed };

const char* to_string(KillOutcome outcome) {
  switch (outcome) {
    case KillOutcome::none:
      return "none";
    case KillOutcome::kept:
      return "kept (released normally, never reported lost)";
    case KillOutcome::learned_lost:
      return "learned lost (on_lost / lease.lost())";
    case KillOutcome::release_failed:
      return "release failed (neither released nor reported lost)";
  }
  return "?";
}

struct Contention {
  std::string key;
  Clock::time_point begun;
  // When the contenders stop: set once the kill is done (the run lasts a time after it).
  std::atomic<Clock::rep> stop_at{Clock::time_point::max().time_since_epoch().count()};
  bool running() const { return Clock::now().time_since_epoch().count() < stop_at.load(); }
  // The resource: a counter updated by read-sleep-write, which loses updates without mutual
  // exclusion. Atomic only so that the race is a lost update, not undefined behaviour.
  std::atomic<long> counter{0};
  std::atomic<long> increments{0};
  // The kill: the main thread asks for a holder to hold across it.
  std::atomic<bool> kill_wanted{false};
  std::atomic<bool> kill_claimed{false};
  std::promise<void> holding_for_kill;
  std::atomic<bool> kill_done{false};

  std::mutex mutex;  // the fields below
  std::vector<Use> log;
  struct Failures {
    int count = 0;
    long long first_ms = 0, last_ms = 0;
  };
  std::map<std::string, Failures> failures;  // "what: message" -> when
  int timeouts = 0;
  KillOutcome kill_outcome = KillOutcome::none;
  std::string kill_outcome_detail;

  void failed(const std::string& what, const std::exception& e) {
    const long long at = ms(Clock::now() - begun);
    std::lock_guard lock(mutex);
    auto& seen = failures[what + ": " + e.what()];
    if (seen.count++ == 0) seen.first_ms = at;
    seen.last_ms = at;
  }
};

// One contender: acquire (waiting up to 1 s), use the counter ~20 ms, release; again until
// stop_at. Exceptions from the library count as failed attempts; the loop goes on.
void contend(Client client, int id, Contention& shared) {
  while (shared.running()) {
    std::optional<Lease> lease;
    try {
      auto attempt = client.try_acquire_for(shared.key, 1s);
      if (!attempt) {
        std::lock_guard lock(shared.mutex);
        ++shared.timeouts;
        continue;
      }
      lease.emplace(std::move(attempt.lease()));
    } catch (const Error& e) {
      shared.failed("acquire (client " + std::to_string(id) + ")", e);
      std::this_thread::sleep_for(20ms);
      continue;
    }
    auto loss = std::make_shared<LossRecord>();
    lease->on_lost([loss](const LossInfo& info) { loss->set(info); });
    const auto usable = [&] { return lease->held() && Clock::now() < lease->valid_until(); };

    Use use{id, lease->token(), lease->hold_count()};
    // The one lease held while the member dies: taken by whichever contender acquires first
    // after the main thread asks, used in 20 ms steps until the kill is done, then released at
    // once, as a holder the kill caught in the middle of its work would.
    use.across_kill = shared.kill_wanted.load() && !shared.kill_claimed.exchange(true);
    bool started = false;
    for (bool more = true; more;) {
      if (!usable()) break;
      const auto read_at = Clock::now();
      if (!started) {
        use.first = read_at;
        started = true;
        if (use.across_kill) shared.holding_for_kill.set_value();
      }
      use.last = read_at;
      const long value = shared.counter.load();
      std::this_thread::sleep_for(20ms);
      if (!usable()) break;
      shared.counter.store(value + 1);
      use.last = Clock::now();
      ++use.writes;
      ++shared.increments;
      more = use.across_kill && !shared.kill_done.load();
    }
    if (!started) use.first = use.last = Clock::now();
    if (use.across_kill && !started) shared.holding_for_kill.set_value();

    KillOutcome outcome = KillOutcome::kept;
    std::string detail;
    try {
      lease->release();
      if (loss->when()) outcome = KillOutcome::learned_lost;
    } catch (const LockLostError& e) {
      outcome = KillOutcome::learned_lost;
      detail = e.what();
    } catch (const Error& e) {
      outcome = KillOutcome::release_failed;
      detail = e.what();
      shared.failed("release (client " + std::to_string(id) + ")", e);
    }
    if (lease->lost() || loss->when()) outcome = KillOutcome::learned_lost;
    lease.reset();  // retries a failed release once, as any holder's scope exit would
    std::lock_guard lock(shared.mutex);
    shared.log.push_back(use);
    if (use.across_kill) {
      shared.kill_outcome = outcome;
      shared.kill_outcome_detail = detail;
      if (loss->when()) shared.kill_outcome_detail += " loss: " + loss->message();
    }
  }
}

// Each rule's violations, counted, with the first few shown.
struct Violations {
  int count = 0;
  std::string shown;
  void add(const std::string& what) {
    if (++count <= 3) shown += "  " + what + "\n";
  }
};

}  // namespace

FailoverRun contend_through_failover(const std::string& url, const std::string& key, int clients,
                                     std::chrono::seconds after_kill, const std::function<int()>& kill) {
  FailoverRun run;
  for (int i = 0; i < clients; ++i) run.clients.push_back(Client::open(url));

  Contention shared;
  shared.key = key;
  shared.begun = Clock::now();
  std::vector<std::jthread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back(contend, run.clients[static_cast<std::size_t>(i)], i, std::ref(shared));
  }

  std::this_thread::sleep_for(2s);
  shared.kill_wanted.store(true);
  auto holding = shared.holding_for_kill.get_future();
  run.held_for_kill = holding.wait_for(5s) == std::future_status::ready;
  const auto kill_sent = Clock::now();
  run.killed_member = kill();
  const auto killed = Clock::now();
  shared.stop_at.store((killed + after_kill).time_since_epoch().count());
  shared.kill_done.store(true);
  threads.clear();  // joins
  const auto ended = Clock::now();

  std::vector<Use> log;
  {
    std::lock_guard lock(shared.mutex);
    log = shared.log;
  }
  std::sort(log.begin(), log.end(), [](const Use& a, const Use& b) { return a.first < b.first; });
  const auto t = [&](Clock::time_point p) { return ms(p - shared.begun); };
  std::ostringstream summary;
  summary << log.size() << " acquisitions, " << shared.increments.load() << " increments, " << shared.timeouts
          << " timed-out waits; member " << run.killed_member << " killed at +" << t(kill_sent) << "..+"
          << t(killed) << " ms; contention until +" << t(ended)
          << " ms; lease across the kill: " << to_string(shared.kill_outcome)
          << (shared.kill_outcome_detail.empty() ? "" : " — ") << shared.kill_outcome_detail << "\n";
  for (const auto& [what, seen] : shared.failures) {
    summary << "  failed " << seen.count << "x (+" << seen.first_ms << "..+" << seen.last_ms << " ms): " << what
            << "\n";
  }
  run.summary = summary.str();
  std::printf("%s", run.summary.c_str());

  const auto describe = [&](const Use& u) {
    std::ostringstream out;
    out << "client " << u.client << " token " << u.token << " holds " << u.hold_count << " used +" << t(u.first)
        << "..+" << t(u.last) << " ms, " << u.writes << " writes" << (u.across_kill ? " (across the kill)" : "");
    return out.str();
  };
  Violations overlaps, backwards, reentries;
  for (std::size_t i = 1; i < log.size(); ++i) {
    const std::string pair = describe(log[i - 1]) + "\n    then " + describe(log[i]);
    if (log[i].first < log[i - 1].last) overlaps.add(pair);
    if (log[i].token <= log[i - 1].token) backwards.add(pair);
  }
  // No contender ever re-enters: a hold count above 1 means that an entry of its own it did
  // not know about (left in the queue by a failed call) was taken for its holding.
  for (const auto& u : log) {
    if (u.hold_count != 1) reentries.add(describe(u));
  }
  run.acquisitions = static_cast<int>(log.size());
  run.overlaps = overlaps.count;
  run.overlaps_shown = overlaps.shown;
  run.token_regressions = backwards.count;
  run.token_regressions_shown = backwards.shown;
  run.phantom_reentries = reentries.count;
  run.phantom_reentries_shown = reentries.shown;
  run.counter = shared.counter.load();
  run.increments = shared.increments.load();
  run.after_kill_by_client.assign(static_cast<std::size_t>(clients), 0);
  for (const auto& u : log) {
    if (u.first > killed) {
      ++run.after_kill_by_client[static_cast<std::size_t>(u.client)];
      ++run.after_kill;
    }
  }
  run.kill_outcome_ok =
      shared.kill_outcome == KillOutcome::kept || shared.kill_outcome == KillOutcome::learned_lost;
  run.kill_outcome = std::string(to_string(shared.kill_outcome)) + " " + shared.kill_outcome_detail;
  return run;
}

void expect_safe_failover(const FailoverRun& run, const std::string& url, const std::string& key) {
  ASSERT_TRUE(run.held_for_kill) << "no contender took the key within 5 s of being asked to hold it across the kill\n"
                                 << run.summary;
  EXPECT_EQ(run.overlaps, 0) << "times two holders used the key at once:\n" << run.overlaps_shown << run.summary;
  EXPECT_EQ(run.token_regressions, 0) << "times fencing tokens did not rise in the order the key was taken:\n"
                                      << run.token_regressions_shown << run.summary;
  EXPECT_EQ(run.phantom_reentries, 0) << "acquisitions by contenders holding nothing that came back as re-entries:\n"
                                      << run.phantom_reentries_shown << run.summary;
  EXPECT_EQ(run.counter, run.increments) << "updates were lost: two holders at once\n" << run.summary;
  EXPECT_GE(run.after_kill, 10) << "acquisitions did not go on after the kill\n" << run.summary;
  // The queue is FIFO: in the seconds after the failover every client gets the key, unless an
  // entry nobody tracks (left behind by a call that failed) wedges the queue.
  for (std::size_t i = 0; i < run.after_kill_by_client.size(); ++i) {
    EXPECT_GT(run.after_kill_by_client[i], 0) << "client " << i << " never took the key after the kill\n"
                                              << run.summary;
  }
  EXPECT_TRUE(run.kill_outcome_ok) << "the lease held across the kill: " << run.kill_outcome;

  // Every lease has been released or dropped, and the clients still live: the key is free.
  Client after = Client::open(url);
  auto last = after.try_acquire_for(key, 2s);
  const auto named = sole_holder(last.holders());
  EXPECT_TRUE(last) << "the key is still held after every contender let go: "
                    << (named ? named->owner + " token " + std::to_string(named->token) + " holds " +
                                    std::to_string(named->hold_count)
                              : std::string("no holder named"));
}

}  // namespace dlock::test
