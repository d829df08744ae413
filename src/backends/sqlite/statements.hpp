#pragma once

// The SQL of sqlite://: the schema and every statement the backend caches on a connection
// (Connection's `statements`, indexed by Sql). One place for the on-disk format.

#include <algorithm>
#include <array>
#include <cstddef>

namespace dlock::backends::sqlite::statements {

inline constexpr long long kSchemaVersion = 3;

// Tables, the token floor and its trigger. Idempotent; run inside BEGIN IMMEDIATE.
// A key's row carries its last token and a takeover adds one; a deleted row's token is kept
// in dlock_seq, the floor for the next row of any key, so deleting idle rows cannot repeat a
// token. Only DELETE has a trigger: acquire and release, the hot statements, fire none.
// Version 1 raised dlock_seq on every insert and update; its triggers are dropped. Version 3
// added readers_until (kReadersUntilColumn adds it to the files of versions 1 and 2).
inline constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS dlock_meta(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_locks(
  name TEXT PRIMARY KEY,
  owner TEXT NOT NULL,            -- '' when free
  token INTEGER NOT NULL,         -- fencing token of the current or last acquisition
  hold_count INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,    -- microseconds of CLOCK_BOOTTIME (dlock_now_us())
  acquired_at INTEGER NOT NULL,
  readers_until INTEGER NOT NULL DEFAULT 0  -- the readers' claim (kTakeOrReenter), 0: none
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_seq(id INTEGER PRIMARY KEY CHECK (id = 0), v INTEGER NOT NULL);
INSERT OR IGNORE INTO dlock_seq VALUES (0, 0);
DROP TRIGGER IF EXISTS dlock_seq_after_insert;
DROP TRIGGER IF EXISTS dlock_seq_after_update;
CREATE TRIGGER IF NOT EXISTS dlock_seq_after_delete AFTER DELETE ON dlock_locks
BEGIN UPDATE dlock_seq SET v = max(v, OLD.token) WHERE id = 0; END;
INSERT OR IGNORE INTO dlock_meta VALUES ('schema_version', 3);
UPDATE dlock_meta SET v = 3 WHERE k = 'schema_version' AND v < 3;
)sql";

// The upgrade of a file of version 1 or 2, in kSchema's transaction. Builds of version 2 are
// kept off such a file: they would neither honour a readers' claim nor end one at a reboot.
inline constexpr const char* kReadersUntilColumn =
    "ALTER TABLE dlock_locks ADD COLUMN readers_until INTEGER NOT NULL DEFAULT 0";

// The rules of one acquire, for one key (kAcquire) or each key of a set (kAcquireSet), as the
// upsert of a row (name, owner, token floor + 1, 1, now + ttl, now): a free row (owner '' or
// expired) goes to the caller with its token plus one, unless a readers' claim stands
// (readers_until > now); the live owner re-enters unless it was evicted (hold_count 0), and its
// lease ends at the later of its end and now + ttl; anyone else leaves it unchanged. SET
// expressions see the old row. The readers' claim lives on the key's own row, so that no
// acquire pays for it: readers that an exclusive holder refused place it (kReadersClaim), on
// that holder's token; the key's next grant is a reader's, which ends it (kMarkShared).
inline constexpr char kTakeOrReenter[] = R"sql(
ON CONFLICT(name) DO UPDATE SET
  owner = CASE WHEN (owner = '' OR expires_at <= excluded.acquired_at) AND readers_until <= excluded.acquired_at
               THEN excluded.owner ELSE owner END,
  token = CASE WHEN (owner = '' OR expires_at <= excluded.acquired_at) AND readers_until <= excluded.acquired_at
               THEN token + 1 ELSE token END,
  hold_count = CASE WHEN (owner = '' OR expires_at <= excluded.acquired_at) AND readers_until <= excluded.acquired_at
                    THEN 1
                    WHEN owner = excluded.owner AND hold_count > 0 AND expires_at > excluded.acquired_at
                    THEN hold_count + 1 ELSE hold_count END,
  expires_at = CASE WHEN (owner = '' OR expires_at <= excluded.acquired_at) AND readers_until <= excluded.acquired_at
                    THEN excluded.expires_at
                    WHEN owner = excluded.owner AND hold_count > 0 AND expires_at > excluded.acquired_at
                    THEN max(expires_at, excluded.expires_at) ELSE expires_at END,
  acquired_at = CASE WHEN (owner = '' OR expires_at <= excluded.acquired_at) AND readers_until <= excluded.acquired_at
                     THEN excluded.acquired_at ELSE acquired_at END)sql";

// One release, of one key (kRelease) or each key of a set (kReleaseSet): drops one hold; the
// last one frees the row (kept, for its token history).
inline constexpr char kDropHold[] = R"sql(
UPDATE dlock_locks SET hold_count = hold_count - 1,
  owner = CASE WHEN hold_count > 1 THEN owner ELSE '' END,
  expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE 0 END)sql";

