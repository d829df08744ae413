// mysql:// lease mode's statements (lease_sql.hpp).

#include "backends/mysql/lease_sql.hpp"

#include "backends/mysql/common.hpp"
#include "backends/mysql/shared_holds.hpp"

namespace dlock::backends::mysql {

LeaseSql::LeaseSql(const std::string& table) {
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
  // A live readers' claim (lease_shared.hpp) keeps every new writer out. Parameters: bell,
  // bell, owner, ttl, key, bell, bell.
  const std::string rung = "(owner = '' AND doorbell = 2 AND expires_at > UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)";
  take = "UPDATE " + t + " SET token = LAST_INSERT_ID(token + 1), hold_count = 1, acquired_at = UTC_TIMESTAMP(6),"
         " session_id = CONNECTION_ID(), doorbell = IF(" + rung + " OR IS_USED_LOCK(?) <=> CONNECTION_ID(), 1,"
         " COALESCE(GET_LOCK(?, 0), 0)),"
         " owner = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
         " WHERE name = ? AND heir_owner = '' AND readers_until <= UTC_TIMESTAMP(6) AND ((owner = '' AND (doorbell <> 2 OR"
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
  // release counts as its last hold's). The last hold hands the key to a live heir, unless
  // readers claimed it (a new token, the heir's TTL, one hold, session_id the heir's session) or frees the row,
  // and rings the doorbell when this session holds it. Columns
  // are assigned left to right and later ones see the new values: after the first,
  // `hold_count <= 1 AND owner <> ''` means "handed over". The heir's lease runs from
  // SYSDATE(6), read once the row is locked: after the heir's last look at the row, from
  // whose sending the heir times it (UTC_TIMESTAMP(6) is the statement's start, which a
  // lock wait can put before that). Parameters: slot, bell, bell, key, owner, token.
  const std::string handed_over = "(hold_count <= 1 AND owner <> '')";
  release = "UPDATE " + t + " SET owner = IF(hold_count <= 1,"
            " IF(heir_owner <> '' AND heir_owner <> owner AND IS_USED_LOCK(?) <=> heir_session"
            " AND readers_until <= UTC_TIMESTAMP(6), heir_owner, ''), owner),"
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

std::string LeaseSql::acquire_sql(const std::string& t, const std::string& seq) {
  const std::string released =
      "(owner = '' AND (doorbell <> 2 OR VALUES(doorbell) = 1 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND))";
  const std::string expired = "(owner <> '' AND expires_at <= UTC_TIMESTAMP(6))";
  const std::string take = "((" + released + " OR " + expired + ") AND readers_until <= UTC_TIMESTAMP(6))";
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

}  // namespace dlock::backends::mysql
