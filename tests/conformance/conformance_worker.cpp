// conformance_worker: the other processes of the conformance suite's multi-process cases.
//
//   conformance_worker counter URL KEY ITERATIONS COUNTER_FILE
//     ITERATIONS times: lock KEY through Client::mutex; read "COUNT TOKEN" from COUNTER_FILE
//     (pread); check this lease's fencing token is greater than TOKEN; sleep ~0.5 ms; write
//     COUNT+1 and the token back (pwrite); unlock. Without mutual exclusion, updates are lost.
//   conformance_worker hold URL KEY TTL_MS READY_FILE
//     Acquires KEY with an auto-renewing TTL_MS lease, writes "TOKEN OWNER" to READY_FILE
//     (atomically), then sleeps until killed. If the lease is lost (force-release), it prints
//     the loss and exits 42.
//
// Exit codes: 0 done, 2 usage, 3 fencing token went backwards, 4 file I/O, 5 dlock error,
// 42 lease lost (hold).

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "dlock/client.hpp"
#include "support/child_process.hpp"

namespace {

constexpr int kUsage = 2;
constexpr int kFencingBroken = 3;
constexpr int kIoError = 4;
constexpr int kDlockError = 5;
constexpr int kLost = 42;

int usage() {
  std::fprintf(stderr,
               "usage: conformance_worker counter URL KEY ITERATIONS COUNTER_FILE\n"
               "       conformance_worker hold URL KEY TTL_MS READY_FILE\n");
  return kUsage;
}

int run_counter(const std::string& url, const std::string& key, long iterations, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) {
    std::perror(path.c_str());
    return kIoError;
  }
  auto client = dlock::Client::open(url);
  auto mutex = client.mutex(key);
  for (long i = 0; i < iterations; ++i) {
    std::lock_guard guard(mutex);
    char text[128] = {};
    if (::pread(fd, text, sizeof text - 1, 0) < 0) {
      std::perror("pread");
      return kIoError;
    }
    char* end = nullptr;
    const long long count = std::strtoll(text, &end, 10);
    const unsigned long long last_token = std::strtoull(end, nullptr, 10);
    const std::uint64_t token = mutex.lease()->token();
    if (token <= last_token) {
      std::fprintf(stderr, "fencing token %llu is not above the previous holder's %llu\n",
                   static_cast<unsigned long long>(token), last_token);
      return kFencingBroken;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    // Fixed width, so a shorter number never leaves digits of a longer one behind.
    const int n = std::snprintf(text, sizeof text, "%020lld %020llu\n", count + 1,
                                static_cast<unsigned long long>(token));
    if (::pwrite(fd, text, static_cast<std::size_t>(n), 0) != n) {
      std::perror("pwrite");
      return kIoError;
    }
  }
  ::close(fd);
  return 0;
}

[[noreturn]] void run_hold(const std::string& url, const std::string& key, long ttl_ms,
                           const std::string& ready) {
  auto client = dlock::Client::open(url);
  auto lease = client.acquire(key, {.ttl = std::chrono::milliseconds(ttl_ms), .auto_renew = true});
  lease.on_lost([](const dlock::LossInfo& info) {
    std::fprintf(stderr, "conformance_worker: lost '%s' (%s): %s\n", info.key.c_str(),
                 dlock::to_string(info.reason), info.message.c_str());
    std::_Exit(kLost);
  });
  dlock::test::write_file_atomically(ready, std::to_string(lease.token()) + " " + lease.owner() + "\n");
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "counter") return run_counter(argv[2], argv[3], std::strtol(argv[4], nullptr, 10), argv[5]);
    if (mode == "hold") run_hold(argv[2], argv[3], std::strtol(argv[4], nullptr, 10), argv[5]);
  } catch (const dlock::Error& e) {
    std::fprintf(stderr, "conformance_worker: %s\n", e.what());
    return kDlockError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conformance_worker: %s\n", e.what());
    return kIoError;
  }
  return usage();
}
