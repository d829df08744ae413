// mysql:// lease mode: a lock table keyed by name, each acquire, renew and release one
// statement judged by the server's clock.

#include <mysqld_error.h>

#include "backends/mysql/common.hpp"
#include "backends/mysql/lease_shared.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// How long a newcomer waits on a key whose row is free while a woken waiter takes it over.
constexpr std::chrono::milliseconds kHandoffRecheck{50};

// The GET_LOCK whose holder is the key's heir, next to its doorbell `bell`.
std::string heir_slot(const std::string& bell) { return bell + ":heir"; }

// The heir of a key: the one waiter whose session holds the key's heir slot (a GET_LOCK next
// to the doorbell; the other waiters wait for the slot). It writes itself into the row
// (heir_owner, heir_ttl_us, heir_session), and the holder's last release hands the key
// straight to it in the same statement: the heir then only reads that it holds the key, and
// a handoff costs one commit, not two. A heir whose session ended is passed over.
//
// session_id names the session that made the row's acquisition: the one that took the key,
// or the heir's it was handed to. A KILL returns before the session ends, so a release can
// hand the key to a heir whose session is ending, and any attempt's answer can be lost with
// its connection: the waiting call goes on on a new session, and its attempts pass the ids
// of every session it used (DoorbellChannel::sessions), so that it takes such an acquisition
// as its own (one hold, its token), never as a re-entry.
//
// A holder evicted with a lock delay keeps its row (owner, token, expiry) with hold_count 0,
// which no other state has (a free row has no owner): nobody takes the row, the owner included,
// until it expires or the holder's release frees it, which hands on and rings like a release.
//
// The statements of lease mode for one table. Every expiry is judged by UTC_TIMESTAMP(6),
// the server's clock, fixed for the duration of a statement.
struct LeaseSql {
  explicit LeaseSql(const std::string& table) {
    const std::string t = "`" + table + "`";
    const std::string seq = "`" + table + "_seq`";
    const std::string live = "owner <> '' AND expires_at > UTC_TIMESTAMP(6)";
    const std::string info = "owner, token, hold_count, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at),"
                             " TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6))";
    // Parameters: key, owner, ttl, bell, bell, and 7 times the sessions of the waiting call
    // making the attempt ('' for none).
    acquire = acquire_sql(t, seq);
    // The common acquisition in one plain statement (its expressions, not its commit, are
    // what a fused statement costs more): a key with a row, released or expired, and no heir.
    // A row released by ringing the doorbell (2) goes, for a second, only to whoever gets the
    // doorbell (`acquire`'s rule). Anything else is left to `acquire`. Such a row, taken, was
    // taken with the bell (the WHERE asked for it), so the doorbell column need not ask again.
    // Parameters: bell, bell, owner, ttl, key, bell, bell.
    const std::string rung = "(owner = '' AND doorbell = 2 AND expires_at > UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)";
    take = "UPDATE " + t + " SET token = LAST_INSERT_ID(token + 1), hold_count = 1, acquired_at = UTC_TIMESTAMP(6),"
           " session_id = CONNECTION_ID(), doorbell = IF(" + rung + " OR IS_USED_LOCK(?) <=> CONNECTION_ID(), 1,"
           " COALESCE(GET_LOCK(?, 0), 0)),"
           " owner = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
           " WHERE name = ? AND heir_owner = '' AND ((owner = '' AND (doorbell <> 2 OR"
           " expires_at <= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND OR IS_USED_LOCK(?) <=> CONNECTION_ID() OR GET_LOCK(?, 0) = 1))"
           " OR (owner <> '' AND expires_at <= UTC_TIMESTAMP(6)))";
    // The common release in one plain statement: the last hold, with no heir. Anything else
    // is left to `release`. It writes only what a release changes: a row without an owner is
    // free whatever its hold count and session say (every statement that reads them also
    // asks for an owner), and the next take writes them again, unchanged when the same
    // session takes the key back. RELEASE_LOCK answers 1 only to the bell's holder, whose
    // bell it frees (it holds it once: every take asks before it takes). Parameters: bell,
    // key, owner, token.
    free = "UPDATE " + t + " SET owner = '', expires_at = UTC_TIMESTAMP(6), doorbell = IF(RELEASE_LOCK(?) <=> 1, 2, 0)"
           " WHERE name = ? AND owner = ? AND token = ? AND hold_count = 1 AND heir_owner = ''"
           " AND expires_at > UTC_TIMESTAMP(6)";
    // The heir writes itself in. Never as heir of its own owner, which would hand the key
    // back to its releaser. Parameters: owner, ttl, key, owner, slot.
    become_heir = "UPDATE " + t + " SET heir_owner = ?, heir_ttl_us = ?, heir_session = CONNECTION_ID()"
                  " WHERE name = ? AND owner <> ? AND IS_USED_LOCK(?) <=> CONNECTION_ID()";
    // The heir's wait: for the doorbell (a derived table, filled before any row is read, so a
    // waiter holds no InnoDB lock), then a locking read of the row, which waits for the
    // releasing statement's commit. A key handed to this session is owned by the heir with
    // session_id its session; the heir slot is then freed for the next waiter. Returns (the
    // key is ours, token, rang).
    // Parameters: owner, owner, slot, bell, bell, wait in microseconds, key.
    const std::string handed_to = "(t.owner <=> ? AND t.session_id = CONNECTION_ID())";
    heir_wait = "SELECT " + handed_to + ", t.token, w.rang, IF(" + handed_to + ", RELEASE_LOCK(?), 0)"
                " FROM (SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, ? / 1000000), 0))"
                " AS rang LIMIT 1) AS w LEFT JOIN " + t + " AS t ON t.name = ? LOCK IN SHARE MODE";
    // A heir that stops waiting, on whichever of its sessions it registered. Parameters: key,
    // sessions.
    quit_heir = "UPDATE " + t + " SET heir_owner = '', heir_session = 0"
                " WHERE name = ? AND heir_owner <> '' AND FIND_IN_SET(heir_session, ?)";
    // A key handed to, or taken by, one of a waiting call's sessions. Parameters: key, owner,
    // sessions.
    handed = "SELECT token FROM " + t + " WHERE name = ? AND owner = ? AND FIND_IN_SET(session_id, ?)";
    drop_slot = "SELECT RELEASE_LOCK(?)";
    // After an acquire that changed nothing: the holder, and any doorbell taken for nothing
    // (not one this session keeps for a lock of the key it holds, or was evicted from).
    // Parameters: kept, bell, bell, key.
    conflict = "SELECT " + info + ", IF(? = 0 AND IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0) FROM " + t +
               " WHERE name = ?";
    // Parameters: key, owner.
    reentered = "SELECT token, hold_count FROM " + t + " WHERE name = ? AND owner = ?";
    // Parameters: ttl, key, owner, token.
    renew = "UPDATE " + t + " SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, renewals = renewals + 1"
            " WHERE name = ? AND owner = ? AND token = ? AND hold_count > 0 AND expires_at > UTC_TIMESTAMP(6)";
    // The holds left come back as the insert id (kEvictedRelease for an evicted holder, whose
    // release counts as its last hold's). The last hold hands the key to a live heir
    // (a new token, the heir's TTL, one hold, session_id the heir's session) or frees the row,
    // and rings the doorbell when this session holds it. Columns
    // are assigned left to right and later ones see the new values: after the first,
    // `hold_count <= 1 AND owner <> ''` means "handed over". The heir's lease runs from
    // SYSDATE(6), read once the row is locked: after the heir's last look at the row, from
    // whose sending the heir times it (UTC_TIMESTAMP(6) is the statement's start, which a
    // lock wait can put before that). Parameters: slot, bell, bell, key, owner, token.
    const std::string handed_over = "(hold_count <= 1 AND owner <> '')";
    release = "UPDATE " + t + " SET owner = IF(hold_count <= 1,"
              " IF(heir_owner <> '' AND heir_owner <> owner AND IS_USED_LOCK(?) <=> heir_session, heir_owner, ''), owner),"
              " token = IF(" + handed_over + ", token + 1, token),"
              " acquired_at = IF(" + handed_over + ", SYSDATE(6), acquired_at),"
              " expires_at = IF(hold_count <= 1, IF(owner <> '', SYSDATE(6) + INTERVAL heir_ttl_us MICROSECOND,"
              " UTC_TIMESTAMP(6)), expires_at),"
              " doorbell = IF(hold_count <= 1, IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 2 + 0 * RELEASE_LOCK(?), 0), doorbell),"
              " session_id = IF(hold_count <= 1, IF(owner <> '', heir_session, 0), session_id),"
              " heir_owner = IF(hold_count <= 1, '', heir_owner),"
              " heir_session = IF(hold_count <= 1, 0, heir_session),"
              " hold_count = IF(hold_count = 0, IF(" + handed_over + ", 1, 0) + 0 * LAST_INSERT_ID(" +
              std::to_string(kEvictedRelease) + "),"
              " IF(" + handed_over + ", 1 + 0 * LAST_INSERT_ID(0), LAST_INSERT_ID(hold_count - 1)))"
              " WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)";
    drop_bell = "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)";
    // The exclusive holder (a key held shared is LeaseShared's).
    inspect = "SELECT " + info + " FROM " + t + " WHERE name = ? AND " + live + " AND owner <> '" +
              std::string(kSharedOwner) + "'";
    // Parameters: key, owner, token.
    force_release = "UPDATE " + t + " SET owner = '', hold_count = 0, expires_at = UTC_TIMESTAMP(6), doorbell = 0"
                    " WHERE name = ? AND owner = ? AND token = ? AND " + live;
    // With a lock delay: everything stays but the holds (renewals changes the row of a holder
    // evicted before). Parameters: key, owner, token.
    evict = "UPDATE " + t + " SET hold_count = 0, renewals = renewals + 1 WHERE name = ? AND owner = ? AND token = ? AND " +
            live;
    lock_floor = "SELECT v FROM " + seq + " WHERE id = 0 FOR UPDATE";
    idle_cutoff = "SELECT UTC_TIMESTAMP(6)";
    raise_floor = "UPDATE " + seq + " SET v = GREATEST(v, (SELECT COALESCE(MAX(token), 0) FROM " + t +
                  " WHERE owner = '' OR expires_at <= ?)) WHERE id = 0";
    delete_idle = "DELETE FROM " + t + " WHERE owner = '' OR expires_at <= ?";
  }

