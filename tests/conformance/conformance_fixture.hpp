#pragma once

// The fixture every conformance case runs in: one backend parameter (support/backend_params.hpp),
// a fresh store per test (a new temp directory, a new local:// store), unique keys, the
// library's log captured, and helpers for timing and error checks.
//
// Timing rule for every case: ordering and lower bounds are asserted tightly, upper bounds
// loosely (the suite runs under ASan on two cores beside other suites).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/client.hpp"
#include "support/backend_params.hpp"
#include "support/fault_backend.hpp"

#ifndef DLOCK_CONFORMANCE_WORKER
#error "DLOCK_CONFORMANCE_WORKER must name the conformance_worker executable"
#endif

namespace dlock::test {

using Clock = std::chrono::steady_clock;

// Random per test process: keys and owners on shared servers never collide across runs.
const std::string& run_id();

// Every line the library logs, also echoed to stderr. Installed by the fixture.
class LogCapture {
 public:
  static void install();
  static void clear();
  static std::vector<std::string> lines();
  // True when some line contains every one of `parts`.
  static bool contains(std::initializer_list<std::string_view> parts);
};

class BackendTest : public ::testing::TestWithParam<BackendParam> {
 protected:
  void SetUp() override;
  void TearDown() override;

  const std::string& url() const noexcept { return url_; }
  const std::filesystem::path& temp_dir() const noexcept { return temp_dir_; }
  // What this test's store can do, as its backend says (opened once, on first use).
  const backend::Capabilities& capabilities() const;
  bool spans_processes() const { return capabilities().spans_processes; }

  // A new Client on this test's store.
  Client open() const { return Client::open(url_); }
  // The backend object behind this test's URL, opened directly (for the backend contract
  // itself and for wrapping in a FaultBackend).
  std::shared_ptr<backend::Backend> open_backend() const;
  // A Client whose backend calls all go through a FaultBackend over this test's store.
  struct Faulty {
    Client client;
    std::shared_ptr<FaultBackend> faults;
  };
  Faulty open_faulty() const;

  // A key unique to this test (and run): conformance/<run>/<Test>/<backend>/<name>.
  std::string key(std::string_view name = "k") const;
  // A key a test built itself, made ready for the backend (row mode inserts its row).
  std::string prepared(std::string key) const;

 private:
  std::string url_;
  std::filesystem::path temp_dir_;
  std::string key_base_;
  mutable std::optional<backend::Capabilities> capabilities_;
};

// Polls `condition` every few milliseconds until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// Milliseconds, for readable failure messages.
inline long long ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// Checks that `call` throws E (or, with a predicate, a dlock::Error it accepts) whose message
// contains every one of `all` and at least one of `any` (case-insensitive).
::testing::AssertionResult message_names(const std::string& message, const std::vector<std::string>& all,
                                         const std::vector<std::string>& any);

template <class E>
::testing::AssertionResult throws_naming(const std::function<void()>& call,
                                         const std::vector<std::string>& all,
                                         const std::vector<std::string>& any = {}) {
  try {
    call();
  } catch (const E& e) {
    return message_names(e.what(), all, any);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception type than expected: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace dlock::test
