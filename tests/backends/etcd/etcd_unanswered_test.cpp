// etcd:// writes whose answer never came, through a proxy in front of the etcd scripts/test.sh
// started (DLOCK_ETCD_URL): a release that never reached the cluster, and a take the cluster
// made but whose answer was lost. Either leaves a node under the client's lease, which the
// client keeps alive; the key must still come free, and the owner's next acquisition must be a
// hold of its own, not a re-entry of a node nobody holds. Every case skips without the server.

#include <gtest/gtest.h>

#include <string>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/server_test.hpp"
#include "support/tcp_proxy.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;

class EtcdUnanswered : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto base = test::env("DLOCK_ETCD_URL");
    if (!base) GTEST_SKIP() << "no etcd: run scripts/test.sh, or set DLOCK_ETCD_URL";
    // etcd://HOST:PORT, as the script writes it.
    const std::string endpoint = base->substr(base->find("://") + 3);
    const auto colon = endpoint.rfind(':');
    proxy_.emplace(endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1)));
    direct_ = *base + root_ + "?ttl=10s";
    // Requests give up after 1 s: the client's 10 s lease outlives a few of them.
    through_proxy_ =
        "etcd://127.0.0.1:" + std::to_string(proxy_->port()) + root_ + "?ttl=10s&connect_timeout=1s";
  }

  std::optional<test::TcpProxy> proxy_;
  std::string direct_, through_proxy_;
  const std::string root_ = "/dlock-unanswered-test-" + test::random_hex(12);
};

TEST_F(EtcdUnanswered, AReleaseThatNeverReachedTheClusterStillFreesTheKey) {
  Client client = Client::open(through_proxy_);
  Client other = Client::open(direct_);
  std::uint64_t token = 0;
  {
    Lease lease = client.acquire("k", {.ttl = 10s});
    token = lease.token();
    proxy_->partition();
    EXPECT_THROW(lease.release(), Error);
  }                 // the scope's exit tries the release again, in vain too
  proxy_->sever();  // what was sent meanwhile is lost: the node is still there
  // The client makes no call: its own repairs free the key, long before its lease would end
  // (it never would: the client keeps it alive).
  auto next = other.try_acquire_for("k", 5s);
  ASSERT_TRUE(next) << "the key stayed held by the node of a release that never reached the cluster";
  EXPECT_GT(next.lease().token(), token);
  next.lease().release();
  auto again = client.try_acquire("k");
  ASSERT_TRUE(again);
  EXPECT_EQ(again.lease().hold_count(), 1u) << "the owner's acquisition re-entered a node nobody held";
  EXPECT_GT(again.lease().token(), next.lease().token());
}

TEST_F(EtcdUnanswered, ATakeWhoseAnswerWasLostLeavesNoHolder) {
  Client client = Client::open(through_proxy_);
  Client other = Client::open(direct_);
  client.acquire("first").release();  // the client's lease is granted at its first acquisition
  proxy_->cut_answers();
  // The key is free: the cluster puts the client's node, and the answer waits at the proxy.
  EXPECT_THROW(client.try_acquire("k", {.ttl = 10s}), Error);
  proxy_->sever();
  auto next = other.try_acquire_for("k", 5s);
  ASSERT_TRUE(next) << "the key stayed held by the node of a take whose answer was lost";
  next.lease().release();
  auto again = client.try_acquire("k");
  ASSERT_TRUE(again);
  EXPECT_EQ(again.lease().hold_count(), 1u) << "the owner's acquisition re-entered a node nobody held";
}

}  // namespace
}  // namespace dlock