  // The SELECT list tries the key's doorbell (GET_LOCK) and hands the result to the update
  // through VALUES(doorbell). Columns are assigned left to right and later ones see the new
  // values, so `owner` goes after everything that tests the old owner, and `expires_at` last.
  // A row released by ringing the doorbell (doorbell = 2) may be taken only with the bell: the
  // woken waiter holds it while it takes over, and a newcomer must not barge in. After a second
  // it is open to all, so a bell kept by mistake cannot block the key. A row released without
  // a ring, or expired, is open to anyone. A heir that takes the key so is a heir no more.
  // A live acquisition of this owner made by, or handed to, one of the attempting waiting
  // call's sessions is claimed: one hold, its token (as the insert id, as for a takeover), the
  // lease from now; counting that as a re-entry would leave a hold nobody releases. Only an
  // attempt outside a waiting call re-enters (a waiting call's owner held nothing when it
  // began to wait; a killed attempt still running on the server must not add a hold to what
  // the call took on a new session). After the hold count, more than one hold means a
  // re-entry, whose lease never shortens; an evicted owner's row (no holds) is not its own.
  static std::string acquire_sql(const std::string& t, const std::string& seq) {
    const std::string released =
        "(owner = '' AND (doorbell <> 2 OR VALUES(doorbell) = 1 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND))";
    const std::string expired = "(owner <> '' AND expires_at <= UTC_TIMESTAMP(6))";
    const std::string take = "(" + released + " OR " + expired + ")";
    const std::string mine = "(owner = VALUES(owner) AND hold_count > 0 AND expires_at > UTC_TIMESTAMP(6))";
    const std::string claimed = "(" + mine + " AND FIND_IN_SET(session_id, ?))";
    const std::string reenters = "(" + mine + " AND ? = '')";
    const std::string heir_takes = "(" + take + " AND FIND_IN_SET(heir_session, ?))";
    // Once the owner is written: the row is this attempt's (taken, claimed or re-entered).
    const std::string ours = "(owner = VALUES(owner) AND hold_count > 0 AND (? = '' OR FIND_IN_SET(session_id, ?)))";
    return "INSERT INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at, doorbell, session_id)"
           " SELECT ?, ?, LAST_INSERT_ID(v + 1), 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,"
           " IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, 0), 0)), CONNECTION_ID()"
           " FROM " + seq + " WHERE id = 0 LOCK IN SHARE MODE"
           " ON DUPLICATE KEY UPDATE"
           " token = IF(" + take + ", LAST_INSERT_ID(token + 1), IF(" + claimed + ", LAST_INSERT_ID(token),"
           " IF(" + reenters + ", token + 0 * LAST_INSERT_ID(0), token))),"
           " hold_count = IF(" + take + ", 1, IF(" + reenters + ", hold_count + 1, hold_count)),"
           " acquired_at = IF(" + take + ", UTC_TIMESTAMP(6), acquired_at),"
           " session_id = IF(" + take + ", CONNECTION_ID(), session_id),"
           " heir_owner = IF(" + heir_takes + ", '', heir_owner),"
           " heir_session = IF(" + heir_takes + ", 0, heir_session),"
           " doorbell = IF(" + take + ", VALUES(doorbell), doorbell),"
           " owner = IF(" + take + ", VALUES(owner), owner),"
           " expires_at = IF(" + ours + ","
           " IF(hold_count > 1, GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at)), expires_at)";
  }

