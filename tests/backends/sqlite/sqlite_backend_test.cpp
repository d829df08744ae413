// Tests of the sqlite:// backend through the Backend interface, and of its futex wake board.
// Multi-process cases re-run this binary (fork + exec) as SqliteChild.DISABLED_Run, so no
// child ever uses a SQLite connection inherited across fork.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "backends/sqlite/sqlite_backend.hpp"
#include "backends/sqlite/wake_board.hpp"
#include "core/url.hpp"
#include "dlock/errors.hpp"
#include "backends/sqlite/sqlite_test_support.hpp"
#include "support/holders.hpp"

extern char** environ;

namespace dlock {
namespace {

using namespace std::chrono_literals;
using backend::Acquired;
using backend::Backend;
using backend::Busy;
using backends::sqlite::EvictionWatch;
using backends::sqlite::test::Raw;
using backends::sqlite::test::TempDir;
using backends::sqlite::WakeBoard;
using test::sole_holder;
using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::shared_ptr<Backend> open_url(const std::string& url) {
  return backends::make_sqlite_backend(core::Url::parse(url));
}

std::shared_ptr<Backend> open_db(const std::string& path, const std::string& query = "") {
  return open_url("sqlite://" + path + query);
}

backend::AcquireResult acquire(Backend& b, std::string_view key, std::string_view owner,
                               std::chrono::milliseconds ttl = 10s) {
  return b.acquire({key, owner, ttl});
}

backend::AcquireRequest shared_request(std::string_view key, std::string_view owner, bool waiting) {
  return {key, owner, 10s, LockMode::shared, 0, waiting};
}

Acquired must_acquire(Backend& b, std::string_view key, std::string_view owner, std::chrono::milliseconds ttl = 10s) {
  auto result = acquire(b, key, owner, ttl);
  if (auto* busy = std::get_if<Busy>(&result)) {
    ADD_FAILURE() << key << " is held by " << (busy->holders.empty() ? "nobody" : busy->holders[0].owner);
    return {};
  }
  return std::get<Acquired>(result);
}

// A holder report of `owner`'s acquisition `token` of `key`, re-entered once, on a 10 s lease.
void expect_held_twice(const std::optional<LockInfo>& holder, std::string_view key, std::string_view owner,
                       std::uint64_t token) {
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->key, key);
  EXPECT_EQ(holder->owner, owner);
  EXPECT_EQ(holder->token, token);
  EXPECT_EQ(holder->hold_count, 2u);
  EXPECT_GT(holder->ttl_left, 9s);
  EXPECT_LE(holder->ttl_left, 10s);
}

// Acquires like the core does: through a waiter, sleeping at most until the holder's lease
// runs out.
Acquired acquire_waiting(Backend& b, std::string_view key, std::string_view owner, std::chrono::milliseconds ttl) {
  auto waiter = b.waiter({key, owner, ttl});
  for (;;) {
    auto result = waiter->attempt();
    if (auto* acquired = std::get_if<Acquired>(&result)) return *acquired;
    waiter->wait_until(SteadyClock::now() + std::get<Busy>(result).retry_within + 1ms);
  }
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Collects the keys a backend's eviction watch reports (Backend::watch). Declare it before
// the backend: the events may come until the backend is gone.
class Notices {
 public:
  std::shared_ptr<backend::Events> events() { return std::make_shared<Sink>(*this); }
  // The keys reported, once there are `n` of them (or after 10 s).
  std::vector<std::string> await(std::size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 10s, [&] { return keys_.size() >= n; });
    return keys_;
  }

 private:
  class Sink final : public backend::Events {
   public:
    explicit Sink(Notices& notices) : notices_(notices) {}
    void evicted(std::string_view key) override {
      std::lock_guard lock(notices_.mutex_);
      notices_.keys_.emplace_back(key);
      notices_.changed_.notify_all();
    }
    void lost(const backend::LeaseRef&, std::string_view) override {}
    void all_lost(std::string_view) override {}

   private:
    Notices& notices_;
  };

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> keys_;
};

// ---- The backend in one process ----

class SqliteBackend : public TempDir {};

TEST_F(SqliteBackend, CreatesSchemaOnFirstUse) {
  auto backend = open_db(db_);
  EXPECT_EQ(backend->name(), "sqlite");
  EXPECT_EQ(backend->max_key_bytes(), kMaxKeyBytes);
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema "
                       "WHERE name NOT LIKE 'sqlite_%' ORDER BY name)"),
            "dlock_evictions dlock_evictions_kept dlock_locks dlock_meta dlock_modes dlock_seq dlock_seq_after_delete "
            "dlock_shared");
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'schema_version'"), "3");
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'boot_id'"), boot_id());
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_seq WHERE id = 0"), "0");
  EXPECT_EQ(raw.scalar("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(fs::file_size(db_ + "-wake"), WakeBoard::kBytes);
  // Opening again changes nothing.
  open_db(db_)->ping();
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM dlock_meta"), "2");
}

TEST_F(SqliteBackend, RelativePathCreatesPrivateParentDirectories) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  std::shared_ptr<Backend> backend;
  EXPECT_NO_THROW(backend = open_url("sqlite://nested/deeper/locks.db"));
  fs::current_path(previous);
  ASSERT_TRUE(backend);
  must_acquire(*backend, "k", "a");  // still the same file after the working directory moved
  EXPECT_TRUE(fs::exists(dir_ + "/nested/deeper/locks.db"));
  EXPECT_EQ(fs::status(dir_ + "/nested").permissions(), fs::perms::owner_all);
  EXPECT_EQ(fs::status(dir_ + "/nested/deeper").permissions(), fs::perms::owner_all);
  Raw raw(dir_ + "/nested/deeper/locks.db");
  EXPECT_EQ(raw.scalar("SELECT owner FROM dlock_locks WHERE name = 'k'"), "a");
}

TEST_F(SqliteBackend, AcquireReentryHeldAndRelease) {
  auto backend = open_db(db_);
  const Acquired first = must_acquire(*backend, "job", "a");
  EXPECT_GT(first.token, 0u);
  EXPECT_EQ(first.hold_count, 1u);

  const Acquired again = must_acquire(*backend, "job", "a");
  EXPECT_EQ(again.token, first.token);
  EXPECT_EQ(again.hold_count, 2u);

  auto other = acquire(*backend, "job", "b", 5s);
  ASSERT_TRUE(std::holds_alternative<Busy>(other));
  expect_held_twice(sole_holder(std::get<Busy>(other).holders), "job", "a", first.token);

  EXPECT_EQ(backend->release({"job", "b", first.token}), std::nullopt);      // not the owner
  EXPECT_EQ(backend->release({"job", "a", first.token + 1}), std::nullopt);  // not this acquisition
  EXPECT_EQ(backend->release({"job", "a", first.token}), 1u);
  EXPECT_EQ(backend->release({"job", "a", first.token}), 0u);
  EXPECT_EQ(backend->release({"job", "a", first.token}), std::nullopt);
  EXPECT_TRUE(backend->inspect("job").empty());

  const Acquired next = must_acquire(*backend, "job", "b");
  EXPECT_GT(next.token, first.token);
  EXPECT_EQ(next.hold_count, 1u);
}

