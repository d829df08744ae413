// mysql:// session mode's statements (session_sql.hpp).

#include "backends/mysql/session_sql.hpp"

#include <cstdint>

#include "backends/mysql/common.hpp"
#include "backends/mysql/session_shared.hpp"

namespace dlock::backends::mysql {
namespace {

// What a holder whose renewals are overdue reports as its time left: its lock lasts as long
// as its connection, so waiters look again now and then (the doorbell wakes them earlier).
constexpr std::int64_t kOverdueRecheckUs = 1'000'000;

}  // namespace

SessionSql::SessionSql(const std::string& table, bool lock_delay) {
  const std::string t = "`" + table + "_session`";
  const std::string floor = "`" + table + "_epoch`";
  const std::string now = "UTC_TIMESTAMP(6)";
  // The lock_delay option, as a constant of the statements (their parameters stay the same).
  const std::string delay = lock_delay ? "1" : "0";
  // The key is held shared (session_shared.hpp). Parameters: bell, key, bell.
  const std::string held_shared = SessionShared::held_sql(table, lock_delay);
  // The row is ours to re-enter only when this connection held the lock before this
  // statement (the parameter, from the client's own records): connection ids repeat after
  // a server restart, so a row naming this id may be a dead session's.
  const std::string mine = "(? AND owner = VALUES(owner) AND session_id = CONNECTION_ID() AND hold_count > 0)";
  // Waiting readers' claim on the row's token (backend.hpp), which refuses new writers.
  const std::string readers_first = "readers_until > " + now;
  // Nobody but its holder re-entering (`mine`, never an evicted one) takes the row before it
  // expires: its holder was evicted with a lock delay, or, with lock_delay, its holder's
  // session ended without releasing it (this session holds the key's GET_LOCK, so a holder
  // that is not this session is gone); nor while readers have claimed it.
  const std::string closed = "(NOT " + mine + " AND ((owner <> '' AND expires_at > " + now + " AND (hold_count = 0 OR " +
                             delay + ")) OR " + readers_first + "))";
  // The common case in one plain statement (a memory table's statements cost about as much
  // as their expressions): a new acquisition of a key with a row, free, expired or its holder
  // gone, once this session holds the key's GET_LOCK, taking it if free. Anything else (no
  // row, a re-entry, a closed row, another holder) is left to `acquire`; a key held shared is
  // taken by no exclusive statement, nor one readers have claimed, whose GET_LOCK goes to
  // them, nor one a shared step is looking at: a reader that finds this writer places its
  // claim in a statement after its look, and the writer must not let go and take the key back
  // in between (it would go ahead of the reader as often as it cycles in that time).
  // Parameters: owner, ttl, key, bell, bell, bell, bell, key, bell.
  take = "UPDATE " + t + " SET token = LAST_INSERT_ID(token + 1), hold_count = 1, owner = ?, session_id = CONNECTION_ID(),"
         " acquired_at = " + now + ", expires_at = " + now + " + INTERVAL ? MICROSECOND, renewals = renewals + 1"
         " WHERE name = ? AND NOT " + readers_first + " AND NOT " + SessionShared::stepping_sql() +
         " AND (IS_USED_LOCK(?) <=> CONNECTION_ID() OR GET_LOCK(?, 0) = 1)"
         " AND NOT (owner <> '' AND expires_at > " + now + " AND (hold_count = 0 OR " + delay + "))"
         " AND NOT " + held_shared;
  // The SELECT yields a row only when this session holds the key's GET_LOCK, taking it if
  // free; then whatever the row says is stale unless it is ours or closed. Columns are
  // assigned left to right: `owner` after everything that tests the old owner; after the hold
  // count, `closed` still holds for a closed row only, and more than one hold means a
  // re-entry, whose lease never shortens.
  // Parameters: key, owner, ttl, bell, bell, bell, key, bell, then `known` 10 times.
  acquire = "INSERT INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at, session_id)"
            " SELECT ?, ?, LAST_INSERT_ID(v + 1), 1, " + now + ", " + now + " + INTERVAL ? MICROSECOND, CONNECTION_ID()"
            " FROM " + floor + " WHERE id = 0 AND (IS_USED_LOCK(?) <=> CONNECTION_ID() OR GET_LOCK(?, 0) = 1)"
            " AND NOT " + SessionShared::busy_sql(table, lock_delay) +
            " ON DUPLICATE KEY UPDATE"
            " token = IF(" + closed + ", token, IF(" + mine + ", token + 0 * LAST_INSERT_ID(0), LAST_INSERT_ID(token + 1))),"
            " hold_count = IF(" + closed + ", hold_count, IF(" + mine + ", hold_count + 1, 1)),"
            " acquired_at = IF(" + closed + " OR " + mine + ", acquired_at, VALUES(acquired_at)),"
            " owner = IF(" + closed + ", owner, VALUES(owner)),"
            " session_id = IF(" + closed + ", session_id, CONNECTION_ID()),"
            " expires_at = IF(" + closed + ", expires_at,"
            " IF(hold_count > 1, GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at))),"
            " renewals = IF(" + closed + ", renewals, renewals + 1)";
  reentered = "SELECT token, hold_count FROM " + t + " WHERE name = ? AND owner = ?";
  const std::string live = " AND hold_count > 0 AND session_id = IS_USED_LOCK(?)";
  // A live holder, or one whose lease has not run out: evicted with a lock delay, or with
  // lock_delay, gone without releasing.
  const std::string held = " AND ((hold_count > 0 AND session_id = IS_USED_LOCK(?)) OR ((hold_count = 0 OR " + delay +
                           ") AND expires_at > " + now + "))";
  // Held by a session that ended (the key's GET_LOCK is not its). Parameter: bell.
  const std::string gone = "(hold_count > 0 AND NOT (session_id <=> IS_USED_LOCK(?)))";
  const std::string left = "IF(expires_at > " + now + ", TIMESTAMPDIFF(MICROSECOND, " + now + ", expires_at), " +
                           std::to_string(kOverdueRecheckUs) + ")";
  const std::string info = "owner, token, hold_count, " + left + ", TIMESTAMPDIFF(MICROSECOND, acquired_at, " + now + ")";
  // Parameters: bell, bell, bell, key, bell, bell, key. The last columns say whether the row's
  // session holds the lock, whether the row is closed (as `closed`; the acquire found it not
  // this session's to re-enter; or held shared), whether this session holds the lock, the
  // row's session, and a readers' claim's microseconds left (NULL for none).
  conflict = "SELECT " + info + ", session_id = IS_USED_LOCK(?), ((owner <> '' AND expires_at > " + now +
             " AND (hold_count = 0 OR (" + delay + " AND " + gone + "))) OR " + held_shared +
             "), IS_USED_LOCK(?) <=> CONNECTION_ID(), session_id, IF(" + readers_first +
             ", TIMESTAMPDIFF(MICROSECOND, " + now + ", readers_until), NULL) FROM " + t + " WHERE name = ?";
  // Another connection of the same owner holds it (an explicit owner shared by clients).
  // The new hold count comes back as the insert id. Parameters: ttl, key, owner, token, bell.
  reenter_elsewhere = "UPDATE " + t + " SET hold_count = LAST_INSERT_ID(hold_count + 1), expires_at = GREATEST(expires_at, " +
                      now + " + INTERVAL ? MICROSECOND) WHERE name = ? AND owner = ? AND token = ?" + live;
  const std::string ours = " WHERE name = ? AND owner = ? AND token = ?" + live;
  // Parameters: ttl, key, owner, token, bell.
  renew = "UPDATE " + t + " SET expires_at = " + now + " + INTERVAL ? MICROSECOND, renewals = renewals + 1" + ours;
  // The common release in one plain statement: the last hold, on the holder's own connection,
  // which frees the lock. Anything else is left to `release`. Parameters: bell, key, owner,
  // token, bell.
  free = "UPDATE " + t + " SET owner = '', expires_at = " + now + ", hold_count = 0, session_id = 0 * RELEASE_LOCK(?)"
         " WHERE name = ? AND owner = ? AND token = ? AND hold_count = 1 AND session_id = CONNECTION_ID()"
         " AND IS_USED_LOCK(?) <=> CONNECTION_ID()";
  // The last hold frees the row, and the lock with it when this connection holds it. The
  // holds left come back as the insert id: kEvictedRelease for an evicted holder, whose
  // release counts as its last hold's, and for one whose session ended (held only with
  // lock_delay), whose release ends the delay. Its hold count goes before the session:
  // `gone` reads the session, which a release of the lock changes. Parameters: bell, bell,
  // bell, bell, bell, key, owner, token, bell.
  release = "UPDATE " + t + " SET owner = IF(hold_count <= 1 OR " + gone + ", '', owner),"
            " expires_at = IF(hold_count <= 1 OR " + gone + ", " + now + ", expires_at),"
            " hold_count = IF(hold_count = 0 OR " + gone + ", 0 * LAST_INSERT_ID(" + std::to_string(kEvictedRelease) +
            "), LAST_INSERT_ID(hold_count - 1)),"
            " session_id = IF(hold_count = 0 AND session_id = CONNECTION_ID() AND IS_USED_LOCK(?) <=> CONNECTION_ID(),"
            " 0 * RELEASE_LOCK(?), session_id) WHERE name = ? AND owner = ? AND token = ?" + held;
  drop_bell = "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)";
  // The lock of an acquisition whose release came too late (evicted, then its lease ran
  // out), which this connection still holds: not a newer one's. Parameters: bell, key,
  // owner, token, bell.
  drop_expired = "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID() AND EXISTS (SELECT 1 FROM " + t +
                 " WHERE name = ? AND owner = ? AND token = ? AND session_id = CONNECTION_ID()), RELEASE_LOCK(?), 0)";
  // Parameters: key, bell.
  inspect = "SELECT " + info + " FROM " + t + " WHERE name = ? AND owner <> ''" + held;
  // `list` (SessionShared's) checks a session per row through its lock, which only the
  // client can name: the query returns the session and the client asks the server about each
  // lock (not for an evicted holder, whose lease alone counts).
  session_of = "SELECT IS_USED_LOCK(?)";
  // Parameters of both: key, owner, token, bell. A lock delay keeps all but the holds
  // (renewals changes the row of a holder evicted before), and the holder's connection.
  force_release = "UPDATE " + t + " SET owner = '', hold_count = 0, expires_at = " + now +
                  " WHERE name = ? AND owner = ? AND token = ?" + held;
  evict = "UPDATE " + t + " SET hold_count = 0, renewals = renewals + 1 WHERE name = ? AND owner = ? AND token = ?" + held;
  // The session still holding the lock of a freed row. Parameters: key, token, bell.
  orphaned = "SELECT session_id FROM " + t +
             " WHERE name = ? AND token = ? AND owner = '' AND session_id <> 0 AND session_id = IS_USED_LOCK(?)";
  settle = "UPDATE " + t + " SET session_id = 0 WHERE name = ? AND token = ? AND owner = ''";
  // Rows of live sessions keep an owner; a row whose session died keeps its owner too until
  // the next acquire takes it over, so only released rows are removed, and only those at or
  // below the floor once it is raised: one taken and released again in between has a token
  // above it and stays, as does one readers have claimed. (Memory tables have no
  // transactions to make the two one.)
  raise_floor = "UPDATE " + floor + " SET v = GREATEST(v, (SELECT COALESCE(MAX(token), 0) FROM " + t +
                " WHERE owner = '')) WHERE id = 0";
  delete_idle = "DELETE FROM " + t + " WHERE owner = '' AND NOT " + readers_first + " AND token <= (SELECT v FROM " +
                floor + " WHERE id = 0)";
  has_floor = "SELECT 1 FROM " + floor + " WHERE id = 0";
  // The epoch: raised, durably, once per server run. Its insert id is the new epoch.
  raise_epoch = "INSERT INTO `" + table + "_seq` (id, v) VALUES (1, LAST_INSERT_ID(1))"
                " ON DUPLICATE KEY UPDATE v = LAST_INSERT_ID(v + 1)";
  // Parameter: the epoch's first token.
  start_floor = "INSERT IGNORE INTO " + floor + " (id, v) VALUES (0, ?)";
}

}  // namespace dlock::backends::mysql