// The text of `parts` one after another, for the statements that share a clause above.
template <std::size_t... N>
constexpr auto join(const char (&... parts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> text{};
  std::size_t at = 0;
  ((std::copy_n(parts, N - 1, text.begin() + at), at += N - 1), ...);
  return text;
}

// Every statement reads the clock once through the MATERIALIZED CTE t(now), so its checks
// and the values it stores agree on one instant (dlock_now_us() is not deterministic, and a
// plain call would be evaluated once per use); the set statements read it otherwise, below.

// acquire: one UPSERT. A new row takes the token after the floor. The DO UPDATE always fires so
// RETURNING reports the holder too.
inline constexpr auto kAcquireText = join(R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
INSERT INTO dlock_locks(name, owner, token, hold_count, expires_at, acquired_at)
SELECT ?1, ?2, (SELECT v FROM dlock_seq WHERE id = 0) + 1, 1, t.now + ?3, t.now FROM t WHERE true)sql",
                                          kTakeOrReenter, R"sql(
RETURNING owner, token, hold_count, expires_at - (SELECT now FROM t), (SELECT now FROM t) - acquired_at,
  readers_until - (SELECT now FROM t))sql");

// release: a live hold of the lease.
inline constexpr auto kReleaseText = join(R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us()))sql", kDropHold, R"sql(
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND hold_count > 0 AND expires_at > (SELECT now FROM t)
RETURNING hold_count)sql");

// The set statements take the keys as one JSON object, ?1 = {key: number, ...}, and their
// owner, ?2 (lock_sets.cpp).
//
// acquire_set, inside a transaction: the numbers are the TTLs in µs. Each key is upserted by
// the rules of one acquire; RETURNING reports every row, so a busy key's holder too, and the
// caller rolls the set back unless every key is the owner's (rows.hpp's busy_row reads a busy
// one, as for kAcquire). ?3 is now: dlock_now_us() read by the caller once the transaction
// holds the write lock, the instant the CTE would read. Bound, it spares the statement the
// CTE's temporary table and each row three lookups of it (about a sixth of a 4-key set's
// statement time).
inline constexpr auto kAcquireSetText = join(R"sql(INSERT INTO dlock_locks(name, owner, token, hold_count, expires_at, acquired_at)
SELECT j.key, ?2, (SELECT v FROM dlock_seq WHERE id = 0) + 1, 1, ?3 + j.value, ?3 FROM json_each(?1) j
WHERE true)sql",
                                             kTakeOrReenter, R"sql(
RETURNING name, owner, token, hold_count, expires_at - ?3, ?3 - acquired_at, readers_until - ?3)sql");

// release_set: the numbers are the tokens. Drops a hold of each lease that is a live hold, as
// kRelease does, and returns those; the others take release()'s other paths. Each row reads the
// clock as it is checked, under the statement's write lock: nothing stored depends on it, so the
// rows need not agree on one instant, and the statement needs no CTE (a temporary table).
inline constexpr auto kReleaseSetText = join(kDropHold, R"sql(
FROM json_each(?1) j
WHERE name = j.key AND owner = ?2 AND token = j.value AND hold_count > 0 AND expires_at > dlock_now_us()
RETURNING name, hold_count)sql");