TEST_F(SqliteBackend, RenewOnlyExtendsTheOwnLiveLease) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "a", 300ms);
  EXPECT_FALSE(backend->renew({"k", "b", lease.token}, 10s));
  EXPECT_FALSE(backend->renew({"k", "a", lease.token + 1}, 10s));
  EXPECT_FALSE(backend->renew({"other", "a", lease.token}, 10s));
  EXPECT_TRUE(backend->renew({"k", "a", lease.token}, 10s));
  std::this_thread::sleep_for(400ms);  // past the first TTL: the renewal holds it
  const auto info = sole_holder(backend->inspect("k"));
  ASSERT_TRUE(info);
  EXPECT_GT(info->ttl_left, 9s);
  // Renewing can also shorten the lease: the TTL counts from now.
  EXPECT_TRUE(backend->renew({"k", "a", lease.token}, 1s));
  EXPECT_LE(sole_holder(backend->inspect("k"))->ttl_left, 1s);
}

TEST_F(SqliteBackend, ExpiredLeaseIsTakenOverAndNeverResurrected) {
  auto backend = open_db(db_);
  const Acquired old = must_acquire(*backend, "k", "a", 100ms);
  ASSERT_TRUE(std::holds_alternative<Busy>(acquire(*backend, "k", "b")));
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(backend->inspect("k").empty());
  EXPECT_FALSE(backend->renew({"k", "a", old.token}, 10s));
  EXPECT_EQ(backend->release({"k", "a", old.token}), std::nullopt);
  // The same owner after expiry starts a new acquisition, not a re-entry.
  const Acquired again = must_acquire(*backend, "k", "a", 100ms);
  EXPECT_GT(again.token, old.token);
  EXPECT_EQ(again.hold_count, 1u);
  std::this_thread::sleep_for(150ms);
  const Acquired taken = must_acquire(*backend, "k", "b");
  EXPECT_GT(taken.token, again.token);
  EXPECT_EQ(taken.hold_count, 1u);
}

TEST_F(SqliteBackend, TokensStrictlyIncreaseAcrossReleaseExpiryForceReleaseCollectAndReopen) {
  auto backend = open_db(db_);
  std::vector<std::uint64_t> tokens;
  tokens.push_back(must_acquire(*backend, "k", "a").token);
  ASSERT_EQ(backend->release({"k", "a", tokens.back()}), 0u);
  tokens.push_back(must_acquire(*backend, "k", "b").token);
  ASSERT_FALSE(backend->force_release("k", Eviction::immediate, std::nullopt).empty());
  tokens.push_back(must_acquire(*backend, "k", "c", 50ms).token);
  std::this_thread::sleep_for(80ms);
  tokens.push_back(must_acquire(*backend, "k", "d").token);
  ASSERT_EQ(backend->release({"k", "d", tokens.back()}), 0u);
  ASSERT_EQ(backend->collect_idle(), 1u);
  tokens.push_back(must_acquire(*backend, "k", "e").token);
  ASSERT_EQ(backend->release({"k", "e", tokens.back()}), 0u);
  ASSERT_EQ(backend->collect_idle(), 1u);
  backend.reset();
  backend = open_db(db_);
  tokens.push_back(must_acquire(*backend, "k", "f").token);
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << "acquisition " << i;
}

// The tables of every schema version, with a live lease of token 40 and a token floor of 41.
constexpr const char* kEarlierTables = R"sql(
CREATE TABLE dlock_meta(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
CREATE TABLE dlock_locks(name TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL,
  hold_count INTEGER NOT NULL, expires_at INTEGER NOT NULL, acquired_at INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE dlock_seq(id INTEGER PRIMARY KEY CHECK (id = 0), v INTEGER NOT NULL);
INSERT INTO dlock_seq VALUES (0, 41);
INSERT INTO dlock_locks VALUES ('held', 'old-owner', 40, 1, 9223372036854775807, 0);
)sql";

// The rest of what dlock 0.1 created: dlock_seq raised by triggers on every insert and update.
constexpr const char* kVersion1Rest = R"sql(
CREATE TRIGGER dlock_seq_after_insert AFTER INSERT ON dlock_locks
BEGIN UPDATE dlock_seq SET v = max(v, NEW.token) WHERE id = 0; END;
CREATE TRIGGER dlock_seq_after_update AFTER UPDATE OF token ON dlock_locks
WHEN NEW.token > OLD.token BEGIN UPDATE dlock_seq SET v = max(v, NEW.token) WHERE id = 0; END;
INSERT INTO dlock_meta VALUES ('schema_version', 1);
INSERT INTO dlock_locks VALUES ('free', '', 41, 0, 0, 0);
)sql";

// The rest of what the builds before lock delays created (version 2, without dlock_evictions).
constexpr const char* kVersion2Rest = R"sql(
CREATE TRIGGER dlock_seq_after_delete AFTER DELETE ON dlock_locks
BEGIN UPDATE dlock_seq SET v = max(v, OLD.token) WHERE id = 0; END;
INSERT INTO dlock_meta VALUES ('schema_version', 2);
)sql";

// Writes a lock file as an earlier build left it in this boot.
void write_earlier_file(const std::string& path, const std::string& rest) {
  Raw raw(path);
  ASSERT_EQ(raw.exec("PRAGMA journal_mode = WAL"), SQLITE_OK);
  ASSERT_EQ(raw.exec(kEarlierTables + rest), SQLITE_OK);
  ASSERT_EQ(raw.exec("INSERT INTO dlock_meta VALUES ('boot_id', '" + boot_id() + "')"), SQLITE_OK);
}

TEST_F(SqliteBackend, VersionOneFileIsUpgradedKeepingLeasesAndTokens) {
  write_earlier_file(db_, kVersion1Rest);
  auto backend = open_db(db_);
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'schema_version'"), "3");
  EXPECT_EQ(raw.scalar("SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema "
                       "WHERE type = 'trigger' ORDER BY name)"),
            "dlock_evictions_kept dlock_seq_after_delete");
  const auto held = sole_holder(backend->inspect("held"));  // the upgrade took no lease away
  ASSERT_TRUE(held);
  EXPECT_EQ(held->owner, "old-owner");
  EXPECT_EQ(held->token, 40u);
  EXPECT_GT(must_acquire(*backend, "free", "a").token, 41u);
  EXPECT_GT(must_acquire(*backend, "new-key", "a").token, 41u);
}

// A file of version 2 gains the evictions table on its first force-release, even under a
// client that opened it before the table existed.
TEST_F(SqliteBackend, VersionTwoFileTakesLockDelaysAndEvictionNotices) {
  write_earlier_file(db_, kVersion2Rest);
  Notices notices;
  auto watched = open_db(db_);
  ASSERT_TRUE(watched->watch(notices.events()));
  EXPECT_FALSE(watched->inspect("held").empty());
  auto admin = open_db(db_);
  const auto released = sole_holder(admin->force_release("held", Eviction::delayed, std::nullopt));
  ASSERT_TRUE(released);
  EXPECT_EQ(released->owner, "old-owner");
  EXPECT_EQ(released->token, 40u);
  EXPECT_EQ(notices.await(1), std::vector<std::string>{"held"});
  const auto evicted = sole_holder(watched->inspect("held"));
  ASSERT_TRUE(evicted);
  EXPECT_TRUE(evicted->evicted);
  EXPECT_EQ(watched->release({"held", "old-owner", 40}), std::nullopt);
  EXPECT_GT(must_acquire(*watched, "held", "a").token, 40u);
}

