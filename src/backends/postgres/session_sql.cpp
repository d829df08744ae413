// Session mode's tables, functions and statements (session_sql.hpp).

#include "backends/postgres/session_sql.hpp"

#include "backends/postgres/common.hpp"
#include "core/stable_hash.hpp"

namespace dlock::backends::postgres {

extern const char* const kSessionSharedFunctions;  // session_shared_sql.cpp

namespace {

// {T} is the lock table. "{T}_ms" comes from the lease tables' functions (shared_sql.cpp).
constexpr const char* kSchema = R"sql(
-- Session mode: what a holder's advisory lock cannot keep, in unlogged tables (no WAL, so no
-- durable write; a crash empties them, and the locks end with the server anyway).
CREATE UNLOGGED TABLE IF NOT EXISTS "{T}_session" (
  key text COLLATE "C" PRIMARY KEY,
  owner text COLLATE "C" NOT NULL,        -- '' when free
  token bigint NOT NULL,                  -- the fencing token of the key's last grant
  holds integer NOT NULL,                 -- re-entries; 0 with an owner: evicted, lock delay
  expires_at timestamptz NOT NULL,        -- the holder's last lease (a lock delay lasts until then)
  acquired_at timestamptz NOT NULL,
  lock_id bigint NOT NULL,                -- the advisory lock: a hash of the table and the key
  pid integer NOT NULL,                   -- the holder's server process
  tag bigint NOT NULL,                    -- the holder's connection, as its client named it
  writer_claim_until timestamptz,         -- a waiting writer's claim: new readers wait until then
  readers_claim_token bigint,             -- the readers' claim: the exclusive grant they wait out (-1: the next)
  readers_claim_until timestamptz
) WITH (fillfactor = 50);
-- The token floor: new keys start above it (id 1: the epoch * 2^40, raised by clean-up).
CREATE UNLOGGED TABLE IF NOT EXISTS "{T}_session_floor" (id integer PRIMARY KEY CHECK (id = 1), v bigint NOT NULL);
-- The epoch, durable: raised each time the floor is found missing.
CREATE TABLE IF NOT EXISTS "{T}_epoch" (id integer PRIMARY KEY CHECK (id = 1), v bigint NOT NULL);

-- Whether server process p_pid holds advisory lock p_lock (pg_locks shows a bigint lock as its
-- two halves). Volatile: the lock table is read at each call, never from a snapshot.
CREATE OR REPLACE FUNCTION "{T}_locked"(p_pid integer, p_lock bigint) RETURNS boolean LANGUAGE sql VOLATILE AS
$$ SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = p_pid AND granted AND objsubid = 1
     AND classid::bigint = ((p_lock >> 32) & 4294967295) AND objid::bigint = (p_lock & 4294967295)) $$;

-- Whether any session holds advisory lock p_lock, in either mode.
CREATE OR REPLACE FUNCTION "{T}_lock_taken"(p_lock bigint) RETURNS boolean LANGUAGE sql VOLATILE AS
$$ SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
     AND classid::bigint = ((p_lock >> 32) & 4294967295) AND objid::bigint = (p_lock & 4294967295)) $$;

-- Shared holders (read-write locks, semaphores), while the key's row names the owner ' shared':
-- each holds the key's advisory lock in shared mode on a connection of its own.
CREATE UNLOGGED TABLE IF NOT EXISTS "{T}_session_shared" (
  key text COLLATE "C" NOT NULL,
  owner text COLLATE "C" NOT NULL,
  token bigint NOT NULL,
  holds integer NOT NULL,                 -- 0: evicted, closing the key until expires_at
  expires_at timestamptz NOT NULL,
  acquired_at timestamptz NOT NULL,
  permits integer NOT NULL,               -- 0: no limit (readers)
  lock_id bigint NOT NULL,
  pid integer NOT NULL,
  tag bigint NOT NULL,
  PRIMARY KEY (key, owner)
);

-- A shared holder is live while its session has the lock, or, evicted, until its lease ends.
CREATE OR REPLACE FUNCTION "{T}_session_shared_live"(h "{T}_session_shared", now_ timestamptz) RETURNS boolean
LANGUAGE sql VOLATILE AS
$$ SELECT (h.holds > 0 AND "{T}_locked"(h.pid, h.lock_id)) OR (h.holds = 0 AND h.expires_at > now_) $$;

