// A service of which several copies run, on one host or many, and one copy at a time does the
// batch work. Run two copies against one store and watch them take turns:
//   DLOCK_URL=sqlite:///tmp/locks.db ./service 3 & DLOCK_URL=sqlite:///tmp/locks.db ./service 3
#include <dlock/dlock.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

using namespace std::chrono_literals;

namespace {

// The lease can end under us even while the library renews it: this process stalled (GC, swap,
// SIGSTOP) or the store stopped answering. Another copy may then hold the lock, so each step
// checks first; stop_token() fires on a loss the library has noticed, valid_until() also covers
// a renewal that is merely late.
bool still_ours(const dlock::Lease& lease) {
  return !lease.stop_token().stop_requested() && std::chrono::steady_clock::now() < lease.valid_until();
}

void do_one_step() { std::this_thread::sleep_for(100ms); }  // stands in for real work

}  // namespace

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 3;
  auto client = dlock::Client::open();  // $DLOCK_URL, else a per-user SQLite file
  auto batch_lock = client.mutex("examples/batch");  // 30 s lease, renewed in the background
  batch_lock.on_lost([](const dlock::LossInfo& loss) {  // runs on the renewal thread: keep it short
    std::fprintf(stderr, "lost %s: %s\n", loss.key.c_str(), loss.message.c_str());
  });

  for (int done = 0; done < batches;) {
    std::unique_lock<dlock::Mutex> guard(batch_lock, std::defer_lock);
    // Bounded, not lock(): a real service also watches for shutdown between attempts.
    if (!guard.try_lock_for(5s)) {
      for (const dlock::LockInfo& holder : batch_lock.last_holders()) {
        std::printf("pid %d: busy, %s holds it\n", getpid(), holder.owner.c_str());
      }
      continue;
    }
    const dlock::Lease& lease = *batch_lock.lease();
    std::printf("pid %d: batch %d, fencing token %llu\n", getpid(), done + 1,
                static_cast<unsigned long long>(lease.token()));
    std::fflush(stdout);
    int step = 0;
    for (; step < 5 && still_ours(lease); ++step) do_one_step();
    if (step < 5) {
      std::fprintf(stderr, "pid %d: lease gone after %d steps; the batch is left for the next holder\n", getpid(), step);
      continue;  // guard's unlock() reports the loss to the log; nothing else to undo
    }
    ++done;
    guard.unlock();
    std::this_thread::sleep_for(200ms);  // waiting for the next batch lets the other copies in
  }
}