// Version 3 adds the readers' claim to the key's row: a file of version 2 gains the column,
// keeping its leases, and its keys take the claim.
TEST_F(SqliteBackend, VersionTwoFileIsUpgradedToTakeReadersClaims) {
  write_earlier_file(db_, kVersion2Rest);
  auto backend = open_db(db_);
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'schema_version'"), "3");
  EXPECT_EQ(raw.scalar("SELECT readers_until FROM dlock_locks WHERE name = 'held'"), "0");
  const auto held = sole_holder(backend->inspect("held"));
  ASSERT_TRUE(held);
  EXPECT_EQ(held->token, 40u);
  EXPECT_TRUE(std::holds_alternative<Busy>(backend->acquire(shared_request("held", "r", /*waiting=*/true))));
  ASSERT_EQ(backend->release({"held", "old-owner", 40}), 0u);
  EXPECT_TRUE(std::holds_alternative<Busy>(acquire(*backend, "held", "w")));
  open_db(db_)->ping();  // opening it again changes nothing
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'schema_version'"), "3");
}

TEST_F(SqliteBackend, FileOfALaterSchemaVersionIsRefusedUntouched) {
  {
    Raw raw(db_);
    ASSERT_EQ(raw.exec("CREATE TABLE dlock_meta(k TEXT PRIMARY KEY, v) WITHOUT ROWID;"
                       "INSERT INTO dlock_meta VALUES ('schema_version', 99)"),
              SQLITE_OK);
  }
  try {
    open_db(db_);
    ADD_FAILURE() << "a version 99 file was accepted";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use a newer dlock"), std::string::npos) << e.what();
  }
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM sqlite_schema"), "1");
}

TEST_F(SqliteBackend, ForceReleaseReportsTheEvictedHolderAndFreesTheKey) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "a");
  must_acquire(*backend, "k", "a");
  expect_held_twice(sole_holder(backend->force_release("k", Eviction::immediate, std::nullopt)), "k", "a",
                    lease.token);
  EXPECT_TRUE(backend->force_release("k", Eviction::immediate, std::nullopt).empty());
  EXPECT_TRUE(backend->force_release("never-held", Eviction::immediate, std::nullopt).empty());
  // The evicted holder learns at its next renew or release.
  EXPECT_FALSE(backend->renew({"k", "a", lease.token}, 10s));
  EXPECT_EQ(backend->release({"k", "a", lease.token}), std::nullopt);
  EXPECT_GT(must_acquire(*backend, "k", "b").token, lease.token);
  // An expired lease is nothing to force-release.
  must_acquire(*backend, "short", "a", 30ms);
  std::this_thread::sleep_for(60ms);
  EXPECT_TRUE(backend->force_release("short", Eviction::immediate, std::nullopt).empty());
}

TEST_F(SqliteBackend, InspectAndListShowOnlyLiveLocksInKeyOrder) {
  auto backend = open_db(db_);
  for (const char* key : {"zz", "app/c", "ap", "app/a", "apq", "app/\xc3\xa9", "app/b"}) must_acquire(*backend, key, "o");
  const Acquired released = must_acquire(*backend, "app/d", "o");
  ASSERT_EQ(backend->release({"app/d", "o", released.token}), 0u);
  must_acquire(*backend, "app/e", "o", 30ms);
  must_acquire(*backend, "app/a", "o");  // a re-entry shows its hold count
  std::this_thread::sleep_for(60ms);

  const auto info = sole_holder(backend->inspect("app/a"));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, "o");
  EXPECT_EQ(info->hold_count, 2u);
  EXPECT_TRUE(backend->inspect("app/d").empty());
  EXPECT_TRUE(backend->inspect("app/e").empty());
  EXPECT_TRUE(backend->inspect("missing").empty());

  const auto keys = [](const ListPage& page) {
    std::vector<std::string> out;
    for (const auto& lock : page.locks) out.push_back(lock.key);
    return out;
  };
  const ListPage all = backend->list("", "", 100);
  EXPECT_EQ(keys(all), (std::vector<std::string>{"ap", "app/a", "app/b", "app/c", "app/\xc3\xa9", "apq", "zz"}));
  EXPECT_EQ(all.next_after, "");
  EXPECT_EQ(all.locks[1].hold_count, 2u);
  EXPECT_GT(all.locks[1].ttl_left, 9s);

  const ListPage first = backend->list("app/", "", 2);
  EXPECT_EQ(keys(first), (std::vector<std::string>{"app/a", "app/b"}));
  EXPECT_EQ(first.next_after, "app/b");
  const ListPage second = backend->list("app/", first.next_after, 2);
  EXPECT_EQ(keys(second), (std::vector<std::string>{"app/c", "app/\xc3\xa9"}));
  EXPECT_EQ(second.next_after, "");  // nothing follows: no empty last page

  EXPECT_EQ(keys(backend->list("app/", "a", 10)).size(), 4u);  // `after` before the prefix
  EXPECT_TRUE(backend->list("app/", "zzz", 10).locks.empty());
  EXPECT_EQ(keys(backend->list("app/\xc3", "", 10)), (std::vector<std::string>{"app/\xc3\xa9"}));  // bytewise
  EXPECT_EQ(keys(backend->list("ap", "app/\xc3\xa9", 10)), (std::vector<std::string>{"apq"}));
  EXPECT_EQ(keys(backend->list("zz", "", 10)), (std::vector<std::string>{"zz"}));
  EXPECT_TRUE(backend->list("zzz", "", 10).locks.empty());
}

TEST_F(SqliteBackend, CollectIdleRemovesOnlyFreeKeys) {
  auto backend = open_db(db_);
  must_acquire(*backend, "live", "a");
  const Acquired released = must_acquire(*backend, "released", "a");
  ASSERT_EQ(backend->release({"released", "a", released.token}), 0u);
  must_acquire(*backend, "expired", "a", 30ms);
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(backend->collect_idle(), 2u);
  EXPECT_EQ(backend->collect_idle(), 0u);
  EXPECT_FALSE(backend->inspect("live").empty());
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT group_concat(name) FROM dlock_locks"), "live");
}

// ---- The readers' claim (include/dlock/backend.hpp, "Nor are readers") ----

// The claim of readers that waited for `writer`'s hold of `key`: placed by a waiting reader's
// attempt, and standing once the writer lets go.
void place_readers_claim(Backend& b, std::string_view key, std::string_view writer, std::uint64_t token) {
  const auto refused = b.acquire(shared_request(key, "reader", /*waiting=*/true));
  ASSERT_TRUE(std::holds_alternative<Busy>(refused));
  const auto holder = sole_holder(std::get<Busy>(refused).holders);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->owner, writer);
  EXPECT_LE(std::get<Busy>(refused).retry_within, backend::kWriterClaim / 2);
  ASSERT_EQ(b.release({key, writer, token}), 0u);
}

// Busy with no holder, as a key that only a readers' claim keeps answers.
void expect_claimed(const backend::AcquireResult& result) {
  const auto* busy = std::get_if<Busy>(&result);
  ASSERT_TRUE(busy) << "a writer took a key that readers claimed";
  EXPECT_TRUE(busy->holders.empty()) << busy->holders.front().owner;
  EXPECT_GT(busy->retry_within, 0ms);
  EXPECT_LE(busy->retry_within, backend::kWriterClaim);
}

