// sqlite://'s sets of keys in one request (Backend::acquire_set, release_set): what its
// statements must keep of one key's rules, seen through the Backend interface and the file.

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "backends/sqlite/sqlite_backend.hpp"
#include "backends/sqlite/sqlite_test_support.hpp"
#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using backend::Acquired;
using backend::AcquireRequest;
using backend::LeaseRef;
using backends::sqlite::test::Raw;
using backends::sqlite::test::TempDir;

class SqliteSets : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    backend_ = backends::make_sqlite_backend(core::Url::parse("sqlite://" + db_));
  }

  // Every row of the lock table, as text.
  std::string rows() {
    Raw raw(db_);
    return raw.scalar(
        "SELECT group_concat(name || '|' || owner || '|' || token || '|' || hold_count || '|' || expires_at || '|' || "
        "acquired_at, ';') FROM (SELECT * FROM dlock_locks ORDER BY name)");
  }

  std::vector<Acquired> must_take(const std::vector<std::string>& keys, const std::string& owner,
                                  std::chrono::milliseconds ttl = 10s) {
    std::vector<AcquireRequest> set;
    for (const auto& key : keys) set.push_back({key, owner, ttl});
    const auto result = backend_->acquire_set(set);
    if (!result) {
      ADD_FAILURE() << "sqlite:// took a set one key at a time";
      return {};
    }
    if (const auto* busy = std::get_if<backend::SetBusy>(&*result)) {
      ADD_FAILURE() << keys[busy->index] << " is busy";
      return {};
    }
    return std::get<std::vector<Acquired>>(*result);
  }

  std::vector<std::optional<std::uint32_t>> release(const std::vector<std::string>& keys, const std::string& owner,
                                                    const std::vector<Acquired>& taken) {
    std::vector<LeaseRef> leases;
    for (std::size_t i = 0; i < keys.size(); ++i) leases.push_back({keys[i], owner, taken.at(i).token});
    const auto left = backend_->release_set(leases);
    if (!left) {
      ADD_FAILURE() << "sqlite:// released a set one key at a time";
      return {};
    }
    return *left;
  }

  std::shared_ptr<backend::Backend> backend_;
};

TEST_F(SqliteSets, ASetWithOneBusyKeyChangesNoRow) {
  const auto free_row = must_take({"a"}, "me");
  ASSERT_EQ(release({"a"}, "me", free_row), (std::vector<std::optional<std::uint32_t>>{0u}));
  const auto held = std::get<Acquired>(backend_->acquire({"b", "other", 10s}));
  const auto mine = std::get<Acquired>(backend_->acquire({"d", "me", 10s}));
  const std::string before = rows();

  const std::vector<AcquireRequest> set{{"a", "me", 10s}, {"b", "me", 10s}, {"c", "me", 10s}, {"d", "me", 10s}};
  const auto result = backend_->acquire_set(set);
  ASSERT_TRUE(result);
  const auto* busy = std::get_if<backend::SetBusy>(&*result);
  ASSERT_NE(busy, nullptr) << "a set with a busy key was granted";
  EXPECT_EQ(busy->index, 1u);
  ASSERT_EQ(busy->busy.holders.size(), 1u);
  EXPECT_EQ(busy->busy.holders[0].owner, "other");
  EXPECT_EQ(busy->busy.holders[0].token, held.token);
  EXPECT_GT(busy->busy.retry_within, 0ms);
  EXPECT_EQ(rows(), before) << "not the free row, the new key, nor the re-entered key";
  EXPECT_EQ(backend_->release({"d", "me", mine.token}), 0u) << "the set re-entered d";
}

