#include "backends/postgres/lease_sql.hpp"

#include "backends/postgres/common.hpp"
#include "backends/postgres/session_sql.hpp"

namespace dlock::backends::postgres {
namespace {

// A key is free when no one owns it or its lease has ended (an owner with no holds is a holder
// evicted with a lock delay, which keeps the key closed until its lease ends), and no readers'
// claim holds it for the readers who waited behind its last exclusive holder.
// In the upsert, EXCLUDED.acquired_at is the statement's one reading of the clock (read before
// it waits for the row's lock, so it errs towards a lease still live, and a new lease shorter).
constexpr const char* kFree =
    "((l.owner = '' OR l.expires_at <= EXCLUDED.acquired_at) AND "
    "NOT COALESCE(l.readers_claim_until > EXCLUDED.acquired_at AND l.readers_claim_token = l.token, false))";
// A new exclusive grant carries the claim of readers a waiting writer's claim held back
// (readers_claim_token -1) onto its own token: they go next (shared_sql.cpp).
constexpr const char* kCarriedClaim =
    "CASE WHEN l.readers_claim_token = -1 AND l.readers_claim_until > EXCLUDED.acquired_at THEN l.token + 1 "
    "ELSE l.readers_claim_token END";
constexpr const char* kReentry =
    "(l.owner = EXCLUDED.owner AND l.holds > 0 AND l.expires_at > EXCLUDED.acquired_at)";
constexpr const char* kTtlLeft =
    "GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000))::bigint";
constexpr const char* kHeldFor =
    "GREATEST(0, FLOOR(EXTRACT(EPOCH FROM (clock_timestamp() - acquired_at)) * 1000))::bigint";

// The live holders of the keys `where` selects (then `order`, a LIMIT), in the lock table: the
// exclusive holder, or the shared holders of a row owned by ' shared'. Columns: key, owner,
// token, holds, ttl left, time held, shared (t/f).
std::string holders_of(const std::string& table, const std::string& where, const std::string& order = "") {
  const std::string t = "\"" + table + "\"";
  const std::string s = "\"" + table + "_shared\"";
  const auto at = [](const std::string& alias, const std::string& expression) {
    return replace_all(replace_all(expression, "expires_at", alias + ".expires_at"), "acquired_at",
                       alias + ".acquired_at");
  };
  return "SELECT l.key, COALESCE(s.owner, l.owner), COALESCE(s.token, l.token), COALESCE(s.holds, l.holds), "
         "CASE WHEN s.key IS NULL THEN " + at("l", kTtlLeft) + " ELSE " + at("s", kTtlLeft) + " END, "
         "CASE WHEN s.key IS NULL THEN " + at("l", kHeldFor) + " ELSE " + at("s", kHeldFor) + " END, "
         "s.key IS NOT NULL "
         "FROM (SELECT * FROM " + t + " l WHERE " + where + " AND l.owner <> '' AND l.expires_at > clock_timestamp() " +
         order + ") l "
         "LEFT JOIN " + s + " s ON l.owner = ' shared' AND s.key = l.key AND s.expires_at > clock_timestamp() "
         "WHERE l.owner <> ' shared' OR s.key IS NOT NULL ";
}

}  // namespace

LeaseSql::LeaseSql(const std::string& table) {
  const std::string t = "\"" + table + "\"";
  const std::string seq = "'\"" + table + "_seq\"'";
  // $1 key, $2 owner, $3 ttl (ms). A new row's token comes from the sequence, which clean-up
  // raises above every token it deletes; a taken row's is the row's last plus one. A grant
  // ends a waiting writer's claim.
  const std::string insert = "INSERT INTO " + t +
                             " AS l (key, owner, token, holds, expires_at, acquired_at) "
                             "SELECT $1, $2, nextval(" + seq + "), 1, n.t + $3::bigint * interval '1 millisecond', n.t "
                             "FROM (SELECT clock_timestamp() AS t) n ON CONFLICT (key) DO UPDATE SET ";
  // Returns the token and holds when the key was taken or re-entered; no row when it is busy.
  acquire = insert +
            "token = CASE WHEN {R} THEN l.token ELSE l.token + 1 END, "
            "holds = CASE WHEN {R} THEN l.holds + 1 ELSE 1 END, "
            "owner = EXCLUDED.owner, "
            "expires_at = CASE WHEN {R} THEN GREATEST(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END, "
            "acquired_at = CASE WHEN {R} THEN l.acquired_at ELSE EXCLUDED.acquired_at END, "
            "writer_claim_until = CASE WHEN {R} THEN l.writer_claim_until END, "
            "readers_claim_token = CASE WHEN {R} THEN l.readers_claim_token ELSE {C} END "
            "WHERE {F} OR {R} RETURNING token, holds";
  // The same, but a busy key's row is written too: `waiting` tells the holder's release to
  // notify the key's channel, in the same atomic step that found the key busy, so no release
  // can slip between this attempt and the waiter's wait unseen; and the writer's claim, which
  // holds new readers back. Returns ours (t/f), the row's owner, token, holds, ttl left, time
  // held, and how long a readers' claim holds the free key.
  acquire_waiting = insert +
                    "token = CASE WHEN {R} THEN l.token WHEN {F} THEN l.token + 1 ELSE l.token END, "
                    "holds = CASE WHEN {R} THEN l.holds + 1 WHEN {F} THEN 1 ELSE l.holds END, "
                    "owner = CASE WHEN {R} OR {F} THEN EXCLUDED.owner ELSE l.owner END, "
                    "expires_at = CASE WHEN {R} THEN GREATEST(l.expires_at, EXCLUDED.expires_at) "
                    "WHEN {F} THEN EXCLUDED.expires_at ELSE l.expires_at END, "
                    "acquired_at = CASE WHEN {F} AND NOT {R} THEN EXCLUDED.acquired_at ELSE l.acquired_at END, "
                    "waiting = CASE WHEN {R} THEN l.waiting ELSE NOT {F} END, "
                    "writer_claim_until = CASE WHEN {R} THEN l.writer_claim_until WHEN {F} THEN NULL "
                    "ELSE EXCLUDED.acquired_at + interval '2 seconds' END, "
                    "readers_claim_token = CASE WHEN {F} AND NOT {R} THEN {C} ELSE l.readers_claim_token END "
                    "RETURNING owner = $2 AND holds > 0, owner, token, holds, " + std::string(kTtlLeft) + ", " +
                    kHeldFor + ", GREATEST(0, CEIL(EXTRACT(EPOCH FROM (readers_claim_until - clock_timestamp())) * 1000))::bigint";
  for (auto* statement : {&acquire, &acquire_waiting}) {
    *statement = replace_all(replace_all(replace_all(*statement, "{R}", kReentry), "{F}", kFree), "{C}", kCarriedClaim);
  }
  // $1 key, $2 owner, $3 token, $4 ttl (ms). A renewal never shortens the lease.
  renew = "UPDATE " + t +
          " SET expires_at = GREATEST(expires_at, clock_timestamp() + $4::bigint * interval '1 millisecond') "
          "WHERE key = $1 AND owner = $2 AND token = $3::bigint AND holds > 0 AND expires_at > clock_timestamp() "
          "RETURNING 1";
  // $1 key, $2 owner, $3 token, $4 the key's channel. Returns the holds left; the last one
  // notifies the key's listening waiter, if one said it listens.
  release = "UPDATE " + t +
            " SET holds = holds - 1, owner = CASE WHEN holds = 1 THEN '' ELSE owner END "
            "WHERE key = $1 AND owner = $2 AND token = $3::bigint AND holds > 0 AND expires_at > clock_timestamp() "
            "RETURNING holds, CASE WHEN holds = 0 AND waiting THEN pg_notify($4, '') END";
  // The same arguments: a holder whose lease is no longer its own (expired, or evicted with a
  // lock delay, which it thereby acknowledges) frees the key, if no one took it since.
  release_stale = "UPDATE " + t +
                  " SET owner = '', holds = 0 "
                  "WHERE key = $1 AND owner = $2 AND token = $3::bigint AND (holds = 0 OR expires_at <= clock_timestamp()) "
                  "RETURNING CASE WHEN waiting THEN pg_notify($4, '') END";
  // $1 key.
  inspect = holders_of(table, "l.key = $1") + "ORDER BY 3";
  // $1 prefix, $2 after, $3 most keys: whole keys, each with all its holders.
  list = holders_of(table, "l.key >= $1 AND l.key > $2 AND starts_with(l.key, $1)", "ORDER BY l.key LIMIT $3::bigint") +
         "ORDER BY 1, 3";
  // Clean-up, in one transaction that keeps every writer out (an acquire that read the
  // sequence before the delete would otherwise insert below a deleted token): the sequence is
  // raised to the largest token deleted, then the free rows go, and shared holders whose
  // lease has ended. now() is the transaction's start, the same in every statement.
  const std::string idle = "(owner = '' OR expires_at <= now())";
  collect_begin = "BEGIN; LOCK TABLE " + t + " IN SHARE ROW EXCLUSIVE MODE; SELECT setval(" + seq +
                  ", GREATEST((SELECT last_value FROM \"" + table + "_seq\"), (SELECT max(token) FROM " + t + " WHERE " +
                  idle + "))); DELETE FROM \"" + table + "_shared\" WHERE expires_at <= now()";
  collect_idle = "WITH d AS (DELETE FROM " + t + " WHERE " + idle + " RETURNING 1) SELECT count(*) FROM d";
  // $1 key, $2 owner, $3 ttl (ms), $4 permits, $5 waiting (t/f), $6 waited behind (token).
  shared_take = "SELECT * FROM \"" + table + "_shared_take\"($1, $2, $3::bigint, $4::integer, $5::boolean, $6::bigint)";
  // $1 key, $2 owner, $3 token, $4 ttl (ms): t/f.
  shared_renew = "SELECT \"" + table + "_shared_renew\"($1, $2, $3::bigint, $4::bigint)";
  // $1 key, $2 owner, $3 token, $4 the key's channel: the holds left, or NULL.
  shared_free = "SELECT \"" + table + "_shared_free\"($1, $2, $3::bigint, $4)";
  // $1 key, $2 token or NULL for every holder, $3 immediate (t/f), $4 the key's channel.
  evict = "SELECT * FROM \"" + table + "_evict\"($1, $2::bigint, $3::boolean, $4)";
}

std::string lock_table_schema(const std::string& table) {
  return "-- The lock table of postgres:// lease mode, its shared holders, the sequence that starts\n"
         "-- new keys' fencing tokens, and the activity totals. Keys and owners are text compared\n"
         "-- bytewise (COLLATE \"C\"). A low fillfactor keeps a key's updates on its page (HOT\n"
         "-- updates: no index write).\n"
         "CREATE TABLE IF NOT EXISTS \"" + table + "\" (\n"
         "  key text COLLATE \"C\" PRIMARY KEY,\n"
         "  owner text COLLATE \"C\" NOT NULL,       -- '' when free; ' shared' when held shared\n"
         "  token bigint NOT NULL,                 -- the fencing token of the key's last grant\n"
         "  holds integer NOT NULL,                -- re-entries; 0 with an owner: evicted, lock delay\n"
         "  expires_at timestamptz NOT NULL,       -- the lease's end, by the server's clock\n"
         "  acquired_at timestamptz NOT NULL,\n"
         "  waiting boolean NOT NULL DEFAULT false, -- a waiter listens: a release notifies it\n"
         "  permits integer NOT NULL DEFAULT 0,    -- held shared: the semaphore's permits (0: readers)\n"
         "  writer_claim_until timestamptz,        -- a waiting writer holds new readers back\n"
         "  readers_claim_token bigint,            -- readers waiting behind the holder of this token (-1: the next)\n"
         "  readers_claim_until timestamptz        -- ... go before the next writer, until then\n"
         ") WITH (fillfactor = 50);\n"
         "CREATE TABLE IF NOT EXISTS \"" + table + "_shared\" (\n"
         "  key text COLLATE \"C\" NOT NULL,\n"
         "  owner text COLLATE \"C\" NOT NULL,\n"
         "  token bigint NOT NULL,\n"
         "  holds integer NOT NULL,\n"
         "  expires_at timestamptz NOT NULL,\n"
         "  acquired_at timestamptz NOT NULL,\n"
         "  PRIMARY KEY (key, owner)\n"
         ") WITH (fillfactor = 50);\n"
         "CREATE SEQUENCE IF NOT EXISTS \"" + table + "_seq\";\n"
         "-- What clients did, for dlock serve's /metrics: one row, to which each client adds.\n"
         "CREATE TABLE IF NOT EXISTS \"" + table + "_activity\" (\n"
         "  id integer PRIMARY KEY CHECK (id = 1),\n"
         "  acquisitions bigint NOT NULL, conflicts bigint NOT NULL, waits bigint NOT NULL,\n"
         "  wait_us bigint NOT NULL, renewals bigint NOT NULL, losses bigint NOT NULL\n"
         ");\n" +
         shared_functions(table) + session_schema(table);
}

}  // namespace dlock::backends::postgres