TEST_F(SqliteBackend, AWaitingReaderClaimsTheKeyFromWritersUntilTheNextGrant) {
  auto backend = open_db(db_);
  const Acquired writer = must_acquire(*backend, "k", "w");
  // A try-once reader claims nothing.
  EXPECT_TRUE(std::holds_alternative<Busy>(backend->acquire(shared_request("k", "r", /*waiting=*/false))));
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT readers_until FROM dlock_locks WHERE name = 'k'"), "0");
  place_readers_claim(*backend, "k", "w", writer.token);
  EXPECT_TRUE(backend->inspect("k").empty()) << "the claim is no holder";
  expect_claimed(acquire(*backend, "k", "w"));
  // A waiting writer so refused places its own claim; the readers who waited pass it.
  expect_claimed(backend->acquire({"k", "w", 10s, LockMode::exclusive, 0, /*waiting=*/true}));
  auto passing = shared_request("k", "reader", /*waiting=*/true);
  passing.waited_behind = writer.token;
  const auto reader = backend->acquire(passing);
  ASSERT_TRUE(std::holds_alternative<Acquired>(reader));
  EXPECT_GT(std::get<Acquired>(reader).token, writer.token);
  // That grant ended the claim: once the reader leaves, the writer enters.
  ASSERT_EQ(backend->release({"k", "reader", std::get<Acquired>(reader).token}), 0u);
  EXPECT_GT(must_acquire(*backend, "k", "w").token, std::get<Acquired>(reader).token);
}

TEST_F(SqliteBackend, AReadersClaimRunsOutAndKeepsItsRowFromCollection) {
  auto backend = open_db(db_);
  place_readers_claim(*backend, "k", "w", must_acquire(*backend, "k", "w").token);
  EXPECT_EQ(backend->collect_idle(), 0u);
  const auto until = SteadyClock::now() + backend::kWriterClaim;
  expect_claimed(acquire(*backend, "k", "w"));
  std::this_thread::sleep_until(until + 50ms);
  must_acquire(*backend, "k", "w");
}

TEST_F(SqliteBackend, ASetDoesNotTakeAKeyThatReadersClaim) {
  auto backend = open_db(db_);
  place_readers_claim(*backend, "b", "w", must_acquire(*backend, "b", "w").token);
  const std::vector<backend::AcquireRequest> set = {{"a", "w", 10s}, {"b", "w", 10s}, {"c", "w", 10s}};
  const auto result = backend->acquire_set(set);
  ASSERT_TRUE(result);
  const auto* busy = std::get_if<backend::SetBusy>(&*result);
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->index, 1u);
  expect_claimed(busy->busy);
  EXPECT_TRUE(backend->inspect("a").empty()) << "the refused set kept a key";
}

TEST_F(SqliteBackend, AReadersClaimEndsWithItsBoot) {
  auto backend = open_db(db_);
  place_readers_claim(*backend, "k", "w", must_acquire(*backend, "k", "w").token);
  {
    Raw raw(db_);
    ASSERT_EQ(raw.exec("UPDATE dlock_meta SET v = 'an-earlier-boot' WHERE k = 'boot_id'"), SQLITE_OK);
  }
  must_acquire(*open_db(db_), "k", "w");
}

TEST_F(SqliteBackend, ReopeningTheFileKeepsLeases) {
  std::uint64_t token = 0;
  {
    auto backend = open_db(db_);
    token = must_acquire(*backend, "k", "a").token;
  }
  auto backend = open_db(db_);
  const auto info = sole_holder(backend->inspect("k"));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, "a");
  EXPECT_EQ(info->token, token);
  EXPECT_EQ(backend->release({"k", "a", token}), 0u);
}

TEST_F(SqliteBackend, BootIdChangeExpiresEveryLease) {
  auto before = open_db(db_);
  const Acquired lease = must_acquire(*before, "k", "a", 1h);
  must_acquire(*before, "k2", "a", 1h);
  {
    Raw raw(db_);
    ASSERT_EQ(raw.exec("UPDATE dlock_meta SET v = 'an-earlier-boot' WHERE k = 'boot_id'"), SQLITE_OK);
  }
  auto after = open_db(db_);  // as the first process after a reboot would
  EXPECT_TRUE(after->inspect("k").empty());
  EXPECT_TRUE(after->list("", "", 10).locks.empty());
  EXPECT_FALSE(after->renew({"k", "a", lease.token}, 1h));
  EXPECT_EQ(after->release({"k", "a", lease.token}), std::nullopt);
  // Tokens a power loss may have dropped with the last commits are never handed out again.
  EXPECT_GT(must_acquire(*after, "k", "b").token, lease.token + 4294967295u);
  Raw raw(db_);
  EXPECT_EQ(raw.scalar("SELECT v FROM dlock_meta WHERE k = 'boot_id'"), boot_id());
}

void expect_configuration_error(const std::string& url, const std::vector<std::string>& fragments) {
  try {
    open_url(url);
    ADD_FAILURE() << url << " was accepted";
  } catch (const ConfigurationError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::configuration);
    for (const auto& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << "\nlacks: " << fragment;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << url << " threw something else: " << e.what();
  }
}

TEST_F(SqliteBackend, BadUrlsAreConfigurationErrors) {
  expect_configuration_error("sqlite://", {"needs a database file path"});
  expect_configuration_error("sqlite://" + db_ + "?bogus=1", {"'bogus'", "busy_timeout"});
  expect_configuration_error("sqlite://" + db_ + "?busy_timeout=soon", {"busy_timeout"});
  expect_configuration_error("sqlite://" + db_ + "?busy_timeout=25h", {"busy_timeout", "24h"});
  expect_configuration_error("sqlite://" + dir_ + "/", {"does not name a file"});
  expect_configuration_error("sqlite://me@host/x.db", {"file path only"});
  EXPECT_NO_THROW(open_db(db_, "?busy_timeout=250ms"));
}

TEST_F(SqliteBackend, UnusablePathsAreConfigurationErrorsNamingTheFix) {
  const std::string fix = "choose a writable directory: sqlite:///path/to/locks.db";
  expect_configuration_error("sqlite:///proc/dlock-no-such-dir/locks.db", {"/proc/dlock-no-such-dir", fix});
  std::ofstream(dir_ + "/plain-file") << "x";
  expect_configuration_error("sqlite://" + dir_ + "/plain-file/locks.db", {dir_ + "/plain-file", "Not a directory", fix});
  fs::create_directory(dir_ + "/a-directory");
  expect_configuration_error("sqlite://" + dir_ + "/a-directory", {dir_ + "/a-directory", fix});
  std::ofstream(dir_ + "/garbage.db") << std::string(4096, 'g');
  expect_configuration_error("sqlite://" + dir_ + "/garbage.db", {dir_ + "/garbage.db", "not a SQLite database"});
}

// Root may write anywhere, so the permission cases run in a child that drops to nobody. The
// child only opens files the parent never opened, so no SQLite state crosses the fork.
TEST_F(SqliteBackend, PermissionDeniedIsAConfigurationError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to an unprivileged user";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  open_db(db_)->ping();  // a database nobody may write
  fs::create_directory(dir_ + "/closed");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int status = 0;
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    for (const std::string& path : {dir_ + "/closed/sub/locks.db", dir_ + "/closed/locks.db", db_}) {
      try {
        open_db(path);
        status = status * 4 + 1;
      } catch (const ConfigurationError& e) {
        const std::string what = e.what();
        if (what.find(dir_) == std::string::npos || what.find("choose a writable directory") == std::string::npos ||
            (what.find("Permission denied") == std::string::npos && what.find("may not write") == std::string::npos)) {
          status = status * 4 + 2;
        }
      } catch (...) {
        status = status * 4 + 3;
      }
    }
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "per path (base 4, last path last): 1 accepted, 2 unclear message, 3 wrong error";
}

