// zookeeper://'s sets of keys (Backend::acquire_set and release_set: one transaction makes a node
// in every key's queue, another removes them): what the conformance suite cannot see from
// outside. A set refused at any key leaves no node in any queue (a node left behind would hold a
// free key, or queue behind the busy key's holder); tokens per key rise across sets and single
// acquisitions; a set and single acquisitions of its keys interleave; a set whose owner already
// holds a key goes key by key, and so does a set with a key this client found busy;
// release_set keeps release()'s hold counts, and does nothing when a node went.
//
// One private standalone server for the suite (scripts/servers/zookeeper.sh); every case skips
// when ZooKeeper is not installed.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backends/registry.hpp"
#include "core/url.hpp"
#include "dlock/backend.hpp"
#include "dlock/client.hpp"
#include "support/holders.hpp"
#include "support/server_test.hpp"
#include "support/zookeeper_servers.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using backend::Acquired;
using backend::AcquireRequest;
using backend::LeaseRef;
using test::sole_holder;

class ZooKeeperSets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (test::ZooKeeperServers::installed()) servers_ = new test::ZooKeeperServers(DLOCK_SERVER_SCRIPT, 1);
  }
  static void TearDownTestSuite() {
    delete servers_;
    servers_ = nullptr;
  }
  void SetUp() override {
    if (!servers_) GTEST_SKIP() << "ZooKeeper is not installed (/usr/share/java/zookeeper.jar)";
  }

  std::string url() const { return servers_->url() + "/dlock-sets-" + run_; }
  std::shared_ptr<backend::Backend> open_backend() const {
    return backends::open_backend(core::Url::parse(url()));
  }
  std::string key(const std::string& name) const {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/" + name;
  }
  // `owner`: a literal, which the request's view outlives.
  static AcquireRequest request(const std::string& key, std::string_view owner) {
    return AcquireRequest{key, owner, 10'000ms};
  }
  // The set's leases; a test failure when it was not granted.
  static std::vector<Acquired> granted(const std::optional<backend::AcquireSetResult>& result) {
    EXPECT_TRUE(result) << "zookeeper:// took a set key by key";
    if (!result) return {};
    const auto* leases = std::get_if<std::vector<Acquired>>(&*result);
    EXPECT_NE(leases, nullptr) << "a free set was refused";
    return leases ? *leases : std::vector<Acquired>{};
  }

  static test::ZooKeeperServers* servers_;
  const std::string run_ = test::random_hex(8);
};

test::ZooKeeperServers* ZooKeeperSets::servers_ = nullptr;

// The busy key first, in the middle and last: every other key's node goes with the refusal, and
// the busy key keeps its holder alone (no node of the set queued behind it). A client's first
// set on those keys goes as one transaction and is refused at the busy key; once a key was
// found busy, a set with it goes key by key (nullopt) before it makes any node, so its nodes
// do not wake or reorder another call's waiters.
TEST_F(ZooKeeperSets, ASetFindingOneKeyBusyLeavesNoNodeOnAnyKey) {
  auto theirs = open_backend();
  const std::vector<std::string> keys{key("a"), key("b"), key("c")};
  for (std::size_t busy = 0; busy < keys.size(); ++busy) {
    SCOPED_TRACE("busy key " + keys[busy]);
    auto mine = open_backend();
    const auto blocker = theirs->acquire(request(keys[busy], "them"));
    ASSERT_TRUE(std::holds_alternative<Acquired>(blocker));
    const auto token = std::get<Acquired>(blocker).token;
    const std::vector<AcquireRequest> set{request(keys[0], "me"), request(keys[1], "me"),
                                          request(keys[2], "me")};
    const auto leaves_no_node = [&] {
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const auto holders = theirs->inspect(keys[i]);
        if (i != busy) {
          EXPECT_TRUE(holders.empty()) << keys[i] << " kept the set's node";
          continue;
        }
        const auto holder = sole_holder(holders);
        ASSERT_TRUE(holder);
        EXPECT_EQ(holder->token, token);
        EXPECT_EQ(holder->waiters.value_or(99), 0u) << "the set's node stayed queued behind the holder";
      }
    };
    const auto first = mine->acquire_set(set);
    ASSERT_TRUE(first) << "a set on keys this client had not found busy read the queues first";
    const auto* refused = std::get_if<backend::SetBusy>(&*first);
    ASSERT_NE(refused, nullptr) << "a set with a busy key was granted";
    EXPECT_EQ(refused->index, busy);
    leaves_no_node();
    EXPECT_FALSE(mine->acquire_set(set)) << "a set with a key found busy was tried as one transaction";
    leaves_no_node();
    ASSERT_EQ(theirs->release({keys[busy], "them", token}), 0u);
  }
}

// A set's token for each key is above every earlier token of that key, single or set, and a
// single acquisition after a set gets a token above the set's.
TEST_F(ZooKeeperSets, TokensPerKeyRiseAcrossSetsAndSingleAcquisitions) {
  auto b = open_backend();
  const std::vector<std::string> keys{key("a"), key("b")};
  const std::vector<AcquireRequest> set{request(keys[0], "me"), request(keys[1], "me")};
  std::vector<std::uint64_t> last(keys.size(), 0);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto leases = granted(b->acquire_set(set));
    ASSERT_EQ(leases.size(), keys.size());
    std::vector<LeaseRef> refs;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      EXPECT_GT(leases[i].token, last[i]) << keys[i];
      EXPECT_EQ(leases[i].hold_count, 1u);
      last[i] = leases[i].token;
      refs.push_back({keys[i], "me", leases[i].token});
    }
    const auto released = b->release_set(refs);
    ASSERT_TRUE(released);
    EXPECT_EQ(*released, (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto single = b->acquire(request(keys[i], "me"));
      ASSERT_TRUE(std::holds_alternative<Acquired>(single));
      EXPECT_GT(std::get<Acquired>(single).token, last[i]) << keys[i];
      last[i] = std::get<Acquired>(single).token;
      ASSERT_EQ(b->release({keys[i], "me", last[i]}), 0u);
    }
  }
}