  std::string acquire, take, free, become_heir, heir_wait, quit_heir, handed, drop_slot, conflict, reentered, renew, release, drop_bell,
      inspect, force_release, evict, lock_floor, idle_cutoff, raise_floor, delete_idle;
};

// A waiter's side of the heir handoff (see LeaseSql), run by its doorbell channel.
class HeirTakeover final : public Takeover {
 public:
  HeirTakeover(ModeBackend& backend, const LeaseSql& sql, std::string key)
      : backend_(backend), sql_(sql), key_(std::move(key)), bell_(backend.bell_name(key_)), slot_(heir_slot(bell_)) {}

  Outcome wait(Connection& connection, std::string_view owner, std::chrono::milliseconds ttl,
               std::chrono::microseconds wait) override {
    using std::chrono::microseconds;
    if (!heir_) {
      const auto start = std::chrono::steady_clock::now();
      const auto rows = connection.query("SELECT GET_LOCK(?, ? / 1000000)", {std::string_view(slot_), wait.count()});
      if (rows.empty() || rows[0][0] != std::optional<std::string>("1")) return {};
      heir_ = true;
      registered_ = true;
      // No handover can come before the registration that follows.
      watched_since_ = std::chrono::steady_clock::now();
      wait -= std::chrono::duration_cast<microseconds>(watched_since_ - start);
      if (wait <= microseconds(0)) return {};
    }
    connection.execute(sql_.become_heir, {owner, ttl_us(ttl), std::string_view(key_), owner, std::string_view(slot_)});
    // A key handed over is timed from the sending of the heir's last look at the row that
    // found it not yet handed over, so one wait lasts at most an eighth of the TTL.
    const auto slice = std::min(wait, std::max<microseconds>(ttl / 8, std::chrono::milliseconds(1)));
    const auto sent = std::chrono::steady_clock::now();
    const auto rows = connection.query(sql_.heir_wait, {owner, owner, std::string_view(slot_), std::string_view(bell_),
                                                        std::string_view(bell_), slice.count(), std::string_view(key_)});
    const Row& row = rows.at(0);
    Outcome outcome;
    outcome.rang = row[2] == std::optional<std::string>("1");
    if (row[0] == std::optional<std::string>("1")) {
      heir_ = false;  // the statement gave up the heir slot
      const std::uint64_t token = to_u64(row[1]);
      backend_.remember(key_, owner, connection.serial(), token);
      outcome.acquired = backend::Acquired{token, 1, watched_since_};
    } else {
      watched_since_ = sent;
    }
    return outcome;
  }