TEST_F(SqliteBackend, BusyDatabaseIsARetryableBackendError) {
  auto backend = open_db(db_, "?busy_timeout=100ms");
  Raw raw(db_);
  ASSERT_EQ(raw.exec("BEGIN IMMEDIATE"), SQLITE_OK);
  const auto started = SteadyClock::now();
  try {
    acquire(*backend, "k", "a");
    ADD_FAILURE() << "acquired while another connection held the write lock";
  } catch (const BackendError& e) {
    EXPECT_TRUE(e.retryable());
    EXPECT_EQ(e.key(), "k");
    EXPECT_EQ(e.backend(), "sqlite");
  }
  EXPECT_GE(SteadyClock::now() - started, 100ms);
  EXPECT_NO_THROW(backend->inspect("k"));  // readers are not blocked in WAL mode
  ASSERT_EQ(raw.exec("ROLLBACK"), SQLITE_OK);
  must_acquire(*backend, "k", "a");
}

// Starts a thread that waits for `key` the way the core does and reports whether it was woken.
class Waiter {
 public:
  Waiter(Backend& backend, std::string key) {
    auto waiter = backend.waiter({key, "waiter", 10s});
    EXPECT_TRUE(std::holds_alternative<Busy>(waiter->attempt()));
    thread_ = std::thread([this, waiter = std::move(waiter)] {
      started_ = SteadyClock::now();
      waiter->wait_until(started_ + 10s);
      elapsed_ = SteadyClock::now() - started_;
    });
  }
  ~Waiter() {
    if (thread_.joinable()) thread_.join();
  }
  bool join_woken() {
    thread_.join();
    return elapsed_ < 5s;  // else it slept until its 10 s deadline
  }

 private:
  std::thread thread_;
  SteadyClock::time_point started_;
  SteadyClock::duration elapsed_{};
};

TEST_F(SqliteBackend, ReleaseAndForceReleaseWakeAWaiter) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "holder");
  {
    Waiter waiter(*backend, "k");
    std::this_thread::sleep_for(100ms);
    ASSERT_EQ(backend->release({"k", "holder", lease.token}), 0u);
    EXPECT_TRUE(waiter.join_woken());
  }
  must_acquire(*backend, "k", "holder");
  {
    Waiter waiter(*backend, "k");
    std::this_thread::sleep_for(100ms);
    ASSERT_FALSE(backend->force_release("k", Eviction::immediate, std::nullopt).empty());
    EXPECT_TRUE(waiter.join_woken());
  }
}

TEST_F(SqliteBackend, DelayedForceReleaseKeepsTheKeyClosedUntilTheHolderReleases) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "a");
  must_acquire(*backend, "k", "a");
  const auto released = sole_holder(backend->force_release("k", Eviction::delayed, std::nullopt));
  ASSERT_TRUE(released);  // the holder as it was
  EXPECT_EQ(released->owner, "a");
  EXPECT_EQ(released->token, lease.token);
  EXPECT_EQ(released->hold_count, 2u);
  EXPECT_FALSE(released->evicted);

  const auto expect_evicted = [&](const LockInfo& info) {
    EXPECT_EQ(info.key, "k");
    EXPECT_EQ(info.owner, "a");
    EXPECT_EQ(info.token, lease.token);
    EXPECT_EQ(info.hold_count, 0u);
    EXPECT_TRUE(info.evicted);
    EXPECT_GT(info.ttl_left, 9s);
  };
  const auto inspected = sole_holder(backend->inspect("k"));
  ASSERT_TRUE(inspected);
  expect_evicted(*inspected);
  const ListPage page = backend->list("", "", 10);
  ASSERT_EQ(page.locks.size(), 1u);
  expect_evicted(page.locks[0]);
  // Closed to everyone, its owner too (no re-entry, and the lease is not extended).
  for (const char* owner : {"b", "a"}) {
    auto result = acquire(*backend, "k", owner, 1h);
    ASSERT_TRUE(std::holds_alternative<Busy>(result)) << owner << " took an evicted holder's key";
    const auto holder = sole_holder(std::get<Busy>(result).holders);
    ASSERT_TRUE(holder);
    expect_evicted(*holder);
    EXPECT_LE(holder->ttl_left, 10s);
  }
  EXPECT_FALSE(backend->renew({"k", "a", lease.token}, 1h));
  const auto again = sole_holder(backend->force_release("k", Eviction::delayed, std::nullopt));  // still held
  ASSERT_TRUE(again);
  expect_evicted(*again);
  EXPECT_EQ(backend->collect_idle(), 0u);

  // Only the evicted acquisition's release opens the key, and it wakes a waiter.
  EXPECT_EQ(backend->release({"k", "a", lease.token + 1}), std::nullopt);
  EXPECT_EQ(backend->release({"k", "b", lease.token}), std::nullopt);
  EXPECT_FALSE(backend->inspect("k").empty());
  {
    Waiter waiter(*backend, "k");  // armed: the release cannot be missed
    EXPECT_EQ(backend->release({"k", "a", lease.token}), std::nullopt);
    EXPECT_TRUE(waiter.join_woken());
  }
  EXPECT_TRUE(backend->inspect("k").empty());
  EXPECT_EQ(backend->release({"k", "a", lease.token}), std::nullopt);
  EXPECT_GT(must_acquire(*backend, "k", "b").token, lease.token);
}

TEST_F(SqliteBackend, DelayedForceReleaseEndsWhenTheLeaseRunsOutOrAtOnceWhenImmediate) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "a", 100ms);
  ASSERT_FALSE(backend->force_release("k", Eviction::delayed, std::nullopt).empty());
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(backend->inspect("k").empty());
  EXPECT_TRUE(backend->force_release("k", Eviction::delayed, std::nullopt).empty());
  const Acquired next = must_acquire(*backend, "k", "b");
  EXPECT_GT(next.token, lease.token);
  EXPECT_EQ(next.hold_count, 1u);

  // An evicted holder force-released again, at once: the key is free for anyone.
  ASSERT_FALSE(backend->force_release("k", Eviction::delayed, std::nullopt).empty());
  const auto freed = sole_holder(backend->force_release("k", Eviction::immediate, std::nullopt));
  ASSERT_TRUE(freed);
  EXPECT_TRUE(freed->evicted);
  EXPECT_EQ(freed->token, next.token);
  EXPECT_EQ(backend->release({"k", "b", next.token}), std::nullopt);
  EXPECT_GT(must_acquire(*backend, "k", "b").token, next.token);
}

TEST_F(SqliteBackend, ReentryNeverShortensTheLease) {
  auto backend = open_db(db_);
  const Acquired lease = must_acquire(*backend, "k", "a", 10s);
  EXPECT_EQ(must_acquire(*backend, "k", "a", 1s).hold_count, 2u);
  EXPECT_GT(sole_holder(backend->inspect("k"))->ttl_left, 9s);
  EXPECT_EQ(must_acquire(*backend, "k", "a", 30s).token, lease.token);
  EXPECT_GT(sole_holder(backend->inspect("k"))->ttl_left, 29s);
}

