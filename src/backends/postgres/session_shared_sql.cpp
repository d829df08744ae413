// Session mode's shared holds (read-write locks, semaphores): their PL/pgSQL functions, part of
// session_schema() (session_sql.hpp). A shared holder holds the key's advisory lock in shared
// mode on a connection of its own (pg_advisory_lock_shared), so an exclusive holder and shared
// ones exclude each other in the server, and the server's queue orders readers and writers; the
// functions keep what the lock cannot: owners, holds, tokens, a semaphore's permits, and the
// claims of backend.hpp. Each locks the key's row first, as the exclusive function does.

#include "backends/postgres/session_sql.hpp"

namespace dlock::backends::postgres {

// {T} is the lock table; the tables, "{T}_locked" and "{T}_session_shared_live" come first
// (session_sql.cpp).
extern const char* const kSessionSharedFunctions;
const char* const kSessionSharedFunctions = R"sql(
-- After shared holders left the key: the rows of gone ones are deleted, the key is free when
-- none is live, and a semaphore's freed permit (p_permits > 0) is announced on p_channel, which
-- its next waiter in line listens to.
CREATE OR REPLACE FUNCTION "{T}_session_shared_left"(p_key text, p_permits integer, p_channel text, now_ timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "{T}_session_shared" AS h WHERE h.key = p_key AND NOT "{T}_session_shared_live"(h, now_);
  IF NOT EXISTS (SELECT 1 FROM "{T}_session_shared" AS h WHERE h.key = p_key) THEN
    UPDATE "{T}_session" AS s SET owner = '', holds = 0, expires_at = now_ WHERE s.key = p_key AND s.owner = ' shared';
  END IF;
  IF p_permits > 0 THEN PERFORM pg_notify(p_channel, ''); END IF;
END $$;

-- A shared attempt, with the arguments of "{T}_session_take" and the request's permits and
-- waited_behind (backend.hpp). Rows as "{T}_session_take"'s, and 'permits' (the permits the
-- key's holders took, in holds) when they differ from p_permits.
CREATE OR REPLACE FUNCTION "{T}_session_shared_take"(p_key text, p_owner text, p_ttl bigint, p_lock bigint,
    p_held boolean, p_tag bigint, p_waiting boolean, p_permits integer, p_waited_behind bigint)
RETURNS TABLE(outcome text, owner text, token bigint, holds integer, ttl bigint, held bigint, shared boolean,
    pid integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  lease timestamptz := now_ + p_ttl * interval '1 millisecond';
  me integer := pg_backend_pid();
  got boolean := p_held OR pg_try_advisory_lock_shared(p_lock);
  r "{T}_session"%ROWTYPE;
  s "{T}_session_shared"%ROWTYPE;
  own boolean := false;
  live integer := 0;
  held_permits integer;
  refused boolean;
  for_readers boolean;
  floor_ bigint;
BEGIN
  SELECT * INTO r FROM "{T}_session" WHERE key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    SELECT v INTO floor_ FROM "{T}_session_floor" WHERE id = 1 FOR SHARE;
    IF NOT FOUND THEN
      IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
      RETURN QUERY SELECT 'epoch', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, true, me;
      RETURN;
    END IF;
    -- A free row, its last token the floor, as clean-up leaves none.
    INSERT INTO "{T}_session" (key, owner, token, holds, expires_at, acquired_at, lock_id, pid, tag)
      VALUES (p_key, '', floor_, 0, now_, now_, p_lock, 0, 0) ON CONFLICT (key) DO NOTHING;
    SELECT * INTO r FROM "{T}_session" WHERE key = p_key FOR UPDATE;
  END IF;
  -- The owner's exclusive hold (a writer may also read), on this connection or, for an owner
  -- shared across clients, on another that still has the lock: re-entered.
  IF r.owner = p_owner AND r.holds > 0 AND (r.tag = p_tag OR "{T}_locked"(r.pid, r.lock_id)) THEN
    IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
    UPDATE "{T}_session" SET holds = holds + 1, expires_at = GREATEST(expires_at, lease) WHERE key = p_key;
    RETURN QUERY SELECT 'reentered', p_owner, r.token, r.holds + 1, 0::bigint, 0::bigint, false, me;
    RETURN;
  END IF;
  -- A live exclusive holder, an evicted one included. A waiting reader places the readers'
  -- claim on its token: the next exclusive grant waits for the readers who waited for it.
  IF r.owner <> '' AND r.owner <> ' shared' AND ((r.holds = 0 AND r.expires_at > now_)
      OR (r.holds > 0 AND NOT got AND "{T}_locked"(r.pid, r.lock_id))) THEN
    IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
    IF p_waiting THEN
      UPDATE "{T}_session" SET readers_claim_token = r.token, readers_claim_until = now_ + interval '2 seconds'
        WHERE key = p_key;
    END IF;
    RETURN QUERY SELECT 'busy', r.owner, r.token, r.holds, "{T}_ms"(r.expires_at - now_), "{T}_ms"(now_ - r.acquired_at),
      false, me;
    RETURN;
  END IF;
  IF r.owner = ' shared' THEN
    DELETE FROM "{T}_session_shared" AS h WHERE h.key = p_key AND NOT "{T}_session_shared_live"(h, now_);
    SELECT * INTO s FROM "{T}_session_shared" AS h WHERE h.key = p_key AND h.owner = p_owner;
    own := FOUND;
    IF own AND s.holds > 0 THEN
      IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
      UPDATE "{T}_session_shared" AS h SET holds = h.holds + 1, expires_at = GREATEST(h.expires_at, lease)
        WHERE h.key = p_key AND h.owner = p_owner;
      RETURN QUERY SELECT 'reentered', p_owner, s.token, s.holds + 1, 0::bigint, 0::bigint, true, me;
      RETURN;
    END IF;
    SELECT count(*), min(h.permits) INTO live, held_permits FROM "{T}_session_shared" AS h WHERE h.key = p_key;
    IF live > 0 AND held_permits <> p_permits THEN
      IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
      RETURN QUERY SELECT 'permits', NULL::text, 0::bigint, held_permits, 0::bigint, 0::bigint, true, me;
      RETURN;
    END IF;
  ELSE
    DELETE FROM "{T}_session_shared" AS h WHERE h.key = p_key;  -- holders of an earlier turn, all gone
  END IF;
  -- Refused: by the owner's own evicted hold, by a full semaphore, by a lock it could not have
  -- (a writer holds or waits for it, or a key whose lock id is the same has it), or by a
  -- waiting writer's claim, which does not refuse the readers who waited behind a writer, nor
  -- those a readers' claim lets go first, nor a waiter the server granted the lock from its
  -- queue (no writer was queued ahead of it, and a writer queued after it holds back every
  -- reader that comes later). The readers it refuses go after the next writer: its grant
  -- carries their claim onto its token.
  refused := own OR NOT got OR (p_permits > 0 AND live >= p_permits);
  for_readers := COALESCE(r.readers_claim_until > now_ AND r.readers_claim_token = r.token, false);
  IF NOT refused AND NOT p_held AND p_waited_behind = 0 AND NOT for_readers
      AND COALESCE(r.writer_claim_until > now_, false) THEN
    refused := true;
    IF p_waiting AND NOT COALESCE(r.readers_claim_until > now_, false) THEN
      UPDATE "{T}_session" SET readers_claim_token = -1, readers_claim_until = now_ + interval '2 seconds'
        WHERE key = p_key;
    END IF;
  END IF;
  IF refused THEN
    IF got AND NOT p_held THEN PERFORM pg_advisory_unlock_shared(p_lock); END IF;
    RETURN QUERY SELECT 'busy', h.owner, h.token, h.holds, "{T}_ms"(h.expires_at - now_), "{T}_ms"(now_ - h.acquired_at),
      true, me FROM "{T}_session_shared" AS h WHERE h.key = p_key ORDER BY h.token;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 'busy', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, true, me;
    END IF;
    RETURN;
  END IF;
  UPDATE "{T}_session" SET owner = ' shared', token = r.token + 1, holds = live + 1,
      expires_at = GREATEST(expires_at, lease), acquired_at = CASE WHEN live > 0 THEN r.acquired_at ELSE now_ END,
      lock_id = p_lock, pid = 0, tag = 0, readers_claim_until = NULL
    WHERE key = p_key;
  INSERT INTO "{T}_session_shared" VALUES (p_key, p_owner, r.token + 1, 1, lease, now_, p_permits, p_lock, me, p_tag);
  RETURN QUERY SELECT 'acquired', p_owner, r.token + 1, 1, 0::bigint, 0::bigint, true, me;
END $$;

-- One hold of a shared holder's acquisition p_token, as "{T}_session_free" does for an
-- exclusive one: the last gives the shared lock back on the holder's connection (tag p_tag), or
-- ends the holder's session from elsewhere. One row: the holds left (NULL: not this owner's
-- now, or evicted, which this release acknowledges), the holder's server process, and this
-- session's.
CREATE OR REPLACE FUNCTION "{T}_session_shared_free"(p_key text, p_owner text, p_token bigint, p_tag bigint,
    p_channel text)
RETURNS TABLE(left_holds integer, holder integer, me integer)
LANGUAGE plpgsql AS $$
DECLARE
  now_ timestamptz := clock_timestamp();
  s "{T}_session_shared"%ROWTYPE;
BEGIN
  PERFORM 1 FROM "{T}_session" AS x WHERE x.key = p_key FOR UPDATE;
  SELECT * INTO s FROM "{T}_session_shared" AS h WHERE h.key = p_key AND h.owner = p_owner AND h.token = p_token
    FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::integer, NULL::integer, pg_backend_pid();
    RETURN;
  END IF;
  IF s.holds > 1 THEN
    UPDATE "{T}_session_shared" AS h SET holds = h.holds - 1 WHERE h.key = p_key AND h.owner = p_owner;
    RETURN QUERY SELECT s.holds - 1, s.pid, pg_backend_pid();
    RETURN;
  END IF;
  DELETE FROM "{T}_session_shared" AS h WHERE h.key = p_key AND h.owner = p_owner;
  IF s.tag = p_tag THEN
    PERFORM pg_advisory_unlock_shared(s.lock_id);
  ELSIF s.pid <> pg_backend_pid() AND "{T}_locked"(s.pid, s.lock_id) THEN
    PERFORM pg_terminate_backend(s.pid, 5000);
  END IF;
  PERFORM "{T}_session_shared_left"(p_key, s.permits, p_channel, now_);
  RETURN QUERY SELECT CASE WHEN s.holds = 0 THEN NULL ELSE 0 END, s.pid, pg_backend_pid();
END $$;
)sql";

}  // namespace dlock::backends::postgres