  bool waiting() const noexcept override { return heir_; }
  void session_lost() noexcept override {
    heir_ = false;
    lost_session_ = true;
  }

  void finish(Connection& connection, std::string_view owner, std::string_view sessions,
              bool acquired) noexcept override {
    const bool heir = std::exchange(heir_, false);
    try {
      if (!acquired && (registered_ || lost_session_)) {
        connection.execute(sql_.quit_heir, {std::string_view(key_), sessions});
        // The key may have been handed over after the last wait, or taken by an attempt
        // whose answer was lost with its session: nobody will use it.
        const auto rows = connection.query(sql_.handed, {std::string_view(key_), owner, sessions});
        if (!rows.empty()) backend_.release(backend::LeaseRef{key_, owner, to_u64(rows[0][0])});
      }
      if (heir) connection.query(sql_.drop_slot, {std::string_view(slot_)});
    } catch (...) {
      // The server is unreachable: the session, and its slot, end with the connection; a
      // key handed over runs out with its lease.
    }
  }

 private:
  ModeBackend& backend_;
  const LeaseSql& sql_;
  std::string key_, bell_, slot_;
  bool heir_ = false;  // this session holds the heir slot and wrote itself into the row
  bool registered_ = false;    // some session of this waiting call wrote itself into the row
  bool lost_session_ = false;  // the server ended a session of this waiting call
  std::chrono::steady_clock::time_point watched_since_;  // no handover to this heir came before
};

