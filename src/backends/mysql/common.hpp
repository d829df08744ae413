#pragma once

// What the three mysql:// modes share: settings, errors that name the fix, the connection
// pool with the sessions that hold doorbells, and the GET_LOCK doorbell waiters sleep on.

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backends/mysql/connection.hpp"
#include "backends/mysql/pool.hpp"
#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::mysql {

inline constexpr const char* kName = "mysql";
inline constexpr int kDeadlockRetries = 20;
inline constexpr std::size_t kMaxIdentifier = 64;
// What a release of a holder evicted with a lock delay answers as its insert id (its
// LAST_INSERT_ID): above any hold count, so it reads as "freed, but no longer ours".
inline constexpr std::uint64_t kEvictedRelease = std::uint64_t{1} << 32;

// Row mode: where the lock lives in the user's table.
struct RowColumns {
  std::string id = "id";
  std::string owner = "lock_owner";
  std::string expires = "lock_expire_time";
  std::string version = "version";
  std::string holds = "lock_holds";
};

struct Settings {
  ConnectOptions connect;
  std::string mode = "lease";  // lease | row | session
  std::string table;           // lease, session: dlock_locks; row: required
  bool create_table = true;
  RowColumns columns;
  // Row mode: take an id column whose collation holds different keys equal (id_collation=any).
  bool accept_folding_ids = false;
  // Session mode: a key whose holder's session ended without a release stays closed until
  // that holder's lease ends (lock_delay=true), rather than going to the next client at once.
  bool lock_delay = false;
};

// 1..64 letters, digits or underscores: every table and column name is checked against this
// before it is quoted into SQL.
bool valid_identifier(const std::string& name, std::size_t max = kMaxIdentifier);

// Microseconds for a TTL, capped at a century (DATETIME ends in 9999).
std::int64_t ttl_us(std::chrono::milliseconds ttl);
// TIMESTAMPDIFF microseconds as whole milliseconds, rounded up; NULL and negative give 0.
std::chrono::milliseconds ceil_ms(const std::optional<std::string>& us_text);
std::uint64_t to_u64(const std::optional<std::string>& text);

// Throws the dlock error for a server error: configuration errors name the fix, and the
// password never appears (messages use the redacted URL).
[[noreturn]] void raise(const SqlError& e, const Settings& settings, std::string_view key = {});

class DoorbellChannel;

// The base of every mode: the pool, the sessions that hold doorbells, retries.
class ModeBackend : public backend::Backend, public backend::ActivityLedger {
 public:
  explicit ModeBackend(Settings settings) : settings_(std::move(settings)), pool_(settings_.connect) {}
  ~ModeBackend() override { pool_.stop_watching(); }

  std::string_view name() const noexcept override { return kName; }
  backend::AcquireResult acquire(const backend::AcquireRequest& request) final { return attempt(request, nullptr); }
  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;
  // One attempt, through a waiting call's doorbell channel once it has its own session (the
  // mode makes the attempt there, where the bell is), or else on a pooled connection.
  virtual backend::AcquireResult attempt(const backend::AcquireRequest& request, DoorbellChannel* channel) = 0;
  void ping() override;
  // Lease and session modes keep the totals in the lock table's `<table>_activity`; row mode
  // creates nothing, so it keeps none.
  backend::ActivityLedger* activity() noexcept override { return settings_.mode == "row" ? nullptr : this; }
  void add(const Activity& delta) override;
  Activity totals() override;
  // Keeps `events` for the losses watch_lock_connections() reports; no mode pushes
  // force-releases.
  bool watch(std::shared_ptr<backend::Events> events) override;

  const Settings& settings() const { return settings_; }
  // The GET_LOCK name of a key's doorbell: a hash, as names are limited to 64 characters.
  std::string bell_name(std::string_view key) const;

  Pool::Lease take();
  // The serial of the connection holding this owner's doorbell (or session lock, or shared
  // holder's lock) for the key, for its acquisition with this token.
  void remember(std::string_view key, std::string_view owner, std::uint64_t connection_serial, std::uint64_t token,
                LockMode mode = LockMode::exclusive);
  // A connection no held lock is pinned to, for a waiter that may block on it for long, and
  // in session mode for a new lock (a connection holds at most one).
  Pool::Lease take_unpinned();

  // Runs a statement, retrying InnoDB deadlocks and lock wait timeouts (the statement was
  // rolled back whole); any other error becomes a dlock error.
  template <class F>
  auto with_retries(std::string_view key, F&& statement) -> decltype(statement()) {
    for (int attempt = 0;; ++attempt) {
      try {
        return statement();
      } catch (const SqlError& e) {
        if (!retryable(e) || attempt >= kDeadlockRetries) raise(e, settings_, key);
        std::this_thread::sleep_for(std::chrono::microseconds(100 << std::min(attempt, 6)));
      }
    }
  }