TEST_F(SqliteSets, TokensRisePerKeyAlsoPastADeletedRowsFloor) {
  const std::vector<std::string> keys{"a", "b"};
  auto first = must_take(keys, "me");
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(release(keys, "me", first), (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  auto second = must_take(keys, "you");
  ASSERT_EQ(second.size(), 2u);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_GT(second[i].token, first[i].token) << keys[i];
    EXPECT_EQ(second[i].hold_count, 1u);
  }
  // A key whose row was raised far above the others, then removed: its token is the floor
  // for every key's next row.
  const auto high = std::get<Acquired>(backend_->acquire({"high", "me", 10s}));
  Raw(db_).exec("UPDATE dlock_locks SET token = token + 1000 WHERE name = 'high'");
  ASSERT_EQ(backend_->release({"high", "me", high.token + 1000}), 0u);
  ASSERT_EQ(release(keys, "you", second), (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  ASSERT_EQ(backend_->collect_idle(), 3u);
  const auto third = must_take(keys, "me");
  ASSERT_EQ(third.size(), 2u);
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_GT(third[i].token, high.token + 1000) << keys[i];
}

TEST_F(SqliteSets, TheOwnerReentersWithinASet) {
  const auto a = std::get<Acquired>(backend_->acquire({"a", "me", 10s}));
  const auto set = must_take({"a", "b"}, "me");
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set[0].token, a.token);
  EXPECT_EQ(set[0].hold_count, 2u);
  EXPECT_EQ(set[1].hold_count, 1u);
  EXPECT_EQ(release({"a", "b"}, "me", set), (std::vector<std::optional<std::uint32_t>>{1u, 0u}));
  EXPECT_EQ(backend_->release({"a", "me", a.token}), 0u);
}

TEST_F(SqliteSets, ASetTakesOverAnExpiredHolder) {
  const auto expired = std::get<Acquired>(backend_->acquire({"b", "other", 50ms}));
  std::this_thread::sleep_for(80ms);
  const auto set = must_take({"a", "b"}, "me");
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set[1].token, expired.token + 1);
  EXPECT_EQ(set[1].hold_count, 1u);
  EXPECT_FALSE(backend_->renew({"b", "other", expired.token}, 10s)) << "an expired lease came back";
  EXPECT_EQ(backend_->inspect("b").at(0).owner, "me");
}

TEST_F(SqliteSets, ReleasingASetWithAnEvictedLeaseEndsItAsReleaseDoes) {
  const auto set = must_take({"a", "b"}, "me");
  ASSERT_EQ(set.size(), 2u);
  ASSERT_EQ(backend_->force_release("b", Eviction::delayed, std::nullopt).size(), 1u);
  EXPECT_EQ(release({"a", "b"}, "me", set), (std::vector<std::optional<std::uint32_t>>{0u, std::nullopt}));
  EXPECT_TRUE(backend_->inspect("a").empty());
  EXPECT_TRUE(backend_->inspect("b").empty()) << "the evicted holder's release frees its key";
}

TEST_F(SqliteSets, KeysAreSentAsTheyAre) {
  const std::vector<std::string> keys{"back\\slash", "quote\"d", "\xc3\xbcml\xc3\xa4ut/\xe2\x82\xac"};
  const auto set = must_take(keys, "me");
  ASSERT_EQ(set.size(), keys.size());
  for (const auto& key : keys) {
    const auto holders = backend_->inspect(key);
    ASSERT_EQ(holders.size(), 1u) << key;
    EXPECT_EQ(holders[0].key, key);
  }
  EXPECT_EQ(release(keys, "me", set), (std::vector<std::optional<std::uint32_t>>(keys.size(), 0u)));
}

TEST_F(SqliteSets, SeveralOwnersGoOneByOne) {
  const std::vector<AcquireRequest> set{{"a", "me", 10s}, {"b", "you", 10s}};
  EXPECT_FALSE(backend_->acquire_set(set));
  const auto a = std::get<Acquired>(backend_->acquire(set[0]));
  const auto b = std::get<Acquired>(backend_->acquire(set[1]));
  const std::vector<LeaseRef> leases{{"a", "me", a.token}, {"b", "you", b.token}};
  EXPECT_EQ(backend_->release_set(leases), (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  EXPECT_TRUE(backend_->inspect("a").empty());
  EXPECT_TRUE(backend_->inspect("b").empty());
}

}  // namespace
}  // namespace dlock