-- An exclusive attempt. p_held: this connection holds the key's advisory lock already (the
-- holder's connection re-entering, or a waiter the server granted it). p_waiting: a waiting
-- call's attempt, which places the writer's claim when busy. Rows: outcome ('acquired': a new
-- acquisition, this connection keeping the lock; 'reentered'; 'busy'; or 'epoch': no token
-- floor, start an epoch and attempt again), then a holder (owner, token, holds, ttl left, time
-- held, shared; busy: every live holder, or one row with a NULL owner when none is to name),
-- and this session's server process.
CREATE OR REPLACE FUNCTION "{T}_session_take"(p_key text, p_owner text, p_ttl bigint, p_lock bigint,
    p_held boolean, p_tag bigint, p_waiting boolean)
RETURNS TABLE(outcome text, owner text, token bigint, holds integer, ttl bigint, held bigint, shared boolean,
    pid integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  lease timestamptz := now_ + p_ttl * interval '1 millisecond';
  me integer := pg_backend_pid();
  r "{T}_session"%ROWTYPE;
  found_ boolean;
  floor_ bigint;
BEGIN
  IF p_held OR pg_try_advisory_lock(p_lock) THEN
    SELECT * INTO r FROM "{T}_session" WHERE key = p_key FOR UPDATE;
    found_ := FOUND;
    -- This connection's own hold: a re-entry.
    IF found_ AND r.owner = p_owner AND r.holds > 0 AND r.tag = p_tag THEN
      IF NOT p_held THEN PERFORM pg_advisory_unlock(p_lock); END IF;  -- one lock per holding connection
      UPDATE "{T}_session" SET holds = holds + 1, expires_at = GREATEST(expires_at, lease) WHERE key = p_key;
      RETURN QUERY SELECT 'reentered', p_owner, r.token, r.holds + 1, 0::bigint, 0::bigint, false, me;
      RETURN;
    END IF;
    -- Evicted with a lock delay: closed until its lease ends, whoever has the lock. A waiter
    -- keeps it meanwhile (the others wait behind it); anyone else gives it back. Shared
    -- holders with the lock free are gone, but for those evicted with a lock delay.
    IF found_ AND r.owner = ' shared' THEN
      DELETE FROM "{T}_session_shared" AS h WHERE h.key = p_key AND NOT (h.holds = 0 AND h.expires_at > now_);
      IF EXISTS (SELECT 1 FROM "{T}_session_shared" AS h WHERE h.key = p_key) THEN
        IF NOT p_held THEN PERFORM pg_advisory_unlock(p_lock); END IF;
        IF p_waiting THEN UPDATE "{T}_session" SET writer_claim_until = now_ + interval '2 seconds' WHERE key = p_key; END IF;
        RETURN QUERY SELECT 'busy', h.owner, h.token, h.holds, "{T}_ms"(h.expires_at - now_), "{T}_ms"(now_ - h.acquired_at),
          true, me FROM "{T}_session_shared" AS h WHERE h.key = p_key ORDER BY h.token;
        RETURN;
      END IF;
    ELSIF found_ AND r.owner <> '' AND r.holds = 0 AND r.expires_at > now_ THEN
      IF NOT p_held THEN PERFORM pg_advisory_unlock(p_lock); END IF;
      RETURN QUERY SELECT 'busy', r.owner, r.token, 0, "{T}_ms"(r.expires_at - now_), "{T}_ms"(now_ - r.acquired_at), false, me;
      RETURN;
    END IF;
    -- The readers who waited for the key's last writer go before the next (a waiter the server
    -- granted the lock gives it back and looks again: they may not be queued for it yet).
    IF found_ AND COALESCE(r.readers_claim_until > now_ AND r.readers_claim_token = r.token, false) THEN
      IF NOT p_held THEN PERFORM pg_advisory_unlock(p_lock); END IF;
      RETURN QUERY SELECT 'busy', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, false, me;
      RETURN;
    END IF;
    -- Free, or left by a session that ended: the lock says the key is ours. Readers a writer's
    -- claim refused go next (their claim moves onto this grant's token).
    IF found_ THEN
      UPDATE "{T}_session" SET owner = p_owner, token = r.token + 1, holds = 1, expires_at = lease, acquired_at = now_,
        lock_id = p_lock, pid = me, tag = p_tag, writer_claim_until = NULL,
        readers_claim_token = CASE WHEN r.readers_claim_token = -1 AND r.readers_claim_until > now_ THEN r.token + 1
          ELSE r.readers_claim_token END
        WHERE key = p_key;
      RETURN QUERY SELECT 'acquired', p_owner, r.token + 1, 1, 0::bigint, 0::bigint, false, me;
      RETURN;
    END IF;
    SELECT v INTO floor_ FROM "{T}_session_floor" WHERE id = 1 FOR SHARE;
    IF NOT FOUND THEN
      IF NOT p_held THEN PERFORM pg_advisory_unlock(p_lock); END IF;
      RETURN QUERY SELECT 'epoch', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, false, me;
      RETURN;
    END IF;
    INSERT INTO "{T}_session" (key, owner, token, holds, expires_at, acquired_at, lock_id, pid, tag)
      VALUES (p_key, p_owner, floor_ + 1, 1, lease, now_, p_lock, me, p_tag);
    RETURN QUERY SELECT 'acquired', p_owner, floor_ + 1, 1, 0::bigint, 0::bigint, false, me;
    RETURN;
  END IF;
  -- Another session holds the lock: the key's holder or holders, or a key whose lock id is the
  -- same; or a waiter is queued for it.
  SELECT * INTO r FROM "{T}_session" WHERE key = p_key;
  found_ := FOUND;
  IF found_ AND r.owner = p_owner AND r.holds > 0 AND "{T}_locked"(r.pid, r.lock_id) THEN
    -- The owner's hold on another connection (an owner shared across clients): a re-entry.
    UPDATE "{T}_session" SET holds = holds + 1, expires_at = GREATEST(expires_at, lease)
      WHERE key = p_key AND owner = p_owner AND token = r.token AND holds > 0;
    IF FOUND THEN
      RETURN QUERY SELECT 'reentered', p_owner, r.token, r.holds + 1, 0::bigint, 0::bigint, false, me;
      RETURN;
    END IF;
  END IF;
  IF p_waiting AND found_ THEN
    UPDATE "{T}_session" SET writer_claim_until = now_ + interval '2 seconds' WHERE key = p_key;
  END IF;
  IF found_ AND r.owner = ' shared' THEN
    RETURN QUERY SELECT 'busy', h.owner, h.token, h.holds, "{T}_ms"(h.expires_at - now_), "{T}_ms"(now_ - h.acquired_at),
      true, me FROM "{T}_session_shared" AS h WHERE h.key = p_key AND "{T}_session_shared_live"(h, now_) ORDER BY h.token;
    IF FOUND THEN RETURN; END IF;
  ELSIF found_ AND r.owner <> '' AND (r.holds > 0 OR r.expires_at > now_) THEN
    RETURN QUERY SELECT 'busy', r.owner, r.token, r.holds, "{T}_ms"(r.expires_at - now_), "{T}_ms"(now_ - r.acquired_at),
      false, me;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'busy', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, false, me;
END $$;

-- A new epoch: raised durably (whatever synchronous_commit says), then the floor, unless
-- another client set it first. Returns the epoch.
CREATE OR REPLACE FUNCTION "{T}_session_epoch"() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  e bigint;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  INSERT INTO "{T}_epoch" AS x VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET v = x.v + 1 RETURNING v INTO e;
  INSERT INTO "{T}_session_floor" VALUES (1, e << 40) ON CONFLICT (id) DO NOTHING;
  RETURN e;
END $$;

-- One hold of the owner's acquisition p_token. The last frees the key: on the holder's own
-- connection (tag p_tag) it gives the lock back; from elsewhere (an owner shared across
-- clients) it ends the holder's session, which has the lock. One row: the holds left (NULL:
-- not this owner's now, or evicted, which this release acknowledges), the holder's server
-- process, and this session's.
CREATE OR REPLACE FUNCTION "{T}_session_free"(p_key text, p_owner text, p_token bigint, p_tag bigint)
RETURNS TABLE(left_holds integer, holder integer, me integer)
LANGUAGE plpgsql AS $$
DECLARE
  r "{T}_session"%ROWTYPE;
BEGIN
  SELECT * INTO r FROM "{T}_session" AS s WHERE s.key = p_key AND s.owner = p_owner AND s.token = p_token FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::integer, NULL::integer, pg_backend_pid();
    RETURN;
  END IF;
  IF r.holds > 1 THEN
    UPDATE "{T}_session" AS s SET holds = s.holds - 1 WHERE s.key = p_key;
    RETURN QUERY SELECT r.holds - 1, r.pid, pg_backend_pid();
    RETURN;
  END IF;
  UPDATE "{T}_session" AS s SET owner = '', holds = 0, expires_at = clock_timestamp() WHERE s.key = p_key;
  IF r.tag = p_tag THEN
    PERFORM pg_advisory_unlock(r.lock_id);
  ELSIF r.pid <> pg_backend_pid() AND "{T}_locked"(r.pid, r.lock_id) THEN
    PERFORM pg_terminate_backend(r.pid, 5000);
  END IF;
  RETURN QUERY SELECT CASE WHEN r.holds = 0 THEN NULL ELSE 0 END, r.pid, pg_backend_pid();
END $$;

-- Force-release of the key's live holders (with p_token, or all): immediate frees them and ends
-- their sessions, which have the lock; otherwise each is marked evicted (no holds) and keeps
-- the key closed until its lease ends or it releases. A freed permit is announced on
-- p_channel. Rows: what they held (owner, token, holds, ttl left, time held, shared).
CREATE OR REPLACE FUNCTION "{T}_session_evict"(p_key text, p_token bigint, p_immediate boolean, p_channel text)
RETURNS TABLE(owner text, token bigint, holds integer, ttl bigint, held bigint, shared boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  r "{T}_session"%ROWTYPE;
  h "{T}_session_shared"%ROWTYPE;
  locked boolean;
  permits_ integer := 0;
BEGIN
  SELECT * INTO r FROM "{T}_session" AS s WHERE s.key = p_key AND s.owner <> '' FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF r.owner = ' shared' THEN
    FOR h IN SELECT * FROM "{T}_session_shared" AS x WHERE x.key = p_key AND (p_token IS NULL OR x.token = p_token)
        ORDER BY x.token LOOP
      CONTINUE WHEN NOT "{T}_session_shared_live"(h, now_);
      RETURN QUERY SELECT h.owner, h.token, h.holds, "{T}_ms"(h.expires_at - now_), "{T}_ms"(now_ - h.acquired_at), true;
      IF p_immediate THEN
        DELETE FROM "{T}_session_shared" AS x WHERE x.key = p_key AND x.owner = h.owner;
        IF h.pid <> pg_backend_pid() AND "{T}_locked"(h.pid, h.lock_id) THEN PERFORM pg_terminate_backend(h.pid, 5000); END IF;
        permits_ := h.permits;
      ELSE
        UPDATE "{T}_session_shared" AS x SET holds = 0 WHERE x.key = p_key AND x.owner = h.owner;
      END IF;
    END LOOP;
    IF p_immediate THEN PERFORM "{T}_session_shared_left"(p_key, permits_, p_channel, now_); END IF;
    RETURN;
  END IF;
  IF p_token IS NOT NULL AND r.token <> p_token THEN RETURN; END IF;
  locked := r.holds > 0 AND "{T}_locked"(r.pid, r.lock_id);
  IF NOT (locked OR (r.holds = 0 AND r.expires_at > now_)) THEN RETURN; END IF;
  IF p_immediate THEN
    UPDATE "{T}_session" AS s SET owner = '', holds = 0, expires_at = now_ WHERE s.key = p_key;
    IF r.pid <> pg_backend_pid() AND "{T}_locked"(r.pid, r.lock_id) THEN PERFORM pg_terminate_backend(r.pid, 5000); END IF;
  ELSE
    UPDATE "{T}_session" AS s SET holds = 0 WHERE s.key = p_key;
  END IF;
  RETURN QUERY SELECT r.owner, r.token, r.holds, "{T}_ms"(r.expires_at - now_), "{T}_ms"(now_ - r.acquired_at), false;
END $$;
)sql";

// A row's holder is live when evicted within its lease, or holding and its session has the lock.
constexpr const char* kLive =
    "((s.holds = 0 AND s.expires_at > clock_timestamp()) OR (s.holds > 0 AND EXISTS (SELECT 1 FROM held AS h"
    " WHERE h.pid = s.pid AND h.classid::bigint = ((s.lock_id >> 32) & 4294967295)"
    " AND h.objid::bigint = (s.lock_id & 4294967295))))";

}  // namespace