// Every force-release of a held key on the file, by any client, reaches every watch that was
// started before it, once.
TEST_F(SqliteBackend, ForceReleasesReachTheWatchersOfTheFile) {
  Notices notices;
  auto watched = open_db(db_);
  ASSERT_TRUE(watched->watch(notices.events()));
  auto admin = open_db(db_);
  must_acquire(*watched, "a", "o");
  must_acquire(*watched, "b", "o");
  EXPECT_TRUE(
      admin->force_release("free", Eviction::delayed, std::nullopt).empty());  // nothing held, no notice
  ASSERT_FALSE(admin->force_release("a", Eviction::delayed, std::nullopt).empty());
  ASSERT_FALSE(
      watched->force_release("b", Eviction::immediate, std::nullopt).empty());  // its own force-releases too
  EXPECT_EQ(notices.await(2), (std::vector<std::string>{"a", "b"}));

  Notices later;
  auto late = open_db(db_);
  ASSERT_TRUE(late->watch(later.events()));
  ASSERT_FALSE(admin->force_release("a", Eviction::immediate, std::nullopt).empty());  // still held: evicted
  EXPECT_EQ(later.await(1), std::vector<std::string>{"a"});   // not the evictions before its start
  EXPECT_EQ(notices.await(3), (std::vector<std::string>{"a", "b", "a"}));
}

// Two backends on one file (two pools), two threads each: a read-yield-write of a counter
// inside the lock loses no update, and each acquisition's token is above the previous one.
TEST_F(SqliteBackend, ThreadsOnSeveralBackendsExcludeEachOther) {
  constexpr int kIterations = 40;
  std::vector<std::shared_ptr<Backend>> backends = {open_db(db_), open_db(db_)};
  int counter = 0;
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> last_token{0};
  std::atomic<bool> overlap{false};
  std::atomic<bool> token_regressed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Backend& backend = *backends[static_cast<std::size_t>(t % 2)];
      const std::string owner = "thread-" + std::to_string(t);
      for (int i = 0; i < kIterations; ++i) {
        const Acquired lease = acquire_waiting(backend, "counter", owner, 10s);
        if (inside.fetch_add(1) != 0) overlap = true;
        if (lease.token <= last_token.load()) token_regressed = true;
        last_token = lease.token;
        const int seen = counter;
        std::this_thread::yield();
        counter = seen + 1;
        inside.fetch_sub(1);
        if (backend.release({"counter", owner, lease.token}) != 0u) overlap = true;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter, 4 * kIterations);
  EXPECT_FALSE(overlap);
  EXPECT_FALSE(token_regressed);
}

// ---- Other processes ----

// A child: this binary re-run as SqliteChild.DISABLED_Run, told what to do through the
// environment, talking over pipes on fixed descriptors.
constexpr int kChildIn = 100;
constexpr int kChildOut = 101;

class ChildProcess {
 public:
  explicit ChildProcess(const std::map<std::string, std::string>& settings) {
    int to_child[2];
    int from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return;
    }
    // Everything exec needs is built before fork: the child only calls async-signal-safe code.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    for (const auto& [name, value] : settings) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string filter = "--gtest_filter=SqliteChild.DISABLED_Run";
    std::string disabled = "--gtest_also_run_disabled_tests";
    std::string brief = "--gtest_brief=1";
    char* argv[] = {exe.data(), filter.data(), disabled.data(), brief.data(), nullptr};
    pid_ = ::fork();
    if (pid_ == 0) {
      if (::dup2(to_child[0], kChildIn) < 0 || ::dup2(from_child[1], kChildOut) < 0) ::_exit(127);
      ::execve(exe.c_str(), argv, envp.data());
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
    if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
  }

  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (to_child_ >= 0) ::close(to_child_);
    if (from_child_ >= 0) ::close(from_child_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // One line from the child, or nullopt after `timeout` or at its end.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = 20s) {
    std::string line;
    const auto deadline = SteadyClock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      pollfd fd{from_child_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&fd, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char c = 0;
      if (::read(from_child_, &c, 1) != 1) return std::nullopt;
      if (c == '\n') return line;
      line += c;
    }
  }

  void send(char c) { ASSERT_EQ(::write(to_child_, &c, 1), 1); }
  void kill() { ::kill(pid_, SIGKILL); }

