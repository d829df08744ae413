#pragma once

// mysql:// lease mode's statements (lease_mode.cpp), built once per client for its table.

#include <string>

namespace dlock::backends::mysql {

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
  explicit LeaseSql(const std::string& table);

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
  static std::string acquire_sql(const std::string& t, const std::string& seq);

  std::string acquire, take, free, become_heir, heir_wait, quit_heir, handed, drop_slot, conflict, reentered, renew, release, drop_bell,
      inspect, force_release, evict, lock_floor, idle_cutoff, raise_floor, delete_idle;
};

}  // namespace dlock::backends::mysql
