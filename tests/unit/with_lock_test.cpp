// with_lock, key templates and the default TTL from the environment (dlock/with_lock.hpp),
// on local://.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <string>

#include "backends/registry.hpp"
#include "core/url.hpp"
#include "dlock/dlock.hpp"
#include "support/fault_backend.hpp"

using namespace std::chrono_literals;

namespace {

std::string fresh_url() {
  static int n = 0;
  return "local://with-lock-test-" + std::to_string(++n);
}

struct Sku {
  int family;
  int item;
};
std::ostream& operator<<(std::ostream& out, const Sku& sku) { return out << sku.family << '-' << sku.item; }

bool message_has(const std::exception& e, const std::string& part) {
  return std::string(e.what()).find(part) != std::string::npos;
}

// Sets an environment variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST(KeyTemplate, PlaceholdersTakeTheArgumentsInOrder) {
  EXPECT_EQ(dlock::format_key("order:{}", 42), "order:42");
  EXPECT_EQ(dlock::format_key("order:{}:line:{}", 7L, std::string("a b")), "order:7:line:a b");
  EXPECT_EQ(dlock::format_key("{}/{}/{}", "x", std::string_view("y"), 'z'), "x/y/z");
  EXPECT_EQ(dlock::format_key("{} {} {}", true, 1.5, Sku{3, 14}), "true 1.5 3-14");
  EXPECT_EQ(dlock::format_key("{{literal}} {}", -1), "{literal} -1");
  EXPECT_EQ(dlock::format_key("plain"), "plain");
  EXPECT_EQ(dlock::format_key("unicode:{}", "Ünïcødé"), "unicode:Ünïcødé");
}

TEST(KeyTemplate, MismatchesAndBadKeysNameTheTemplate) {
  const auto fails = [](auto&& make, const std::string& part) {
    try {
      make();
    } catch (const dlock::InvalidArgument& e) {
      EXPECT_TRUE(message_has(e, part)) << e.what();
      EXPECT_TRUE(message_has(e, "key template")) << e.what();
      return;
    }
    ADD_FAILURE() << "no InvalidArgument for the case expecting '" << part << "'";
  };
  fails([] { return dlock::format_key("a:{}:{}", 1); }, "more {} placeholders");
  fails([] { return dlock::format_key("a:{}", 1, 2); }, "1 {} placeholders but 2 arguments");
  fails([] { return dlock::format_key("a:{:x}", 1); }, "lone '{'");
  fails([] { return dlock::format_key("a}b"); }, "lone '}'");
  fails([] { return dlock::format_key(""); }, "empty key");
  fails([] { return dlock::format_key("{}", ""); }, "empty key");
  fails([] { return dlock::format_key("a:{}", "x\ny"); }, "not valid");
}

TEST(WithLock, RunsTheFunctionUnderTheLockAndReturnsItsResult) {
  auto client = dlock::Client::open(fresh_url());
  const int result = dlock::with_lock(client, "order:{}", 42, [&] {
    EXPECT_FALSE(client.inspect("order:42").empty()) << "the function ran without the lock";
    return 7;
  });
  EXPECT_EQ(result, 7);
  EXPECT_TRUE(client.inspect("order:42").empty()) << "the lock outlived the function";

  std::uint64_t token = 0;
  dlock::with_lock(client, {.ttl = 5s}, "report:{}:{}", "2026-11-26", 'b', [&](const dlock::Lease& lease) {
    EXPECT_EQ(lease.key(), "report:2026-11-26:b");
    EXPECT_EQ(lease.ttl(), 5s);
    token = lease.token();
  });
  EXPECT_GT(token, 0u);
  std::string text = dlock::with_lock(client, "k", [] { return std::string("moved out"); });
  EXPECT_EQ(text, "moved out");
}

TEST(WithLock, AThrowingFunctionReleasesTheLock) {
  auto client = dlock::Client::open(fresh_url());
  EXPECT_THROW(dlock::with_lock(client, "job:{}", 1, [] { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_TRUE(client.inspect("job:1").empty());
}

TEST(WithLock, ALossWhileTheFunctionRanIsReported) {
  auto client = dlock::Client::open(fresh_url());
  auto admin = client;
  EXPECT_THROW(dlock::with_lock(client, "job:{}", 2,
                                [&] { admin.force_release("job:2", dlock::Eviction::immediate); }),
               dlock::LockLostError);
}

TEST(WithLock, ABadTemplateIsRejectedBeforeAnyRoundTrip) {
  auto faults = std::make_shared<dlock::test::FaultBackend>(
      dlock::backends::open_backend(dlock::core::Url::parse(fresh_url())));
  auto client = dlock::Client::with_backend(faults);
  bool ran = false;
  EXPECT_THROW(dlock::with_lock(client, "a:{}:{}", 1, [&] { ran = true; }), dlock::InvalidArgument);
  EXPECT_THROW(dlock::with_lock(client, "{}", "", [&] { ran = true; }), dlock::InvalidArgument);
  EXPECT_THROW(dlock::with_lock(client, "{}", std::string(5000, 'k'), [&] { ran = true; }), dlock::InvalidArgument);
  EXPECT_FALSE(ran);
  EXPECT_EQ(faults->acquire_calls(), 0u);
}

TEST(DefaultTtl, ComesFromTheEnvironmentUnlessTheClientSetsIt) {
  {
    ScopedEnv ttl("DLOCK_TTL", "7s");
    auto client = dlock::Client::open(fresh_url());
    EXPECT_EQ(client.acquire("k").ttl(), 7s);
    EXPECT_EQ(client.acquire("k2", {.ttl = 2s}).ttl(), 2s) << "a lock's own TTL comes first";
    auto own = dlock::Client::open(fresh_url(), {.default_ttl = 3s});
    EXPECT_EQ(own.acquire("k").ttl(), 3s) << "ClientOptions::default_ttl comes before DLOCK_TTL";
  }
  EXPECT_EQ(dlock::Client::open(fresh_url()).acquire("k").ttl(), dlock::kDefaultTtl);
}

TEST(DefaultTtl, ABadValueNamesTheVariable) {
  for (const char* bad : {"soon", "0s", "-5s"}) {
    ScopedEnv ttl("DLOCK_TTL", bad);
    try {
      dlock::Client::open(fresh_url());
      ADD_FAILURE() << "DLOCK_TTL=" << bad << " was accepted";
    } catch (const dlock::ConfigurationError& e) {
      EXPECT_TRUE(message_has(e, "DLOCK_TTL")) << e.what();
      EXPECT_TRUE(message_has(e, bad)) << e.what();
    }
  }
}