std::int64_t session_lock_id(const std::string& table, std::string_view key) {
  return static_cast<std::int64_t>(core::stable_hash("session\n" + table + '\n' + std::string(key)));
}

std::string session_schema(const std::string& table) {
  return replace_all(std::string(kSchema) + kSessionSharedFunctions, "{T}", table);
}

SessionSql::SessionSql(const std::string& table) {
  const std::string t = "\"" + table + "_session\"";
  const std::string ms = "\"" + table + "_ms\"";
  // pg_locks read once per statement: its advisory locks.
  const std::string held = "WITH held AS (SELECT pid, classid, objid FROM pg_locks"
                           " WHERE locktype = 'advisory' AND granted AND objsubid = 1) ";
  const std::string shared_table = "\"" + table + "_session_shared\"";
  const std::string holder = "s.owner, s.token, s.holds, " + ms + "(s.expires_at - clock_timestamp()) AS ttl, " + ms +
                             "(clock_timestamp() - s.acquired_at) AS held_for";
  // The live holders of the keys `where` selects (of `s`): key, owner, token, holds, ttl left,
  // time held, shared.
  const auto holders = [&](const std::string& where) {
    return held + "SELECT s.key, " + holder + ", false AS shared FROM " + t + " AS s WHERE " + where +
           " AND s.owner <> '' AND s.owner <> ' shared' AND " + kLive + " UNION ALL SELECT s.key, " + holder +
           ", true FROM " + shared_table + " AS s WHERE " + where + " AND " + kLive;
  };
  // The common acquisition in plain SQL (a function call costs some 15 µs of the server's time
  // more): the lock, then the key's row if it is free, or left by a session that ended, and
  // not this connection's own hold (a re-entry), nor held shared, nor kept for readers who
  // waited for its last writer. Returns the new token (NULL: nothing taken, and the lock given
  // back unless held before; the function decides), and this session's server process.
  // $1 key, $2 owner, $3 ttl (ms), $4 lock id, $5 held (t/f), $6 the connection's tag.
  take_fast = "WITH l AS MATERIALIZED (SELECT $5::boolean OR pg_try_advisory_lock($4::bigint) AS got), u AS ("
              "UPDATE " + t + " AS s SET owner = $2, token = s.token + 1, holds = 1, expires_at = clock_timestamp() + "
              "$3::bigint * interval '1 millisecond', acquired_at = clock_timestamp(), lock_id = $4::bigint, "
              "pid = pg_backend_pid(), tag = $6::bigint, writer_claim_until = NULL, readers_claim_token = CASE WHEN "
              "s.readers_claim_token = -1 AND s.readers_claim_until > clock_timestamp() THEN s.token + 1 ELSE "
              "s.readers_claim_token END FROM l WHERE l.got AND s.key = $1 AND s.owner <> ' shared' "
              "AND (s.owner = '' OR s.holds > 0 OR s.expires_at <= clock_timestamp()) "
              "AND NOT (s.owner = $2 AND s.holds > 0 AND s.tag = $6::bigint) AND NOT COALESCE(s.readers_claim_until > "
              "clock_timestamp() AND s.readers_claim_token = s.token, false) RETURNING s.token) "
              "SELECT (SELECT token FROM u), pg_backend_pid(), CASE WHEN l.got AND NOT $5::boolean AND NOT EXISTS "
              "(SELECT 1 FROM u) THEN pg_advisory_unlock($4::bigint) END FROM l";
  // take_fast's parameters, and $7 waiting (t/f).
  take = "SELECT * FROM \"" + table + "_session_take\"($1, $2, $3::bigint, $4::bigint, $5::boolean, $6::bigint, "
         "$7::boolean)";
  // take's parameters, and $8 permits, $9 waited_behind.
  shared_take = "SELECT * FROM \"" + table + "_session_shared_take\"($1, $2, $3::bigint, $4::bigint, $5::boolean, "
                "$6::bigint, $7::boolean, $8::integer, $9::bigint)";
  epoch = "SELECT \"" + table + "_session_epoch\"()";
  // $1 key, $2 owner, $3 token, $4 ttl (ms), $5 the connection's tag. Returns the holder's
  // server process and this session's: on the holder's connection they are one.
  const auto renewal = [&](const std::string& of) {
    return "UPDATE " + of + " AS s SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond' "
           "WHERE s.key = $1 AND s.owner = $2 AND s.token = $3::bigint AND s.holds > 0 "
           "AND (s.tag = $5::bigint OR \"" + table + "_locked\"(s.pid, s.lock_id)) RETURNING s.pid, pg_backend_pid()";
  };
  renew = renewal(t);
  shared_renew = renewal(shared_table);
  // The last hold, on the holder's connection, in plain SQL: the lock given back once the row
  // is free. Returns the holder's server process and this session's (one, on the holder's
  // connection); no row: the function decides. Parameters as `free`'s.
  free_fast = "UPDATE " + t + " AS s SET owner = '', holds = 0, expires_at = clock_timestamp() WHERE s.key = $1 "
              "AND s.owner = $2 AND s.token = $3::bigint AND s.holds = 1 AND s.tag = $4::bigint "
              "RETURNING s.pid, pg_backend_pid(), pg_advisory_unlock(s.lock_id)";
  // $1 key, $2 owner, $3 token, $4 the connection's tag.
  free = "SELECT * FROM \"" + table + "_session_free\"($1, $2, $3::bigint, $4::bigint)";
  // free's parameters, and $5 the key's channel.
  shared_free = "SELECT * FROM \"" + table + "_session_shared_free\"($1, $2, $3::bigint, $4::bigint, $5)";
  // $1 key. Rows: owner, token, holds, ttl left, time held, shared.
  inspect = "SELECT owner, token, holds, ttl, held_for, shared FROM (" + holders("s.key = $1") + ") AS x ORDER BY token";
  // $1 prefix, $2 after, $3 most keys: whole keys, each with all its holders. Rows: the key,
  // then as inspect's.
  list = "SELECT key, owner, token, holds, ttl, held_for, shared FROM (SELECT x.*, dense_rank() OVER (ORDER BY x.key) "
         "AS n FROM (" + holders("s.key >= $1 AND s.key > $2 AND starts_with(s.key, $1)") +
         ") AS x) AS y WHERE n <= $3::bigint ORDER BY key, token";
  // $1 key, $2 token or NULL for any holder, $3 immediate (t/f), $4 the key's channel.
  evict = "SELECT * FROM \"" + table + "_session_evict\"($1, $2::bigint, $3::boolean, $4)";
  // Rows of free keys, of holders evicted whose lease ended, of holders whose session ended,
  // and of keys held shared whose lock no session has and whose evicted shared holders' leases
  // ended, go; the floor rises to the largest token among them, in the same statement. A key
  // being taken keeps its row: the delete waits for its lock, then looks at the lock table
  // again (the functions, not a snapshot of it). Shared holders no longer live go too.
  collect_idle = "WITH gone AS (DELETE FROM " + shared_table + " AS s WHERE NOT \"" + table +
                 "_session_shared_live\"(s, clock_timestamp())), dead AS (DELETE FROM " + t + " AS s WHERE s.owner = '' OR "
                 "(s.owner <> ' shared' AND ((s.holds = 0 AND s.expires_at <= clock_timestamp()) OR (s.holds > 0 AND NOT \"" +
                 table + "_locked\"(s.pid, s.lock_id)))) OR (s.owner = ' shared' AND NOT \"" + table +
                 "_lock_taken\"(s.lock_id) AND NOT EXISTS (SELECT 1 FROM " + shared_table + " AS h WHERE h.key = s.key AND "
                 "h.holds = 0 AND h.expires_at > clock_timestamp())) RETURNING s.token), raised AS (UPDATE \"" + table +
                 "_session_floor\" SET v = GREATEST(v, (SELECT max(token) FROM dead)) WHERE id = 1 AND EXISTS (SELECT 1 "
                 "FROM dead)) SELECT count(*) FROM dead";
}

}  // namespace dlock::backends::postgres
