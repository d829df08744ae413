// A program of a dlock user, built by scripts/consumer-test.sh against an installed dlock (or one
// added with add_subdirectory): it names neither dlock's dependencies nor a C++ standard.
// Usage: consumer URL
#include <dlock/dlock.hpp>

#include <cstdio>
#include <cstring>
#include <mutex>

int main(int argc, char** argv) {
  if (argc != 2) return 64;
  if (std::strcmp(dlock::version(), DLOCK_VERSION_STRING) != 0) {
    std::fprintf(stderr, "libdlock %s, headers %s\n", dlock::version(), DLOCK_VERSION_STRING);
    return 1;
  }
  auto client = dlock::Client::open(argv[1]);
  auto job = client.mutex("consumer/job");
  std::unique_lock guard(job);
  std::printf("dlock %s: holding consumer/job, fencing token %llu\n", dlock::version(),
              static_cast<unsigned long long>(job.lease()->token()));
  return 0;
}
