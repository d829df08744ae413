// The PL/pgSQL functions of lease mode's shared holds and force-release (lease_sql.hpp): each
// a series of steps that must see one state of the key, so one function call, one round trip.
// Every one locks the key's row in the lock table first, as the exclusive statements do.

#include "backends/postgres/lease_sql.hpp"

#include "backends/postgres/common.hpp"

namespace dlock::backends::postgres {
namespace {

// {T} is the lock table. ms(x) is an interval in whole milliseconds, rounded up.
constexpr const char* kFunctions = R"sql(
CREATE OR REPLACE FUNCTION "{T}_ms"(x interval) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM x) * 1000))::bigint $$;

-- A shared hold: a re-entry (of the owner's shared hold, or of its exclusive one: a writer may
-- also read), a new shared holder, or the holders that refuse it. Rows: outcome ('acquired',
-- 'busy' or 'permits'), then owner, token, holds, ttl left, time held, shared (t/f), retry
-- within (ms). A busy answer's rows are the live holders; one row with a NULL owner when none
-- refused it (a writer's claim). 'permits': the key's permits in holds.
CREATE OR REPLACE FUNCTION "{T}_shared_take"(p_key text, p_owner text, p_ttl bigint, p_permits integer,
    p_waiting boolean, p_waited_behind bigint)
RETURNS TABLE(outcome text, owner text, token bigint, holds integer, ttl bigint, held bigint, shared boolean,
    retry bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  lease timestamptz := now_ + p_ttl * interval '1 millisecond';
  r "{T}"%ROWTYPE;
  s "{T}_shared"%ROWTYPE;
  held_shared boolean;
  own boolean;
  for_readers boolean;
  live integer;
  refused boolean := false;
  wait_ms bigint;
BEGIN
  SELECT * INTO r FROM "{T}" WHERE key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO "{T}" (key, owner, token, holds, expires_at, acquired_at)
      VALUES (p_key, '', nextval('"{T}_seq"'), 0, now_, now_) ON CONFLICT (key) DO NOTHING;
    SELECT * INTO r FROM "{T}" WHERE key = p_key FOR UPDATE;
  END IF;
  -- The owner's exclusive hold.
  IF r.owner = p_owner AND r.holds > 0 AND r.expires_at > now_ THEN
    UPDATE "{T}" SET holds = holds + 1, expires_at = GREATEST(expires_at, lease) WHERE key = p_key;
    RETURN QUERY SELECT 'acquired', p_owner, r.token, r.holds + 1, 0::bigint, 0::bigint, false, 0::bigint;
    RETURN;
  END IF;
  -- A live exclusive holder, an evicted one included. A waiting reader places the readers'
  -- claim on its token: the next exclusive grant waits for the readers who waited for it.
  IF r.owner <> '' AND r.owner <> ' shared' AND r.expires_at > now_ THEN
    IF p_waiting THEN
      UPDATE "{T}" SET waiting = true, readers_claim_token = r.token,
        readers_claim_until = now_ + interval '2 seconds' WHERE key = p_key;
    END IF;
    RETURN QUERY SELECT 'busy', r.owner, r.token, r.holds, "{T}_ms"(r.expires_at - now_),
      "{T}_ms"(now_ - r.acquired_at), false, "{T}_ms"(r.expires_at - now_);
    RETURN;
  END IF;
  held_shared := r.owner = ' shared' AND r.expires_at > now_;
  IF held_shared THEN
    DELETE FROM "{T}_shared" WHERE key = p_key AND expires_at <= now_;
    SELECT * INTO s FROM "{T}_shared" WHERE key = p_key AND owner = p_owner;
    own := FOUND;
    IF own AND s.holds > 0 THEN
      UPDATE "{T}_shared" SET holds = holds + 1, expires_at = GREATEST(expires_at, lease)
        WHERE key = p_key AND owner = p_owner;
      UPDATE "{T}" SET expires_at = GREATEST(expires_at, lease) WHERE key = p_key;
      RETURN QUERY SELECT 'acquired', p_owner, s.token, s.holds + 1, 0::bigint, 0::bigint, true, 0::bigint;
      RETURN;
    END IF;
    IF r.permits <> p_permits THEN
      RETURN QUERY SELECT 'permits', ''::text, 0::bigint, r.permits, 0::bigint, 0::bigint, true, 0::bigint;
      RETURN;
    END IF;
    -- The owner's evicted hold keeps it out until it releases or its lease ends.
    refused := own;
  ELSE
    DELETE FROM "{T}_shared" WHERE key = p_key;  -- holders of an earlier turn, all gone
  END IF;
  SELECT count(*) INTO live FROM "{T}_shared" WHERE key = p_key;
  refused := refused OR (p_permits > 0 AND live >= p_permits);
  -- A waiting writer's claim refuses new readers, but not those who waited behind a writer,
  -- nor those a readers' claim lets go first. The readers it refuses go after the next writer:
  -- its grant carries their claim onto its token (lease_sql.cpp), so that it cannot take the
  -- key back at once while they are still on their way.
  for_readers := COALESCE(r.readers_claim_until > now_ AND r.readers_claim_token = r.token, false);
  IF NOT refused AND p_waited_behind = 0 AND NOT for_readers AND r.writer_claim_until > now_ THEN
    refused := true;
    wait_ms := "{T}_ms"(r.writer_claim_until - now_);
    IF p_waiting AND NOT COALESCE(r.readers_claim_until > now_, false) THEN
      UPDATE "{T}" SET readers_claim_token = -1, readers_claim_until = now_ + interval '2 seconds' WHERE key = p_key;
    END IF;
  END IF;
  IF refused THEN
    IF p_waiting THEN
      UPDATE "{T}" SET waiting = true WHERE key = p_key;
    END IF;
    IF live = 0 THEN
      RETURN QUERY SELECT 'busy', NULL::text, 0::bigint, 0, 0::bigint, 0::bigint, true, COALESCE(wait_ms, 0);
    ELSE
      RETURN QUERY SELECT 'busy', s.owner, s.token, s.holds, "{T}_ms"(s.expires_at - now_),
        "{T}_ms"(now_ - s.acquired_at), true, COALESCE(wait_ms, "{T}_ms"(s.expires_at - now_))
        FROM "{T}_shared" s WHERE s.key = p_key ORDER BY s.token;
    END IF;
    RETURN;
  END IF;
  UPDATE "{T}" SET owner = ' shared', token = r.token + 1, holds = live + 1,
      expires_at = CASE WHEN held_shared THEN GREATEST(r.expires_at, lease) ELSE lease END,
      acquired_at = CASE WHEN held_shared THEN r.acquired_at ELSE now_ END,
      permits = p_permits, readers_claim_until = NULL
    WHERE key = p_key;
  INSERT INTO "{T}_shared" (key, owner, token, holds, expires_at, acquired_at)
    VALUES (p_key, p_owner, r.token + 1, 1, lease, now_);
  RETURN QUERY SELECT 'acquired', p_owner, r.token + 1, 1, 0::bigint, 0::bigint, true, 0::bigint;
END $$;

-- The key's row when its shared holders changed: free when none is left (and its waiter
-- notified), else their number and latest lease. A release of a permit notifies too.
CREATE OR REPLACE FUNCTION "{T}_shared_left"(p_key text, p_channel text, now_ timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  live integer;
  latest timestamptz;
  notify boolean;
BEGIN
  SELECT count(*), max(expires_at) INTO live, latest FROM "{T}_shared" WHERE key = p_key AND expires_at > now_;
  IF live = 0 THEN
    UPDATE "{T}" SET owner = '', holds = 0 WHERE key = p_key AND owner = ' shared' RETURNING waiting INTO notify;
  ELSE
    UPDATE "{T}" SET holds = live, expires_at = latest WHERE key = p_key AND owner = ' shared'
      RETURNING waiting INTO notify;
  END IF;
  IF notify THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
END $$;

-- One hold of a shared holder: the holds left, or NULL when the lease is no longer its own
-- (an evicted holder's release ends its hold all the same).
CREATE OR REPLACE FUNCTION "{T}_shared_free"(p_key text, p_owner text, p_token bigint, p_channel text)
RETURNS integer LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  s "{T}_shared"%ROWTYPE;
BEGIN
  PERFORM 1 FROM "{T}" WHERE key = p_key FOR UPDATE;
  SELECT * INTO s FROM "{T}_shared" WHERE key = p_key AND owner = p_owner AND token = p_token FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF s.holds > 1 AND s.expires_at > now_ THEN
    UPDATE "{T}_shared" SET holds = holds - 1 WHERE key = p_key AND owner = p_owner;
    RETURN s.holds - 1;
  END IF;
  DELETE FROM "{T}_shared" WHERE key = p_key AND owner = p_owner;
  PERFORM "{T}_shared_left"(p_key, p_channel, now_);
  RETURN CASE WHEN s.holds > 0 AND s.expires_at > now_ THEN 0 END;
END $$;

-- Renews a live shared hold: t/f.
CREATE OR REPLACE FUNCTION "{T}_shared_renew"(p_key text, p_owner text, p_token bigint, p_ttl bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  latest timestamptz;
BEGIN
  PERFORM 1 FROM "{T}" WHERE key = p_key FOR UPDATE;
  UPDATE "{T}_shared" SET expires_at = GREATEST(expires_at, now_ + p_ttl * interval '1 millisecond')
    WHERE key = p_key AND owner = p_owner AND token = p_token AND holds > 0 AND expires_at > now_
    RETURNING expires_at INTO latest;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE "{T}" SET expires_at = GREATEST(expires_at, latest) WHERE key = p_key AND owner = ' shared';
  RETURN true;
END $$;

-- Force-release: the live holders with p_token (NULL: all), as they were, evicted at once or
-- with a lock delay (hold count 0, owner and lease kept). Rows: owner, token, holds, ttl left,
-- time held, shared.
CREATE OR REPLACE FUNCTION "{T}_evict"(p_key text, p_token bigint, p_immediate boolean, p_channel text)
RETURNS TABLE(owner text, token bigint, holds integer, ttl bigint, held bigint, shared boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  now_ timestamptz := clock_timestamp();
  r "{T}"%ROWTYPE;
BEGIN
  SELECT * INTO r FROM "{T}" WHERE key = p_key FOR UPDATE;
  IF NOT FOUND OR r.owner = '' OR r.expires_at <= now_ THEN
    RETURN;
  END IF;
  IF r.owner <> ' shared' THEN
    IF p_token IS NOT NULL AND r.token <> p_token THEN
      RETURN;
    END IF;
    IF p_immediate THEN
      UPDATE "{T}" SET owner = '', holds = 0 WHERE key = p_key;
      IF r.waiting THEN
        PERFORM pg_notify(p_channel, '');
      END IF;
    ELSE
      UPDATE "{T}" SET holds = 0 WHERE key = p_key;
    END IF;
    RETURN QUERY SELECT r.owner, r.token, r.holds, "{T}_ms"(r.expires_at - now_), "{T}_ms"(now_ - r.acquired_at), false;
    RETURN;
  END IF;
  RETURN QUERY SELECT s.owner, s.token, s.holds, "{T}_ms"(s.expires_at - now_), "{T}_ms"(now_ - s.acquired_at), true
    FROM "{T}_shared" s WHERE s.key = p_key AND s.expires_at > now_ AND (p_token IS NULL OR s.token = p_token)
    ORDER BY s.token;
  IF p_immediate THEN
    DELETE FROM "{T}_shared" s WHERE s.key = p_key AND (s.expires_at <= now_ OR p_token IS NULL OR s.token = p_token);
    PERFORM "{T}_shared_left"(p_key, p_channel, now_);
  ELSE
    UPDATE "{T}_shared" s SET holds = 0 WHERE s.key = p_key AND s.expires_at > now_ AND (p_token IS NULL OR s.token = p_token);
  END IF;
END $$;
)sql";

}  // namespace

std::string shared_functions(const std::string& table) { return replace_all(kFunctions, "{T}", table); }

}  // namespace dlock::backends::postgres
