// conformance_worker: the other processes of the conformance suite's multi-process cases.
//
//   conformance_worker counter URL KEY ITERATIONS COUNTER_FILE
//     ITERATIONS times: lock KEY through Client::mutex; read "COUNT TOKEN" from COUNTER_FILE
//     (pread); check this lease's fencing token is greater than TOKEN; sleep ~0.5 ms; write
//     COUNT+1 and the token back (pwrite); unlock. Without mutual exclusion, updates are lost.
//   conformance_worker pair URL ITERATIONS KEY1 FILE1 KEY2 FILE2
//     ITERATIONS times: lock KEY1 and KEY2 through one Client::multi_mutex; update FILE1 with
//     KEY1's token, then FILE2 with KEY2's, as `counter` does (no sleep); unlock.
//   conformance_worker share URL KEY ROLE ITERATIONS LOG_FILE
//     ITERATIONS times: take KEY as ROLE (reader: shared; writer: exclusive; permit:N: one of
//     a semaphore's N permits); append "+ R TOKEN PID" to LOG_FILE (O_APPEND, one write), sleep
//     ~1 ms, append "- R TOKEN PID"; release. R is r, w or p. Each logged interval lies inside
//     the hold, so the test judges overlaps from the log alone.
//   conformance_worker hold URL KEY TTL_MS READY_FILE [PERMITS]
//     Acquires KEY (with PERMITS, one permit of a semaphore of that many) with an auto-renewing
//     TTL_MS lease, writes "TOKEN OWNER" to READY_FILE (atomically), then sleeps until killed.
//     If the lease is lost (force-release), it prints the loss and exits 42.
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
               "       conformance_worker pair URL ITERATIONS KEY1 FILE1 KEY2 FILE2\n"
               "       conformance_worker share URL KEY reader|writer|permit:N ITERATIONS LOG_FILE\n"
               "       conformance_worker hold URL KEY TTL_MS READY_FILE [PERMITS]\n");
  return kUsage;
}

// One update of a counter file inside the lock: reads "COUNT TOKEN", checks `token` is above
// TOKEN, sleeps `hold`, writes COUNT+1 and `token`. 0, or the exit code of what went wrong.
int bump(int fd, std::uint64_t token, std::chrono::microseconds hold) {
  char text[128] = {};
  if (::pread(fd, text, sizeof text - 1, 0) < 0) {
    std::perror("pread");
    return kIoError;
  }
  char* end = nullptr;
  const long long count = std::strtoll(text, &end, 10);
  const unsigned long long last_token = std::strtoull(end, nullptr, 10);
  if (token <= last_token) {
    std::fprintf(stderr, "fencing token %llu is not above the previous holder's %llu\n",
                 static_cast<unsigned long long>(token), last_token);
    return kFencingBroken;
  }
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  // Fixed width, so a shorter number never leaves digits of a longer one behind.
  const int n = std::snprintf(text, sizeof text, "%020lld %020llu\n", count + 1, static_cast<unsigned long long>(token));
  if (::pwrite(fd, text, static_cast<std::size_t>(n), 0) != n) {
    std::perror("pwrite");
    return kIoError;
  }
  return 0;
}

int open_counter(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) std::perror(path.c_str());
  return fd;
}

int run_counter(const std::string& url, const std::string& key, long iterations, const std::string& path) {
  const int fd = open_counter(path);
  if (fd < 0) return kIoError;
  auto client = dlock::Client::open(url);
  auto mutex = client.mutex(key);
  for (long i = 0; i < iterations; ++i) {
    std::lock_guard guard(mutex);
    if (const int failed = bump(fd, mutex.lease()->token(), std::chrono::microseconds(500))) return failed;
  }
  ::close(fd);
  return 0;
}

// Both keys through one multi-key lock, updating each key's counter file in the order given.
int run_pair(const std::string& url, long iterations, const std::string& key1, const std::string& path1,
             const std::string& key2, const std::string& path2) {
  const int fd1 = open_counter(path1);
  const int fd2 = open_counter(path2);
  if (fd1 < 0 || fd2 < 0) return kIoError;
  auto client = dlock::Client::open(url);
  auto both = client.multi_mutex({key1, key2});
  for (long i = 0; i < iterations; ++i) {
    std::lock_guard guard(both);
    const dlock::MultiLease& lease = *both.lease();
    if (const int failed = bump(fd1, lease.token(key1), std::chrono::microseconds(0))) return failed;
    if (const int failed = bump(fd2, lease.token(key2), std::chrono::microseconds(0))) return failed;
  }
  ::close(fd1);
  ::close(fd2);
  return 0;
}

int run_share(const std::string& url, const std::string& key, const std::string& role, long iterations,
              const std::string& path) {
  dlock::LockOptions options;
  char mark = 'w';
  if (role == "reader") {
    options.mode = dlock::LockMode::shared;
    mark = 'r';
  } else if (role.rfind("permit:", 0) == 0) {
    options.mode = dlock::LockMode::shared;
    options.permits = static_cast<std::uint32_t>(std::strtoul(role.c_str() + 7, nullptr, 10));
    mark = 'p';
  } else if (role != "writer") {
    return usage();
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) {
    std::perror(path.c_str());
    return kIoError;
  }
  const auto log = [&](char sign, std::uint64_t token) {
    char line[96];
    const int n = std::snprintf(line, sizeof line, "%c %c %llu %d\n", sign, mark,
                                static_cast<unsigned long long>(token), static_cast<int>(::getpid()));
    return ::write(fd, line, static_cast<std::size_t>(n)) == n;
  };
  auto client = dlock::Client::open(url);
  auto lock = client.mutex(key, options);
  for (long i = 0; i < iterations; ++i) {
    std::lock_guard guard(lock);
    const std::uint64_t token = lock.lease()->token();
    if (!log('+', token)) return kIoError;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!log('-', token)) return kIoError;
  }
  ::close(fd);
  return 0;
}

[[noreturn]] void run_hold(const std::string& url, const std::string& key, long ttl_ms,
                           const std::string& ready, std::uint32_t permits) {
  auto client = dlock::Client::open(url);
  dlock::LockOptions options{.ttl = std::chrono::milliseconds(ttl_ms), .auto_renew = true};
  if (permits > 0) {
    options.mode = dlock::LockMode::shared;
    options.permits = permits;
  }
  auto lease = client.acquire(key, options);
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
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "pair" && argc == 8) {
      return run_pair(argv[2], std::strtol(argv[3], nullptr, 10), argv[4], argv[5], argv[6], argv[7]);
    }
    if (mode == "share" && argc == 7) {
      return run_share(argv[2], argv[3], argv[4], std::strtol(argv[5], nullptr, 10), argv[6]);
    }
    if (mode == "hold" && (argc == 6 || argc == 7)) {
      run_hold(argv[2], argv[3], std::strtol(argv[4], nullptr, 10), argv[5],
               argc == 7 ? static_cast<std::uint32_t>(std::strtoul(argv[6], nullptr, 10)) : 0);
    }
    if (argc != 6) return usage();
    if (mode == "counter") return run_counter(argv[2], argv[3], std::strtol(argv[4], nullptr, 10), argv[5]);
  } catch (const dlock::Error& e) {
    std::fprintf(stderr, "conformance_worker: %s\n", e.what());
    return kDlockError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conformance_worker: %s\n", e.what());
    return kIoError;
  }
  return usage();
}
