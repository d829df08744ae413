// Lease mode's sets of keys (Backend::acquire_set and release_set, lease_sets.cpp) keep one
// key's rules, in what the conformance suite cannot see from outside: a refused set leaves
// every row as it was and keeps no doorbell; new keys start above the token floor; a set's
// release frees the plain last holds together and leaves a re-entered one to release().
//
// Needs DLOCK_MYSQL_URL (scripts/servers/mariadb.sh writes it); skips without it. Every case
// uses tables of its own.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backends/registry.hpp"
#include "core/stable_hash.hpp"
#include "core/url.hpp"
#include "dlock/backend.hpp"
#include "support/mysql_rows.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::with_option;

class MysqlSets : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = test::env("DLOCK_MYSQL_URL");
    if (!url) GTEST_SKIP() << "DLOCK_MYSQL_URL is not set: start a server with scripts/servers/mariadb.sh";
    url_ = *url;
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    table_ = "s_" + name.substr(0, 30) + "_" + std::to_string(::getpid()) + "_" + test::random_hex(8);
  }

  void TearDown() override {
    if (!table_.empty() && !url_.empty()) {
      test::drop_tables(url_, {table_, table_ + "_seq", table_ + "_activity", table_ + "_shared", table_ + "_claim"});
    }
  }

  std::shared_ptr<backend::Backend> open() const {
    return backends::open_backend(core::Url::parse(with_option(url_, "table=" + table_)));
  }

  // The key's row as text (owner, token, holds, expiry, doorbell, session), "(none)" without one.
  std::string row(const std::string& key) const {
    const auto rows = test::select_rows(url_, "SELECT CONCAT_WS(' ', owner, token, hold_count, expires_at, doorbell,"
                                              " session_id) FROM `" + table_ + "` WHERE name = '" + key + "'");
    return rows.size() == 1 && rows[0][0] ? *rows[0][0] : "(none)";
  }

  // Whether some session holds the key's doorbell (common.cpp, bell_name).
  bool bell_held(const std::string& key) const {
    char hex[17];
    const std::string scope = core::Url::parse(url_).path.substr(1) + "." + table_ + ":" + key;
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(core::stable_hash(scope)));
    const auto rows = test::select_rows(url_, std::string("SELECT IS_USED_LOCK('dlock:") + hex + "') IS NOT NULL");
    return rows.at(0).at(0) == std::optional<std::string>("1");
  }

  // Keys and owners are literals: a request keeps views of them.
  static backend::AcquireRequest request(std::string_view key, std::string_view owner) {
    return {key, owner, 10'000ms};
  }

  std::string url_;
  std::string table_;
};

TEST_F(MysqlSets, ARefusedSetChangesNoRowAndKeepsNoDoorbell) {
  auto store = open();
  const auto first = store->acquire(request("a", "me"));
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(first));
  ASSERT_EQ(store->release({"a", "me", std::get<backend::Acquired>(first).token}), 0u);
  const auto blocker = store->acquire(request("b", "other"));
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(blocker));
  const std::string a_before = row("a"), b_before = row("b");

  const std::vector<backend::AcquireRequest> set{request("a", "me"), request("b", "me"), request("c", "me")};
  const auto refused = store->acquire_set(set);
  ASSERT_TRUE(refused) << "lease mode takes a set in one transaction";
  const auto* busy = std::get_if<backend::SetBusy>(&*refused);
  ASSERT_NE(busy, nullptr);
  EXPECT_EQ(busy->index, 1u);
  EXPECT_EQ(row("a"), a_before) << "the refused set changed a row it took before the busy one";
  EXPECT_EQ(row("b"), b_before);
  EXPECT_EQ(row("c"), "(none)") << "the refused set left a new key's row";
  EXPECT_FALSE(bell_held("a")) << "the refused set kept a doorbell";
  EXPECT_FALSE(bell_held("c"));
  EXPECT_TRUE(bell_held("b")) << "the holder's doorbell went";

  ASSERT_EQ(store->release({"b", "other", std::get<backend::Acquired>(blocker).token}), 0u);
  const auto granted = store->acquire_set(set);
  ASSERT_TRUE(granted);
  const auto* taken = std::get_if<std::vector<backend::Acquired>>(&*granted);
  ASSERT_NE(taken, nullptr);
  ASSERT_EQ(taken->size(), 3u);
  EXPECT_EQ((*taken)[0].token, std::get<backend::Acquired>(first).token + 1);
  EXPECT_EQ((*taken)[1].token, std::get<backend::Acquired>(blocker).token + 1);
  EXPECT_EQ((*taken)[2].token, 1u);
  for (const auto* key : {"a", "b", "c"}) EXPECT_TRUE(bell_held(key)) << key << ": a holder keeps the doorbell";
  std::vector<backend::LeaseRef> leases;
  for (std::size_t i = 0; i < set.size(); ++i) leases.push_back({set[i].key, "me", (*taken)[i].token});
  const auto left = store->release_set(leases);
  ASSERT_TRUE(left);
  EXPECT_EQ(*left, (std::vector<std::optional<std::uint32_t>>{0u, 0u, 0u}));
  for (const auto* key : {"a", "b", "c"}) EXPECT_FALSE(bell_held(key)) << key << ": the release rang no doorbell";
}

// collect_idle deletes free rows and raises the floor: a set's new rows start above it, as one
// key's do.
TEST_F(MysqlSets, NewKeysOfASetStartAboveTheTokenFloor) {
  auto store = open();
  std::uint64_t token = 0;
  for (int i = 0; i < 3; ++i) {
    const auto taken = store->acquire(request("x", "me"));
    ASSERT_TRUE(std::holds_alternative<backend::Acquired>(taken));
    token = std::get<backend::Acquired>(taken).token;
    ASSERT_EQ(store->release({"x", "me", token}), 0u);
  }
  ASSERT_EQ(store->collect_idle(), 1u);
  const auto granted = store->acquire_set(std::vector{request("x", "me"), request("y", "me")});
  ASSERT_TRUE(granted);
  const auto* taken = std::get_if<std::vector<backend::Acquired>>(&*granted);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ((*taken)[0].token, token + 1);
  EXPECT_EQ((*taken)[1].token, token + 1);
}

// A lease with more than its last hold is left to release(), which drops one hold; the others
// go together.
TEST_F(MysqlSets, ASetReleaseLeavesAReenteredLeaseToRelease) {
  auto store = open();
  const auto granted = store->acquire_set(std::vector{request("a", "me"), request("b", "me")});
  ASSERT_TRUE(granted);
  const auto* taken = std::get_if<std::vector<backend::Acquired>>(&*granted);
  ASSERT_NE(taken, nullptr);
  const auto again = store->acquire(request("a", "me"));
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(again));
  EXPECT_EQ(std::get<backend::Acquired>(again).hold_count, 2u);
  const std::vector<backend::LeaseRef> leases{{"a", "me", (*taken)[0].token}, {"b", "me", (*taken)[1].token}};
  const auto left = store->release_set(leases);
  ASSERT_TRUE(left);
  EXPECT_EQ(*left, (std::vector<std::optional<std::uint32_t>>{1u, 0u}));
  EXPECT_TRUE(bell_held("a"));
  EXPECT_FALSE(bell_held("b"));
  EXPECT_EQ(store->release(leases[0]), 0u);
}

}  // namespace
}  // namespace dlock