class LeaseBackend final : public ModeBackend {
 public:
  explicit LeaseBackend(Settings settings)
      : ModeBackend(std::move(settings)), sql_(settings_.table), shared_(*this, settings_.table) {
    auto connection = take();
    ensure_lock_table(*connection);
  }

  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .holds_outlive_the_client = true,
            .records_acquisition_time = true,
            .shared_holders = true};
  }

  backend::AcquireResult attempt(const backend::AcquireRequest& request, DoorbellChannel* through) override {
    Attempt attempt = attempt_for(request, through, false);
    DoorbellChannel* channel = attempt.channel;
    if (!channel) return attempt_on(*attempt.connection, request, nullptr);
    if (auto taken = channel->claim()) return *taken;
    try {
      return attempt_on(channel->connection(), request, channel);
    } catch (const Error&) {
      if (!channel->connection().broken()) throw;
    }
    // The server ended the waiter's session (KILL, restart) before the answer came, and the
    // attempt may have taken the key: it is made again on a new session, which takes such an
    // acquisition as this call's (see LeaseSql). A waiter so outlives a KILL, as in its waits.
    channel->reconnect();
    return attempt_on(channel->connection(), request, channel);
  }

  // A shared waiter is never the heir, to whom a release hands the key exclusively.
  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    if (request.mode == LockMode::shared) return std::make_unique<DoorbellChannel>(*this, request);
    return std::make_unique<DoorbellChannel>(*this, request,
                                             std::make_unique<HeirTakeover>(*this, sql_, std::string(request.key)));
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    auto connection = take();
    if (remembered_shared(lease.key, lease.owner, lease.token)) return shared_.renew(*connection, lease, ttl);
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew,
                                 {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    return outcome.affected == 1 || shared_.renew(*connection, lease, ttl);
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    const std::string slot = heir_slot(bell);
    auto connection = take_for(lease.key, lease.owner, lease.token);
    const bool on_holder = remembered(lease.key, lease.owner, lease.token) == connection->serial();
    const auto token = static_cast<std::int64_t>(lease.token);
    // A shared hold this client took skips the exclusive statements, which would find it not theirs.
    const bool known_shared = remembered_shared(lease.key, lease.owner, lease.token);
    if (!known_shared && with_retries(lease.key, [&] {
          return connection->execute(sql_.free, {bell, lease.key, lease.owner, token});
        }).affected == 1) {
      forget(lease.key, lease.owner, lease.token);
      return 0u;
    }
    const auto outcome = known_shared ? Outcome{} : with_retries(lease.key, [&] {
      return connection->execute(sql_.release,
                                 {slot, bell, bell, lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    const bool evicted = outcome.affected == 1 && outcome.insert_id == kEvictedRelease;
    if (outcome.affected == 1 && outcome.insert_id > 0 && !evicted) return static_cast<std::uint32_t>(outcome.insert_id);
    if (outcome.affected != 1) {
      if (const auto shared = shared_.release(*connection, lease); shared.found) {
        if (shared.left.value_or(0) == 0) forget(lease.key, lease.owner, lease.token);
        return shared.left;
      }
    }
    forget(lease.key, lease.owner, lease.token);
    if (evicted) return std::nullopt;  // freed, and rang, as its last release
    if (outcome.affected == 1) return 0u;
    // Lost: a doorbell, or a shared holder's lock, its session still holds for it would keep
    // waiters asleep (any other connection's doorbell is a newer acquisition's, and so is this
    // one's when it keeps the key's bell for another exclusive lock).
    if (on_holder) {
      if (!keeps_doorbell(lease.key, *connection)) {
        with_retries(lease.key, [&] { return connection->query(sql_.drop_bell, {bell, bell}); });
      }
      shared_.drop_holder_lock(*connection, lease);
    }
    return std::nullopt;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    auto connection = take();
    auto holders = inspect_on(*connection, key, sql_.inspect);
    return holders.empty() ? shared_.holders(*connection, key) : holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return list_page(prefix, after, limit, shared_.list_bounded(), shared_.list_open(), {}, 6);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    if (auto shared = shared_.force_release(*take(), key, eviction, token)) return *shared;
    return evict(key, token, sql_.inspect, eviction == Eviction::delayed ? sql_.evict : sql_.force_release);
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] {
      // The floor is locked first, as every acquire's read of it is, so the two never
      // deadlock; a key deleted here starts again above the floor.
      return in_transaction(*connection, [&] {
        connection->query(sql_.lock_floor, {});
        const auto cutoff = connection->query(sql_.idle_cutoff, {});
        const std::string at = cutoff.at(0).at(0).value_or("");
        connection->execute(sql_.raise_floor, {std::string_view(at)});
        shared_.remove_idle(*connection, at);
        return static_cast<std::size_t>(connection->execute(sql_.delete_idle, {std::string_view(at)}).affected);
      });
    });
  }

 private:
  // One attempt on `connection`: through a waiting call's `channel`, or not.
  backend::AcquireResult attempt_on(Connection& connection, const backend::AcquireRequest& request,
                                    DoorbellChannel* channel) {
    if (request.mode == LockMode::shared) {
      auto result = shared_.acquire(connection, request);
      // The holder's lock stays with this connection's session (lease_shared.hpp).
      if (const auto* acquired = std::get_if<backend::Acquired>(&result); acquired && acquired->hold_count == 1) {
        remember(request.key, request.owner, connection.serial(), acquired->token, LockMode::shared);
      }
      return result;
    }
    const std::string bell = bell_name(request.key);
    const std::string_view sessions = channel ? channel->sessions() : std::string_view();
    const std::int64_t ttl = ttl_us(request.ttl);
    const std::int64_t kept = keeps_doorbell(request.key, connection) ? 1 : 0;
    const auto conflict = [&] {
      return with_retries(request.key, [&] { return connection.query(sql_.conflict, {kept, bell, bell, request.key}); });
    };
    if (!channel) {
      const auto taken = with_retries(request.key, [&] {
        return connection.execute(sql_.take, {bell, bell, request.owner, ttl, request.key, bell, bell});
      });
      if (taken.affected == 1) {
        remember(request.key, request.owner, connection.serial(), taken.insert_id);
        return backend::Acquired{taken.insert_id, 1};
      }
      // Not taken: held by another owner, the usual reason, answers now; anything else
      // (no row, a re-entry, a takeover under way) goes to `acquire`.
      const auto rows = conflict();
      if (!rows.empty()) {
        LockInfo holder = info(std::string(request.key), rows[0], 0);
        if (!holder.owner.empty() && holder.owner != request.owner && holder.ttl_left.count() > 0) {
          return refused(connection, request, std::move(holder));
        }
      }
    }
    const auto outcome = with_retries(request.key, [&] {
      return connection.execute(sql_.acquire,
                                {request.key, request.owner, ttl, bell, bell, sessions, sessions, sessions, sessions,
                                 sessions, sessions, sessions});
    });
    if (auto acquired = settle(outcome, connection, request.key, request.owner)) {
      if (channel) {
        channel->bell_settled();
        channel->acquired();
      }
      return *acquired;
    }
    // Unchanged: someone else holds it. Report who, and give back a doorbell taken for nothing.
    const auto rows = conflict();
    if (channel) channel->bell_settled();
    if (rows.empty()) throw BackendError("acquire of '" + std::string(request.key) + "' found no row", kName);
    const Row& row = rows[0];
    LockInfo holder = info(std::string(request.key), row, 0);
    // Free, but a woken waiter holds the doorbell and is taking it over right now.
    if (holder.owner.empty()) return backend::Busy{{}, kHandoffRecheck};
    return refused(connection, request, std::move(holder));
  }

  // An exclusive request refused by the key's holder: a waiting writer looks again within half
  // a writer's claim, which it places when shared holders refused it.
  backend::Busy refused(Connection& connection, const backend::AcquireRequest& request, LockInfo holder) {
    if (holder.owner == kSharedOwner) return shared_.writer_refused(connection, request, holder.token);
    auto left = holder.ttl_left;
    if (request.waiting) left = std::min<std::chrono::milliseconds>(left, backend::kWriterClaim / 2);
    return backend::Busy{{std::move(holder)}, left};
  }

  // The acquisition an acquire statement made, if any, read from its affected rows.
  std::optional<backend::Acquired> settle(const Outcome& outcome, Connection& connection, std::string_view key,
                                          std::string_view owner) {
    if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
      // A fresh row (its token is the floor plus one), a takeover (the token plus one), or a
      // claim of the waiting call's own acquisition (its token).
      remember(key, owner, connection.serial(), outcome.insert_id);
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected != 2) return std::nullopt;
    // A re-entry: it answers insert id 0 and is read back.
    const auto rows = with_retries(key, [&] { return connection.query(sql_.reentered, {key, owner}); });
    if (rows.empty()) throw BackendError("a re-entry of '" + std::string(key) + "' left no row", kName);
    return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
  }

  LeaseSql sql_;
  LeaseShared shared_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings) {
  return std::make_shared<LeaseBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