 public:
  // A LockInfo from (owner, token, holds, microseconds left, microseconds since taken or NULL)
  // starting at column `first`. Every mode marks a holder evicted with a lock delay the same
  // way: an owner and no holds (a free key has no owner).
  static LockInfo info(std::string key, const Row& row, std::size_t first);
  // InnoDB deadlocks and lock wait timeouts: the statement was rolled back whole.
  static bool retryable(const SqlError& e);
  // Runs `body` in one transaction on `connection`, rolled back when it throws.
  template <class F>
  static auto in_transaction(Connection& connection, F&& body) -> decltype(body()) {
    connection.run("START TRANSACTION");
    try {
      auto result = body();
      connection.run("COMMIT");
      return result;
    } catch (...) {
      if (!connection.broken()) connection.run("ROLLBACK");
      throw;
    }
  }

 protected:
  // The connection whose session holds this owner's doorbell (or session lock) for the key,
  // if any (with a token: for that acquisition only): re-entry and release run there, as
  // GET_LOCK belongs to a session.
  Pool::Lease take_for(std::string_view key, std::string_view owner, std::optional<std::uint64_t> token = {});
  // The connection of a waiting call's doorbell, or one taken for the owner.
  struct Attempt {
    DoorbellChannel* channel = nullptr;
    std::optional<Pool::Lease> own;
    Connection* connection = nullptr;
  };
  Attempt attempt_for(const backend::AcquireRequest& request, DoorbellChannel* channel, bool unpinned);
  // The serial remembered for the owner's acquisition of the key (with a token: that one's).
  std::optional<std::uint64_t> remembered(std::string_view key, std::string_view owner,
                                          std::optional<std::uint64_t> token = {});
  // Whether the owner's acquisition of the key with this token, taken by this client, is shared.
  bool remembered_shared(std::string_view key, std::string_view owner, std::uint64_t token);
  // Forgets the acquisition with this token only: a late release of an earlier acquisition
  // by the same owner must leave a newer one's connection remembered.
  void forget(std::string_view key, std::string_view owner, std::uint64_t token);
  // Whether an exclusive lock of `key` (held, or evicted with a lock delay) was taken on this connection,
  // whose session so keeps the key's doorbell for it: an attempt that finds the key held there
  // must not give that bell back.
  bool keeps_doorbell(std::string_view key, const Connection& connection);

  // A page of `list`. The statements return rows of (key, owner, token, holds, microseconds
  // left, ...), a key's holders together, and take (first key, key past the prefix, `after`,
  // key limit), or without the key past the prefix when there is none. `keep`, if given, drops
  // rows after the query. `shared_column`, if not 0, is a column that is 1 for a shared holder.
  ListPage list_page(std::string_view prefix, std::string_view after, std::size_t limit, const std::string& bounded_sql,
                     const std::string& open_sql, const std::function<bool(Connection&, const Row&)>& keep = {},
                     std::size_t shared_column = 0);
  // The key's holders as `inspect_sql` (key[, bell]) reads them: its row's, if held.
  std::vector<LockInfo> inspect_on(Connection& connection, std::string_view key,
                                   const std::string& inspect_sql, const std::string& bell = {});
  // Force-release of the holder (every mode keeps one per key), or only of the holder of
  // `token`, through `inspect_sql` (as inspect_on) and `force_sql` (key, owner, token[, bell]),
  // retried while the key changes hands; `on_freed` runs after a successful eviction. A holder
  // already evicted counts as held, so `force_sql` must change (or, with CLIENT_FOUND_ROWS,
  // match) its row.
  std::vector<LockInfo> evict(std::string_view key, std::optional<std::uint64_t> token,
                              const std::string& inspect_sql, const std::string& force_sql,
                              const std::string& bell = {},
                              const std::function<void(Connection&, std::int64_t held_token)>& on_freed = {});

  // Lease and session modes: makes sure the lock tables exist (with session mode's memory
  // tables when asked), creating them when allowed.
  void ensure_lock_table(Connection& connection, bool session_tables = false);
  // Session mode, where a lock is its connection's: when the server closes the connection an
  // acquisition was remembered on (KILL, restart, timeout), that acquisition is reported lost
  // at once (Events::lost), not at its holder's next renewal.
  void watch_lock_connections();

  Settings settings_;
  Pool pool_;

 private:
  struct Remembered {
    std::uint64_t serial = 0;
    std::uint64_t token = 0;
    LockMode mode = LockMode::exclusive;
  };
  // The pool's watching thread: the acquisitions remembered on connection `serial` are lost.
  void connection_closed(std::uint64_t serial);

  std::mutex sessions_mutex_;
  std::map<std::pair<std::string, std::string>, Remembered> sessions_;
  bool watching_connections_ = false;
  std::shared_ptr<backend::Events> events_;  // under sessions_mutex_
};

