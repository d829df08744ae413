// etcd:// on a private 3-member cluster each case starts (scripts/servers/etcd.sh): the leader
// killed with SIGKILL while a held key is contended. Judged from outside the library
// (support/failover_contention.hpp). Every case skips without Debian's etcd-server.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "dlock/client.hpp"
#include "support/failover_contention.hpp"
#include "support/scripted_servers.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class EtcdCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    std::error_code error;
    if (!std::filesystem::exists("/usr/bin/etcd", error)) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd; Debian: apt-get install etcd-server etcd-client)";
    }
    // The library's warnings (failed renewals and releases during a failover), timed from the
    // start of the case, so a failure can be read against the case's own events.
    set_log_handler([begun = begun_](LogLevel level, std::string_view message) {
      if (level < LogLevel::info) return;
      std::fprintf(stderr, "dlock [+%lld ms]: %.*s\n", test::ms(Clock::now() - begun),
                   static_cast<int>(message.size()), message.data());
    });
  }
  void TearDown() override {
    set_log_handler([](LogLevel level, std::string_view message) {
      if (level >= LogLevel::warning)
        std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(message.size()), message.data());
    });
  }

  const Clock::time_point begun_ = Clock::now();
};

// 3 members; 4 clients contend for one key; about 2 s in the leader is killed while one of them
// holds the key, and they go on for 14 s. Leases of 5 s: etcd extends every lease by its
// election timeout when a new leader takes over, so a holder whose keep-alives get through
// keeps its key. A request in flight at the kill stalls until etcd's request timeout (about
// 7 s: 5 s and two election timeouts) and fails, so every contender may lose that long.
TEST_F(EtcdCluster, LeaderKilledWhileAHeldKeyIsContended) {
  test::ScriptedServers cluster(DLOCK_SERVER_SCRIPT, "dlock-etcd", 3);
  const std::string url = cluster.env("DLOCK_ETCD_URL") + "/dlock-test-" + test::random_hex(8) + "?ttl=5s";
  const std::string key = "leader-killed";
  const auto run = test::contend_through_failover(url, key, 4, 14s, [&] {
    const int leader = cluster.leader();
    cluster.kill(leader, "KILL");
    return leader;
  });
  RecordProperty("acquisitions", run.acquisitions);
  test::expect_safe_failover(run, url, key);
}

}  // namespace
}  // namespace dlock
