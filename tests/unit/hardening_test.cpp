// Regression tests for defects an adversarial review found in the core (issue 14, item 9).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "dlock/client.hpp"

using namespace std::chrono_literals;

namespace {

dlock::Client fresh_client() {
  static int n = 0;
  return dlock::Client::open("local://hardening-test-" + std::to_string(++n));
}

}  // namespace

// Defect: Mutex::try_lock_for added the timeout to now without a clamp, so hours::max()
// overflowed into the past (or UB) instead of waiting.
TEST(MutexTryLockFor, HugeTimeoutDoesNotOverflow) {
  auto client = fresh_client();
  auto mutex = client.mutex("k");
  EXPECT_TRUE(mutex.try_lock_for(std::chrono::hours::max()));
  mutex.unlock();
  EXPECT_TRUE(mutex.try_lock_for(std::chrono::nanoseconds::max()));
  mutex.unlock();

  // Held by another owner: a huge timeout waits (rather than failing at once) until released.
  auto other = client.mutex("k", {.owner = "other"});
  ASSERT_TRUE(other.try_lock());
  auto waiter = std::async(std::launch::async, [&] { return mutex.try_lock_for(std::chrono::hours::max()); });
  EXPECT_EQ(waiter.wait_for(300ms), std::future_status::timeout) << "a huge timeout gave up at once";
  other.unlock();
  EXPECT_TRUE(waiter.get());
  mutex.unlock();
}

// Defect: a moved-from Mutex dereferenced null in the noexcept unlock() (std::terminate).
TEST(MutexMovedFrom, UnlockDoesNotCrashAndLockThrows) {
  auto client = fresh_client();
  auto mutex = client.mutex("k");
  auto moved = std::move(mutex);
  mutex.unlock();  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_THROW(mutex.lock(), std::logic_error);
  EXPECT_THROW(static_cast<void>(mutex.try_lock()), std::logic_error);
  EXPECT_EQ(mutex.lease(), nullptr);
  EXPECT_TRUE(mutex.key().empty());
  EXPECT_TRUE(moved.try_lock());
  moved.unlock();
}

// Defect: the log handler ran under a global mutex, so a handler that logged (or replaced the
// handler) deadlocked.
TEST(LogHandler, HandlerThatLogsOrReplacesItselfDoesNotDeadlock) {
  auto client = fresh_client();
  std::atomic<int> lines{0};
  auto done = std::async(std::launch::async, [&] {
    dlock::set_log_handler([&](dlock::LogLevel, std::string_view) {
      if (lines++ == 0) {
        // Logging from inside the handler: unlock() of a key not held logs an error.
        auto inner = client.mutex("inner");
        inner.unlock();
        dlock::set_log_handler([&](dlock::LogLevel, std::string_view) { ++lines; });
      }
    });
    auto mutex = client.mutex("k");
    mutex.unlock();  // not held: logs
  });
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready) << "the handler deadlocked";
  done.get();
  EXPECT_GE(lines.load(), 2);
  dlock::set_log_handler(nullptr);
}

// Defect: C1 control characters (U+0080..U+009F) passed key validation though the docs exclude
// control characters.
TEST(KeyValidation, C1ControlCharactersAreRejected) {
  auto client = fresh_client();
  for (const char* key : {"a\xC2\x80z", "\xC2\x85", "x\xC2\x9F"}) {
    try {
      client.try_acquire(key);
      ADD_FAILURE() << "a key with a C1 control character was accepted";
    } catch (const dlock::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("control character U+00"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(client.try_acquire("caf\xC3\xA9 \xC2\xA0nbsp"));  // U+00E9 and U+00A0 are fine
}