// A waiter's doorbell: GET_LOCK on the key's bell, on a connection of its own, returns when
// the holder's session releases it (its last release, or its end). The waiter keeps the bell
// and makes its next attempt on the same connection, so the bell passes to the new holder
// without anyone else seeing it free: one release wakes one waiter.
//
// A mode may give the channel a takeover, which waits its own way and can come back holding
// the key; the acquire() that follows then hands that over (lease mode's heir handoff).
class Takeover {
 public:
  struct Outcome {
    std::optional<backend::Acquired> acquired;  // its `sent` set
    bool rang = false;                          // the bell is this session's now
  };
  virtual ~Takeover() = default;
  // Waits on `connection` for at most `wait` for the key to become `owner`'s, or the bell.
  virtual Outcome wait(Connection& connection, std::string_view owner, std::chrono::milliseconds ttl,
                       std::chrono::microseconds wait) = 0;
  // Between waits of a waiting call that may come back holding the key.
  virtual bool waiting() const noexcept = 0;
  // The server ended the session: whatever it held is gone.
  virtual void session_lost() noexcept = 0;
  // The waiting call ends, `acquired` or not: frees what the waits hold, and a key handed to
  // `owner` (on any of the call's `sessions`, see DoorbellChannel::sessions) that the call
  // did not take.
  virtual void finish(Connection& connection, std::string_view owner, std::string_view sessions,
                      bool acquired) noexcept = 0;
};

class DoorbellChannel final : public backend::Waiter {
 public:
  DoorbellChannel(ModeBackend& backend, const backend::AcquireRequest& request, std::unique_ptr<Takeover> takeover = {});
  ~DoorbellChannel() override;

  // Through this channel once it has a session of its own (from its first wait on): its first
  // attempt is a plain one, which costs no extra connection when the key is free.
  backend::AcquireResult attempt() override;
  // An attempt through this channel holds the bell, yet found the key closed to newcomers (an
  // evicted holder whose session ended, so its bell was free): the channel keeps the bell, so
  // that the other waiters sleep on it, and its next wait only pauses before looking again.
  void guard_bell() noexcept {
    holds_bell_ = true;
    guarding_ = true;
  }
  void wait_until(std::chrono::steady_clock::time_point deadline) override;

  Connection& connection() { return **connection_; }
  // The server ended this channel's session (KILL, restart): whatever it held is gone; the
  // channel goes on on a new connection.
  void reconnect();
  // The server's ids of every session this waiting call used, comma-separated (for
  // FIND_IN_SET): an acquisition made by, or handed to, a session that ended before its
  // answer arrived is this call's, and a later attempt takes it as such, not as a re-entry.
  std::string_view sessions() const noexcept { return sessions_; }
  Takeover* takeover() noexcept { return takeover_.get(); }
  // What the takeover acquired during the last wait, handed over once.
  std::optional<backend::Acquired> claim() noexcept {
    if (taken_) acquired_ = true;
    return std::exchange(taken_, std::nullopt);
  }
  // An attempt through this channel took the key.
  void acquired() noexcept { acquired_ = true; }
  // The attempt made through this channel settled the bell: it went to the new lock, or the
  // conflict report gave it back.
  void bell_settled() noexcept { holds_bell_ = false; }

 private:
  void drop() noexcept;
  // Sleeps until each shared holder the last attempt found has ended, on the lock its session
  // keeps for the hold (the bell's name plus its token): the wake-up of a writer, or of a reader
  // behind a writer's claim, while a key is held shared, where no one holds the bell to ring.
  void wait_for_shared_holders(std::chrono::microseconds left);
  // Sleeps the current back-off (if any), at most `left`.
  void pause(std::chrono::microseconds left);
  // After a wait begun at `start` that something ended: one that ended at once (a bell or lock
  // free while the key was held) doubles the back-off, from 1 ms up to 250 ms; a real wait
  // clears it.
  void settle_backoff(std::chrono::steady_clock::time_point start);

  ModeBackend& backend_;
  std::string key_;
  std::string bell_;
  std::unique_ptr<Takeover> takeover_;
  std::optional<Pool::Lease> connection_;  // replaced when the server ends it
  std::string sessions_;                   // see sessions()
  bool holds_bell_ = false;
  bool guarding_ = false;  // see guard_bell()
  std::chrono::milliseconds backoff_{0};
  const std::string owner_;  // of the waiting call
  const std::chrono::milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  std::optional<backend::Acquired> taken_;
  bool acquired_ = false;  // the waiting call got the key through this channel
  std::uint64_t waited_behind_ = 0;  // the exclusive holder the last attempt found (AcquireRequest)
  std::vector<std::uint64_t> shared_holders_;  // the tokens of the shared holders it found
};

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings);
std::shared_ptr<backend::Backend> make_row_backend(Settings settings);
std::shared_ptr<backend::Backend> make_session_backend(Settings settings);

// The lock table of lease and session modes.
std::string lock_table_schema(const std::string& table);

}  // namespace dlock::backends::mysql