enum Sql : std::size_t {
  kAcquire, kRenew, kRelease, kReleaseEvicted, kAcquireSet, kReleaseSet, kInspect, kList, kForceRelease, kEvict,
  kRecordEviction, kEvictedSince, kCollectIdle, kPing, kAddActivity, kActivity, kBegin, kCommit, kRollback,
  // Shared holds (shared_holds.cpp), on the tables of kSharedSchema. The caller reads the
  // clock once (kNow) and binds it, so a transaction's statements agree on one instant.
  kNow, kKeyRow, kSeq, kSharedPrune, kSharedHolders, kSharedMode, kSharedReenter, kExclusiveReenter, kSharedInsert,
  kMarkShared, kSharedSettle, kSharedPermits, kClaim, kCarryClaim, kReadersClaim, kSharedRenew, kMarkerExtend, kSharedFind,
  kSharedDecrement, kSharedDelete, kSharedEvict, kSharedCollect, kSqlCount
};

inline constexpr std::array<const char*, kSqlCount> kSql = {
    kAcquireText.data(),
    // renew: never resurrects an expired or evicted lease.
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
UPDATE dlock_locks SET expires_at = (SELECT now FROM t) + ?4
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND hold_count > 0 AND expires_at > (SELECT now FROM t)
RETURNING 1)sql",
    kReleaseText.data(),
    // release of an evicted holder: it acknowledges its loss, and the key is free.
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
UPDATE dlock_locks SET owner = '', expires_at = 0
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND hold_count = 0 AND expires_at > (SELECT now FROM t)
RETURNING 1)sql",
    kAcquireSetText.data(),
    kReleaseSetText.data(),
    // inspect: the holder; with ?2, only if it holds that token (force_release's filter).
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
SELECT owner, token, hold_count, expires_at - t.now, t.now - acquired_at FROM dlock_locks, t
WHERE name = ?1 AND owner <> '' AND expires_at > t.now AND token = coalesce(?2, token))sql",
    // list: ?1 is the lower bound (prefix or after), ?2 the `after` key itself (exclusive),
    // ?3 the first string past the prefix (a BLOB, which sorts after all text, when none).
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
SELECT name, owner, token, hold_count, expires_at - t.now, t.now - acquired_at FROM dlock_locks, t
WHERE name >= ?1 AND name < ?3 AND name <> ?2 AND owner <> '' AND expires_at > t.now
ORDER BY name LIMIT ?4)sql",
    // force_release, immediate: deletes the row (with ?2, only the holder of that token).
    // DELETE ... RETURNING reports the evicted holder in one statement, and the trigger keeps
    // its token as the floor for the key's next row.
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
DELETE FROM dlock_locks WHERE name = ?1 AND owner <> '' AND expires_at > (SELECT now FROM t)
  AND token = coalesce(?2, token)