  // The wait status.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status;
  }

  bool exited_cleanly() {
    const int status = wait();
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  bool reaped_ = false;
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The child side. "hold": take `shared`, print the token, release on 'r' and print the holds
// left. "count": 30 times, wait for `counter` and add one to the number in DB.counter.
// "cycle": open, take `shared` and release it, and print how that went (or the error).
// "force": force-release `shared` with a lock delay and print "evicted" (or "free").
TEST(SqliteChild, DISABLED_Run) {
  const std::string mode = env("DLOCK_SQLITE_CHILD");
  if (mode.empty()) GTEST_SKIP() << "run by the multi-process tests only";
  const auto say = [](const std::string& line) {
    const std::string text = line + "\n";
    ASSERT_EQ(::write(kChildOut, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  };
  if (mode == "cycle") {
    try {
      auto backend = open_db(env("DLOCK_SQLITE_CHILD_DB"));
      const Acquired lease = must_acquire(*backend, "shared", "child");
      const auto left = backend->release({"shared", "child", lease.token});
      say(left ? "released " + std::to_string(*left) : "lost");
    } catch (const Error& e) {
      say(std::string("error: ") + e.what());
    }
    return;
  }
  auto backend = open_db(env("DLOCK_SQLITE_CHILD_DB"));
  if (mode == "force") {
    say(backend->force_release("shared", Eviction::delayed, std::nullopt).empty() ? "free" : "evicted");
    return;
  }
  if (mode == "hold") {
    const auto ttl = std::chrono::milliseconds(std::stoll(env("DLOCK_SQLITE_CHILD_TTL_MS")));
    const Acquired lease = must_acquire(*backend, "shared", "child", ttl);
    say(std::to_string(lease.token));
    char c = 0;
    if (::read(kChildIn, &c, 1) == 1 && c == 'r') {
      const auto left = backend->release({"shared", "child", lease.token});
      say(left ? std::to_string(*left) : "lost");
    }
  } else if (mode == "count") {
    const std::string owner = "child-" + std::to_string(::getpid());
    const std::string counter = env("DLOCK_SQLITE_CHILD_DB") + ".counter";
    for (int i = 0; i < 30; ++i) {
      const Acquired lease = acquire_waiting(*backend, "counter", owner, 10s);
      long long value = 0;
      std::ifstream(counter) >> value;
      std::this_thread::sleep_for(1ms);
      std::ofstream(counter) << value + 1;
      ASSERT_EQ(backend->release({"counter", owner, lease.token}), 0u);
    }
  } else {
    FAIL() << "unknown child mode " << mode;
  }
}

class SqliteProcesses : public TempDir {};

TEST_F(SqliteProcesses, OtherProcessSeesTheHolderAndItsReleaseWakesUs) {
  open_db(db_);  // the schema exists before the child starts: its token comes first
  ChildProcess child({{"DLOCK_SQLITE_CHILD", "hold"}, {"DLOCK_SQLITE_CHILD_DB", db_}, {"DLOCK_SQLITE_CHILD_TTL_MS", "30000"}});
  const auto line = child.read_line();
  ASSERT_TRUE(line) << "the child did not take the lock";
  const std::uint64_t child_token = std::stoull(*line);

  auto backend = open_db(db_);
  auto waiter = backend->waiter({"shared", "parent", 10s});
  auto result = waiter->attempt();
  ASSERT_TRUE(std::holds_alternative<Busy>(result));
  const auto holder = sole_holder(std::get<Busy>(result).holders);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->owner, "child");
  EXPECT_EQ(holder->token, child_token);
  EXPECT_GT(holder->ttl_left, 20s);

  child.send('r');
  const auto started = SteadyClock::now();
  waiter->wait_until(started + 20s);
  EXPECT_LT(SteadyClock::now() - started, 5s) << "the release did not wake the waiter";
  EXPECT_EQ(child.read_line(), "0");
  EXPECT_GT(must_acquire(*backend, "shared", "parent").token, child_token);
  EXPECT_TRUE(child.exited_cleanly());
}

TEST_F(SqliteProcesses, AForceReleaseInAnotherProcessReachesTheWatcher) {
  Notices notices;
  auto backend = open_db(db_);
  ASSERT_TRUE(backend->watch(notices.events()));
  const Acquired lease = must_acquire(*backend, "shared", "parent");
  ChildProcess child({{"DLOCK_SQLITE_CHILD", "force"}, {"DLOCK_SQLITE_CHILD_DB", db_}});
  EXPECT_EQ(child.read_line(), "evicted");
  EXPECT_TRUE(child.exited_cleanly());
  EXPECT_EQ(notices.await(1), std::vector<std::string>{"shared"});
  EXPECT_EQ(backend->release({"shared", "parent", lease.token}), std::nullopt);
  EXPECT_TRUE(backend->inspect("shared").empty());
}

TEST_F(SqliteProcesses, KilledHolderLosesTheLockWhenItsLeaseRunsOut) {
  ChildProcess child({{"DLOCK_SQLITE_CHILD", "hold"}, {"DLOCK_SQLITE_CHILD_DB", db_}, {"DLOCK_SQLITE_CHILD_TTL_MS", "500"}});
  const auto line = child.read_line();
  ASSERT_TRUE(line) << "the child did not take the lock";
  const auto taken = SteadyClock::now();
  child.kill();
  child.wait();
  auto backend = open_db(db_);
  const Acquired lease = acquire_waiting(*backend, "shared", "parent", 10s);
  EXPECT_GT(lease.token, std::stoull(*line));
  EXPECT_GE(SteadyClock::now() - taken, 400ms);
  EXPECT_LT(SteadyClock::now() - taken, 5s);
}

// Three processes open a file that does not exist yet (racing to create the directory, the
// schema and the wake board), then take turns on one counter.
TEST_F(SqliteProcesses, ProcessesExcludeEachOtherOnAFreshFile) {
  const std::string db = dir_ + "/fresh/locks.db";
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < 3; ++i) {
    children.push_back(std::make_unique<ChildProcess>(
        std::map<std::string, std::string>{{"DLOCK_SQLITE_CHILD", "count"}, {"DLOCK_SQLITE_CHILD_DB", db}}));
  }
  for (auto& child : children) EXPECT_TRUE(child->exited_cleanly());
  long long value = 0;
  std::ifstream(db + ".counter") >> value;
  EXPECT_EQ(value, 90);
}

// ---- A full file system ----

// A 400 KiB tmpfs of the test's own (root may mount one; skipped where that is refused).
class SqliteFullFilesystem : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    mount_ = dir_ + "/small";
    ASSERT_EQ(::mkdir(mount_.c_str(), 0700), 0) << std::strerror(errno);
    if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=400k") != 0) {
      GTEST_SKIP() << "cannot mount a 400 KiB tmpfs on " << mount_ << " (" << std::strerror(errno)
                   << "): run as root to test a full file system";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(mount_.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
    TempDir::TearDown();
  }

  // Writes FILE until the file system has no page left.
  static void fill(const std::string& file) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::vector<char> page(4096, 'x');
    while (::write(fd, page.data(), page.size()) > 0) {
    }
    const int err = errno;
    ::close(fd);
    ASSERT_EQ(err, ENOSPC) << std::strerror(err);
  }

  std::string mount_;
  bool mounted_ = false;
};

