// etcd:// against the etcd scripts/test.sh started (DLOCK_ETCD_URL, DLOCK_ETCD_ENDPOINTS for
// etcdctl): the lease is the session. Its end frees every key at once when the client closes,
// and a lease revoked from outside is a loss the holder hears of at once, long before its next
// renewal. Every case skips without the server.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>

#include "dlock/client.hpp"
#include "support/holders.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::ms;

class EtcdSession : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = test::env("DLOCK_ETCD_URL");
    endpoints_ = test::env("DLOCK_ETCD_ENDPOINTS");
    if (!base_ || !endpoints_)
      GTEST_SKIP() << "no etcd: run scripts/test.sh, or set DLOCK_ETCD_URL and DLOCK_ETCD_ENDPOINTS";
  }
  // A prefix of this case's own, and 10 s leases: far longer than any wait below.
  std::string url() const { return *base_ + root_ + "?ttl=10s"; }
  // etcdctl's output, trimmed.
  std::string etcdctl(const std::string& arguments) const {
    const std::string command =
        "ETCDCTL_API=3 etcdctl --endpoints=" + *endpoints_ + " " + arguments + " 2>&1";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
    std::string out;
    char buffer[256];
    while (pipe && std::fgets(buffer, sizeof buffer, pipe.get())) out += buffer;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  std::optional<std::string> base_, endpoints_;
  const std::string root_ = "/dlock-session-test-" + test::random_hex(12);
};

TEST_F(EtcdSession, ClosingTheClientFreesItsKeysAtOnce) {
  Client other = Client::open(url());
  {
    Client client = Client::open(url());
    client.acquire("k", {.ttl = 10s}).detach();  // never released: the lease holds it
    ASSERT_FALSE(other.try_acquire("k"));
  }
  const auto closed = Clock::now();
  ASSERT_TRUE(other.try_acquire_for("k", 5s)) << "the closed client's lease still held the key";
  EXPECT_LT(ms(Clock::now() - closed), 2000)
      << "ms from the close to the next acquisition: the lease was not revoked";
}

TEST_F(EtcdSession, ALeaseRevokedFromOutsideIsALossReportedAtOnce) {
  Client client = Client::open(url());
  Client other = Client::open(url());
  std::promise<LossInfo> lost;
  Lease lease = client.acquire("k");  // renewed every 10 s: only the watch can tell sooner
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  // The node's name starts with the lease's id, in hex: etcdctl takes it so.
  const std::string node = etcdctl("get --prefix --keys-only " + root_ + "/");
  const auto slash = node.rfind('/');
  ASSERT_NE(slash, std::string::npos) << node;
  const std::string lease_id = node.substr(slash + 1, 16);
  const auto revoked = Clock::now();
  ASSERT_NE(etcdctl("lease revoke " + lease_id).find("revoked"), std::string::npos);
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready)
      << "the holder was not told its lease was revoked";
  EXPECT_LT(ms(Clock::now() - revoked), 1500) << "ms from the revoke to the holder's loss";
  EXPECT_EQ(future.get().reason, LossReason::not_owner);
  auto next = other.try_acquire("k");
  ASSERT_TRUE(next) << "the revoked lease's key was not free";
  EXPECT_GT(next.lease().token(), lease.token());
  // The client goes on under a new lease.
  Lease again = client.acquire("k2");
  EXPECT_TRUE(again.held());
}

}  // namespace
}  // namespace dlock