// Through the client: a multi-key lock keeps single acquisitions of its keys out, a single
// holder of one key refuses the set (which takes none of the others), and each gets the keys
// once the other releases.
TEST_F(ZooKeeperSets, ASetAndSingleAcquisitionsInterleave) {
  Client sets = Client::open(url());
  Client singles = Client::open(url());
  const std::vector<std::string> keys{key("a"), key("b"), key("c")};
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {
      MultiLease all = sets.acquire_all(keys, {.ttl = 10s});
      for (const auto& k : keys) {
        Attempt attempt = singles.try_acquire(k);
        EXPECT_FALSE(attempt) << k << " was free while the set held it";
        const auto holder = sole_holder(attempt.holders());
        ASSERT_TRUE(holder);
        EXPECT_EQ(holder->token, all.lease(k).token());
      }
    }
    Lease middle = singles.acquire(keys[1], {.ttl = 10s});
    MultiAttempt refused = sets.try_acquire_all(keys);
    EXPECT_FALSE(refused);
    EXPECT_EQ(refused.busy_key(), keys[1]);
    for (const auto& k : {keys[0], keys[2]}) {
      Attempt free = singles.try_acquire(k);
      EXPECT_TRUE(free) << k << " was kept by a refused set";
    }
    middle.release();
    MultiAttempt taken = sets.try_acquire_all(keys);
    ASSERT_TRUE(taken) << "the set was refused once every key was free";
    EXPECT_GT(taken.lease().lease(keys[1]).token(), middle.token());
  }
}

// A set whose owner holds one of its keys already is left to the core's key-by-key path (the
// re-entry reads and writes that hold): the answer is nothing, and the set left no node.
TEST_F(ZooKeeperSets, ASetReenteringAHeldKeyGoesKeyByKeyLeavingNoNode) {
  auto b = open_backend();
  const std::string a = key("a"), c = key("c");
  const auto held = b->acquire(request(a, "me"));
  ASSERT_TRUE(std::holds_alternative<Acquired>(held));
  EXPECT_FALSE(b->acquire_set(std::vector<AcquireRequest>{request(a, "me"), request(c, "me")}));
  const auto holder = sole_holder(b->inspect(a));
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->hold_count, 1u);
  EXPECT_EQ(holder->waiters.value_or(99), 0u);
  EXPECT_TRUE(b->inspect(c).empty());

  // Through the client, the set is taken with the held key re-entered.
  Client client = Client::with_backend(b);
  const std::string d = key("d"), e = key("e");
  Lease first = client.acquire(e, {.ttl = 10s});
  MultiLease both = client.acquire_all({d, e}, {.ttl = 10s});
  EXPECT_EQ(both.lease(e).token(), first.token());
  EXPECT_EQ(sole_holder(b->inspect(e)).value_or(LockInfo{}).hold_count, 2u);
  EXPECT_EQ(sole_holder(b->inspect(d)).value_or(LockInfo{}).hold_count, 1u);
}

// release_set drops one hold per lease, as release() does: a re-entered key keeps its node with
// one hold less; a set with a node gone is answered with nothing, and nothing was dropped.
TEST_F(ZooKeeperSets, ReleaseSetKeepsHoldCountsAndDoesNothingWhenANodeWent) {
  auto b = open_backend();
  auto admin = open_backend();
  const std::string a = key("a"), c = key("c");
  const std::vector<AcquireRequest> set{request(a, "me"), request(c, "me")};
  auto leases = granted(b->acquire_set(set));
  ASSERT_EQ(leases.size(), 2u);
  const auto again = b->acquire(request(a, "me"));
  ASSERT_TRUE(std::holds_alternative<Acquired>(again));
  EXPECT_EQ(std::get<Acquired>(again).hold_count, 2u);
  const std::vector<LeaseRef> refs{{a, "me", leases[0].token}, {c, "me", leases[1].token}};
  const auto released = b->release_set(refs);
  ASSERT_TRUE(released);
  EXPECT_EQ(*released, (std::vector<std::optional<std::uint32_t>>{1u, 0u}));
  EXPECT_EQ(sole_holder(b->inspect(a)).value_or(LockInfo{}).hold_count, 1u);
  EXPECT_TRUE(b->inspect(c).empty());
  EXPECT_EQ(b->release(refs[0]), 0u);

  leases = granted(b->acquire_set(set));
  ASSERT_EQ(leases.size(), 2u);
  ASSERT_EQ(admin->force_release(a, Eviction::immediate, std::nullopt).size(), 1u);
  const std::vector<LeaseRef> taken{{a, "me", leases[0].token}, {c, "me", leases[1].token}};
  EXPECT_FALSE(b->release_set(taken));
  const auto kept = sole_holder(b->inspect(c));
  ASSERT_TRUE(kept) << "a refused release_set dropped a hold";
  EXPECT_EQ(kept->token, leases[1].token);
  EXPECT_EQ(b->release({c, "me", leases[1].token}), 0u);
}

}  // namespace
}  // namespace dlock