// Defect "SIGBUS on a full filesystem": the wake file was created sparse (ftruncate), and the
// first touch of a page the full file system could not back killed the process with SIGBUS,
// after the release had committed, losing the command's status and the wake-up.
TEST_F(SqliteFullFilesystem, WakeFileOnAFullFilesystemIsNoSigbus) {
  const std::string db = mount_ + "/locks.db";
  {
    auto backend = open_db(db);  // the database, its WAL and shared memory, while there is room
    const Acquired lease = must_acquire(*backend, "shared", "parent");
    ASSERT_EQ(backend->release({"shared", "parent", lease.token}), 0u);
  }
  // Every frame checkpointed, and a connection kept open so that no one rebuilds the WAL index:
  // the next commit rewrites the WAL from its start, and the database works on the full file
  // system.
  Raw raw(db);
  ASSERT_EQ(raw.exec("PRAGMA wal_checkpoint(RESTART)"), SQLITE_OK);
  ASSERT_TRUE(fs::remove(db + "-wake"));
  fill(mount_ + "/filler");

  const auto cycle = [&] {
    ChildProcess child({{"DLOCK_SQLITE_CHILD", "cycle"}, {"DLOCK_SQLITE_CHILD_DB", db}});
    const auto line = child.read_line();
    const int status = child.wait();
    EXPECT_FALSE(WIFSIGNALED(status)) << "the child died of " << ::strsignal(WTERMSIG(status));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child did not finish cleanly (wait status " << status << "; under ASan a SIGBUS exits 1)";
    return line.value_or("(nothing)");
  };
  const std::string refused = cycle();
  EXPECT_TRUE(refused.starts_with("error: ")) << refused;
  EXPECT_NE(refused.find(db + "-wake"), std::string::npos) << refused;
  EXPECT_NE(refused.find("No space left on device"), std::string::npos) << refused;

  // With room again, the wake file is allocated for real, not sparse.
  ASSERT_TRUE(fs::remove(mount_ + "/filler"));
  EXPECT_EQ(cycle(), "released 0");
  struct stat st {};
  ASSERT_EQ(::stat((db + "-wake").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, static_cast<off_t>(WakeBoard::kBytes));
  EXPECT_GE(st.st_blocks * 512, st.st_size) << "the wake file is sparse";
}

// ---- The wake board ----

class WakeBoardTest : public TempDir {
 protected:
  std::shared_ptr<WakeBoard> board() { return WakeBoard::open(dir_ + "/board", 0600); }
};

// True once thread `tid` of this process sleeps in the kernel (in a futex, where wchan tells).
bool sleeping(pid_t tid) {
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  std::string wchan;
  std::ifstream(task + "/wchan") >> wchan;
  if (wchan.find("futex") != std::string::npos) return true;
  if (!wchan.empty() && wchan != "0") return false;  // sleeping, but not in a futex yet
  std::string stat;
  std::getline(std::ifstream(task + "/stat"), stat);
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'S';
}

// Threads that each arm a channel on `key`, then wait up to 10 s; `woken` counts wake-ups.
struct Sleepers {
  std::atomic<int> woken{0};
  std::atomic<int> armed{0};
  std::vector<std::atomic<pid_t>> tids;
  std::vector<std::thread> threads;

  Sleepers(WakeBoard& board, const std::string& key, int count, bool abandon_after_wake = false)
      : tids(static_cast<std::size_t>(count)) {
    for (std::size_t i = 0; i < tids.size(); ++i) {
      threads.emplace_back([this, &board, key, abandon_after_wake, i] {
        tids[i] = ::gettid();
        auto channel = board.bell(key);
        channel->arm();
        ++armed;
        if (channel->wait_until(SteadyClock::now() + 10s)) {
          ++woken;
          if (abandon_after_wake) channel->abandon();
        }
      });
    }
    // Every thread must block in the kernel before a ring, or it would see the ring early.
    const auto deadline = SteadyClock::now() + 5s;
    while (armed.load() < count && SteadyClock::now() < deadline) std::this_thread::sleep_for(1ms);
    for (const auto& tid : tids) {
      while (!sleeping(tid.load()) && SteadyClock::now() < deadline) std::this_thread::sleep_for(1ms);
    }
  }
  ~Sleepers() {
    for (auto& thread : threads) thread.join();
  }

  // Waits until `n` are woken (or 5 s), then a little longer to catch extra wake-ups.
  int settle(int n) const {
    const auto deadline = SteadyClock::now() + 5s;
    while (woken.load() < n && SteadyClock::now() < deadline) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(150ms);
    return woken.load();
  }
};

TEST_F(WakeBoardTest, RingWakesExactlyOneOfSeveralWaiters) {
  auto b = board();
  Sleepers sleepers(*b, "k", 3);
  b->ring("k");
  EXPECT_EQ(sleepers.settle(1), 1);
  b->ring("k");
  EXPECT_EQ(sleepers.settle(2), 2);
  b->ring("k");
  EXPECT_EQ(sleepers.settle(3), 3);
}

TEST_F(WakeBoardTest, AbandonPassesAConsumedWakeOn) {
  auto b = board();
  Sleepers sleepers(*b, "k", 2, /*abandon_after_wake=*/true);
  b->ring("k");
  EXPECT_EQ(sleepers.settle(2), 2);
}

TEST_F(WakeBoardTest, AbandonWithoutAConsumedWakeWakesNobody) {
  auto b = board();
  Sleepers sleepers(*b, "k", 1);
  auto late = b->bell("k");
  late->arm();
  EXPECT_FALSE(late->wait_until(SteadyClock::now() + 20ms));
  late->abandon();
  EXPECT_EQ(sleepers.settle(0), 0);
  b->ring("k");
  EXPECT_EQ(sleepers.settle(1), 1);
}

TEST_F(WakeBoardTest, RingBetweenArmAndWaitIsNotLost) {
  auto b = board();
  auto channel = b->bell("k");
  channel->arm();
  b->ring("k");
  const auto started = SteadyClock::now();
  EXPECT_TRUE(channel->wait_until(started + 10s));
  EXPECT_LT(SteadyClock::now() - started, 1s);
}

TEST_F(WakeBoardTest, WaitTimesOutWithoutARing) {
  auto b = board();
  auto channel = b->bell("k");
  channel->arm();
  const auto started = SteadyClock::now();
  EXPECT_FALSE(channel->wait_until(started + 50ms));
  EXPECT_GE(SteadyClock::now() - started, 50ms);
  EXPECT_FALSE(channel->wait_until(started - 1s));  // a deadline in the past
}

TEST_F(WakeBoardTest, AKeyInTheSameSlotWithAnotherBitIsNotWoken) {
  std::map<std::size_t, std::string> by_slot;
  std::string a;
  std::string b_key;
  for (int i = 0; b_key.empty(); ++i) {
    const std::string key = "key-" + std::to_string(i);
    const auto spot = WakeBoard::locate(key);
    const auto [it, inserted] = by_slot.emplace(spot.slot, key);
    if (!inserted && WakeBoard::locate(it->second).bit != spot.bit) {
      a = it->second;
      b_key = key;
    }
  }
  auto b = board();
  Sleepers sleepers(*b, b_key, 1);
  b->ring(a);
  EXPECT_EQ(sleepers.settle(0), 0);
  b->ring(b_key);
  EXPECT_EQ(sleepers.settle(1), 1);
}

TEST_F(WakeBoardTest, FileIsSizedAndSharedByEveryOpen) {
  auto first = board();
  auto second = board();
  EXPECT_EQ(fs::file_size(dir_ + "/board"), WakeBoard::kBytes);
  EXPECT_EQ(fs::status(dir_ + "/board").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  Sleepers sleepers(*first, "k", 1);
  second->ring("k");  // another mapping of the file, as another process would have
  EXPECT_EQ(sleepers.settle(1), 1);
}

// Earlier builds left the board sparse (ftruncate), without the eviction page: it is grown and
// allocated, and the counts in it are kept.
TEST_F(WakeBoardTest, SparseBoardOfAnEarlierBuildIsAllocatedAndGrown) {
  const std::string path = dir_ + "/board";
  const off_t slot = static_cast<off_t>(WakeBoard::locate("k").slot * sizeof(std::uint32_t));
  const std::uint32_t count = 7;
  {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(WakeBoard::kSlotBytes)), 0);
    EXPECT_EQ(::pwrite(fd, &count, sizeof count, slot), static_cast<ssize_t>(sizeof count));
    ::close(fd);
  }
  auto b = board();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, static_cast<off_t>(WakeBoard::kBytes));
  EXPECT_GE(st.st_blocks * 512, st.st_size) << "the board is still sparse";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::uint32_t kept = 0;
  EXPECT_EQ(::pread(fd, &kept, sizeof kept, slot), static_cast<ssize_t>(sizeof kept));
  ::close(fd);
  EXPECT_EQ(kept, count);
}

std::set<pid_t> threads_of_this_process() {
  std::set<pid_t> ids;
  for (const auto& entry : fs::directory_iterator("/proc/self/task")) ids.insert(std::stoi(entry.path().filename()));
  return ids;
}

// The watcher thread takes no signal: dlock serve blocks SIGTERM in its threads to sigwait for
// it, and a watcher that took it instead let the default action kill the server (exit 143).
TEST_F(WakeBoardTest, EvictionWatchTakesNoSignals) {
  const auto before = threads_of_this_process();
  EvictionWatch watch(board(), [](std::int64_t after) { return EvictionWatch::Evictions{{}, after}; },
                      [](std::string_view) {});
  std::vector<pid_t> started;
  for (const pid_t id : threads_of_this_process()) {
    if (!before.contains(id)) started.push_back(id);
  }
  ASSERT_EQ(started.size(), 1u) << "one watcher thread";
  // Asleep on the board: past the thread's start, whose mask is not yet its own.
  const auto deadline = SteadyClock::now() + 5s;
  while (!sleeping(started[0]) && SteadyClock::now() < deadline) std::this_thread::sleep_for(1ms);
  std::ifstream status("/proc/self/task/" + std::to_string(started[0]) + "/status");
  std::string blocked;
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("SigBlk:")) blocked = line.substr(7);
  }
  const unsigned long long mask = std::stoull(blocked, nullptr, 16);
  for (const int signo : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) {
    EXPECT_NE(mask & (1ULL << (signo - 1)), 0u) << "the watcher may take signal " << signo;
  }
}

// The hash is part of the on-disk format: every dlock build on a host must agree on it.
TEST_F(WakeBoardTest, KeyPlacementIsStable) {
  const auto spot = WakeBoard::locate("orders/42");
  EXPECT_EQ(spot.slot, 36847u);
  EXPECT_EQ(spot.bit, 1u << 8);
  const auto empty = WakeBoard::locate("");
  EXPECT_EQ(empty.slot, 10534u);
  EXPECT_EQ(empty.bit, 1u << 25);
}

}  // namespace
}  // namespace dlock