RETURNING owner, token, hold_count, expires_at - (SELECT now FROM t), (SELECT now FROM t) - acquired_at)sql",
    // force_release, delayed (after kInspect found the holder, in the same transaction): the
    // holder stays with its token and expiry, and hold_count 0 marks it evicted.
    "UPDATE dlock_locks SET hold_count = 0 WHERE name = ?1",
    // Every force-release, for the watchers of other clients (the trigger keeps the last 256).
    "INSERT INTO dlock_evictions(name, at) VALUES (?1, dlock_now_us())",
    // The force-releases since a watcher's last look (?1) and since it started (?2).
    "SELECT seq, name FROM dlock_evictions WHERE seq > ?1 AND at >= ?2 ORDER BY seq",
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
DELETE FROM dlock_locks
WHERE (owner = '' OR expires_at <= (SELECT now FROM t)) AND readers_until <= (SELECT now FROM t))sql",
    // ping: a read transaction and one B-tree lookup, the cheapest access to the file.
    "SELECT v FROM dlock_seq WHERE id = 0",
    // add_activity: one row of totals, added to; written every few seconds per busy client.
    R"sql(INSERT INTO dlock_activity VALUES (0, ?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET
  acquisitions = acquisitions + excluded.acquisitions, conflicts = conflicts + excluded.conflicts,
  waits = waits + excluded.waits, wait_us = wait_us + excluded.wait_us,
  renewals = renewals + excluded.renewals, losses = losses + excluded.losses)sql",
    "SELECT acquisitions, conflicts, waits, wait_us, renewals, losses FROM dlock_activity WHERE id = 0",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SELECT dlock_now_us()",
    "SELECT owner, token, hold_count, expires_at, acquired_at FROM dlock_locks WHERE name = ?1",
    "SELECT v FROM dlock_seq WHERE id = 0",
    "DELETE FROM dlock_shared WHERE name = ?1 AND expires_at <= ?2",
    // The live shared holders, with ?3 only the one of that token; ?2 is now.
    R"sql(SELECT owner, token, hold_count, expires_at - ?2, ?2 - acquired_at FROM dlock_shared
WHERE name = ?1 AND expires_at > ?2 AND token = coalesce(?3, token) ORDER BY token)sql",
    "SELECT permits, claim_until, claim_token FROM dlock_modes WHERE name = ?1",
    // Re-entries: ?3 now, ?4 now + ttl; a lease never shortens.
    R"sql(UPDATE dlock_shared SET hold_count = hold_count + 1, expires_at = max(expires_at, ?4)
WHERE name = ?1 AND owner = ?2 AND hold_count > 0 AND expires_at > ?3 RETURNING token, hold_count)sql",
    R"sql(UPDATE dlock_locks SET hold_count = hold_count + 1, expires_at = max(expires_at, ?4)
WHERE name = ?1 AND owner = ?2 AND hold_count > 0 AND expires_at > ?3 RETURNING token, hold_count)sql",
    "INSERT INTO dlock_shared VALUES (?1, ?2, ?3, 1, ?4, ?5)",
    // The key's row while it has shared holders: the marker owner (a space makes it no valid
    // owner), the last token, and an expiry no earlier than any shared holder's, so the
    // exclusive acquire (kAcquire) sees the key held until the last of them is gone. A grant,
    // it ends the readers' claim.
    R"sql(INSERT INTO dlock_locks(name, owner, token, hold_count, expires_at, acquired_at)
VALUES (?1, ' shared', ?2, 1, ?3, ?4) ON CONFLICT(name) DO UPDATE SET
  owner = excluded.owner, token = excluded.token, hold_count = 1, expires_at = excluded.expires_at, readers_until = 0,
  acquired_at = CASE WHEN owner = excluded.owner AND expires_at > excluded.acquired_at THEN acquired_at
                     ELSE excluded.acquired_at END)sql",
    // After a shared hold ends: the marker's expiry is the latest left, or the key is free.
    R"sql(UPDATE dlock_locks SET
  owner = CASE WHEN EXISTS (SELECT 1 FROM dlock_shared WHERE name = ?1 AND expires_at > ?2) THEN owner ELSE '' END,
  expires_at = coalesce((SELECT max(expires_at) FROM dlock_shared WHERE name = ?1 AND expires_at > ?2), 0)
WHERE name = ?1 AND owner = ' shared')sql",
    R"sql(INSERT INTO dlock_modes VALUES (?1, ?2, 0, 0) ON CONFLICT(name) DO UPDATE SET permits = excluded.permits)sql",
    // A waiting writer's claim (?2: its length in µs), valid while the key's token stays the
    // one it saw, or a reader that passed it carried it on (kCarryClaim): the next other
    // acquisition can only be a writer's, which serves the claim.
    R"sql(INSERT INTO dlock_modes SELECT ?1, 0, dlock_now_us() + ?2, token FROM dlock_locks WHERE name = ?1 AND true
ON CONFLICT(name) DO UPDATE SET claim_until = excluded.claim_until, claim_token = excluded.claim_token)sql",
    // A reader that waited behind a writer entered past a writer's claim on token ?3: the claim
    // moves to the reader's token ?2, so that only a writer's grant ends it.
    "UPDATE dlock_modes SET claim_token = ?2 WHERE name = ?1 AND claim_token = ?3",
    // Readers waiting for the exclusive holder of the key's row (?2: the claim's end).
    "UPDATE dlock_locks SET readers_until = ?2 WHERE name = ?1",
    // ?4 now + ttl, ?5 now.
    R"sql(UPDATE dlock_shared SET expires_at = ?4
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND hold_count > 0 AND expires_at > ?5 RETURNING 1)sql",
    "UPDATE dlock_locks SET expires_at = max(expires_at, ?2) WHERE name = ?1 AND owner = ' shared'",
    "SELECT hold_count FROM dlock_shared WHERE name = ?1 AND owner = ?2 AND token = ?3 AND expires_at > ?4",
    "UPDATE dlock_shared SET hold_count = hold_count - 1 WHERE name = ?1 AND token = ?2 RETURNING hold_count",
    // Ends shared holds: one (?2), or every one of the key.
    "DELETE FROM dlock_shared WHERE name = ?1 AND token = coalesce(?2, token)",
    "UPDATE dlock_shared SET hold_count = 0 WHERE name = ?1 AND token = coalesce(?2, token) AND expires_at > ?3",
    R"sql(WITH t(now) AS MATERIALIZED (SELECT dlock_now_us())
DELETE FROM dlock_shared WHERE expires_at <= (SELECT now FROM t))sql",
};

// Shared holders and each key's shared settings (permits, a waiting writer's claim). Created
// on first use, like kActivitySchema, so files of schema version 2 need no migration; builds
// that predate shared holds see a shared key's row held by the marker owner ' shared'.
inline constexpr const char* kSharedSchema = R"sql(
CREATE TABLE IF NOT EXISTS dlock_shared(
  name TEXT NOT NULL,
  token INTEGER NOT NULL,
  owner TEXT NOT NULL,
  hold_count INTEGER NOT NULL,    -- 0: evicted with a lock delay
  expires_at INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  PRIMARY KEY (name, token)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dlock_modes(
  name TEXT PRIMARY KEY,
  permits INTEGER NOT NULL,       -- of the current shared holders; 0: no limit
  claim_until INTEGER NOT NULL,
  claim_token INTEGER NOT NULL) WITHOUT ROWID)sql";

inline constexpr const char* kSharedOwner = " shared";

// The force-releases that eviction watchers read (see EvictionWatch): the last 256, each with
// the time it was made (dlock_now_us()). Created with the schema and, for files that predate
// it, on a client's first force-release (no new schema version: builds that know version 2
// open the file as before).
inline constexpr const char* kEvictionsSchema = R"sql(
CREATE TABLE IF NOT EXISTS dlock_evictions(seq INTEGER PRIMARY KEY, name TEXT NOT NULL, at INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS dlock_evictions_kept AFTER INSERT ON dlock_evictions
BEGIN DELETE FROM dlock_evictions WHERE seq <= NEW.seq - 256; END)sql";

// The activity totals' table. Created on first use rather than in kSchema, so that files of
// schema version 2 need no migration and builds that know version 2 can still open them.
inline constexpr const char* kActivitySchema = R"sql(
CREATE TABLE IF NOT EXISTS dlock_activity(id INTEGER PRIMARY KEY CHECK (id = 0),
  acquisitions INTEGER NOT NULL, conflicts INTEGER NOT NULL, waits INTEGER NOT NULL,
  wait_us INTEGER NOT NULL, renewals INTEGER NOT NULL, losses INTEGER NOT NULL))sql";

}  // namespace dlock::backends::sqlite::statements
