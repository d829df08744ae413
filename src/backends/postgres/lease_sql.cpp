#include "backends/postgres/lease_sql.hpp"

namespace dlock::backends::postgres {
namespace {

// A key is free when no one owns it or its lease has ended; an owner with no holds is a holder
// evicted with a lock delay, which keeps the key closed until its lease ends.
// In the upsert, EXCLUDED.acquired_at is the statement's one reading of the clock (read before
// it waits for the row's lock, so it errs towards a lease still live, and a new lease shorter).
constexpr const char* kFree = "(l.owner = '' OR l.expires_at <= EXCLUDED.acquired_at)";
constexpr const char* kReentry =
    "(l.owner = EXCLUDED.owner AND l.holds > 0 AND l.expires_at > EXCLUDED.acquired_at)";
constexpr const char* kTtlLeft =
    "GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000))::bigint";
constexpr const char* kHeldFor =
    "GREATEST(0, FLOOR(EXTRACT(EPOCH FROM (clock_timestamp() - acquired_at)) * 1000))::bigint";
constexpr const char* kLive = "owner <> '' AND expires_at > clock_timestamp()";

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

LeaseSql::LeaseSql(const std::string& table) {
  const std::string t = "\"" + table + "\"";
  const std::string seq = "'\"" + table + "_seq\"'";
  const std::string free = kFree;
  const std::string reentry = kReentry;
  // $1 key, $2 owner, $3 ttl (ms). A new row's token comes from the sequence, which clean-up
  // raises above every token it deletes; a taken row's is the row's last plus one.
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
            "acquired_at = CASE WHEN {R} THEN l.acquired_at ELSE EXCLUDED.acquired_at END "
            "WHERE {F} OR {R} RETURNING token, holds";
  // The same, but a busy key's row is written too: `waiting` tells the holder's release to
  // notify the key's channel, in the same atomic step that found the key busy, so no release
  // can slip between this attempt and the waiter's wait unseen. Returns ours (t/f), the row's
  // owner, token, holds, ttl left and time held.
  acquire_waiting = insert +
                    "token = CASE WHEN {R} THEN l.token WHEN {F} THEN l.token + 1 ELSE l.token END, "
                    "holds = CASE WHEN {R} THEN l.holds + 1 WHEN {F} THEN 1 ELSE l.holds END, "
                    "owner = CASE WHEN {R} OR {F} THEN EXCLUDED.owner ELSE l.owner END, "
                    "expires_at = CASE WHEN {R} THEN GREATEST(l.expires_at, EXCLUDED.expires_at) "
                    "WHEN {F} THEN EXCLUDED.expires_at ELSE l.expires_at END, "
                    "acquired_at = CASE WHEN {F} AND NOT {R} THEN EXCLUDED.acquired_at ELSE l.acquired_at END, "
                    "waiting = NOT ({R} OR {F}) "
                    "RETURNING owner = $2 AND holds > 0, owner, token, holds, " + std::string(kTtlLeft) + ", " +
                    kHeldFor;
  acquire = replace_all(replace_all(acquire, "{R}", reentry), "{F}", free);
  acquire_waiting = replace_all(replace_all(acquire_waiting, "{R}", reentry), "{F}", free);
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
  // $1 key: owner, token, holds, ttl left, time held of the live holder.
  inspect = "SELECT owner, token, holds, " + std::string(kTtlLeft) + ", " + kHeldFor + " FROM " + t +
            " WHERE key = $1 AND " + kLive;
  // $1 prefix, $2 after, $3 most rows: key, then as inspect.
  list = "SELECT key, owner, token, holds, " + std::string(kTtlLeft) + ", " + kHeldFor + " FROM " + t +
         " WHERE key >= $1 AND key > $2 AND starts_with(key, $1) AND " + kLive + " ORDER BY key LIMIT $3::bigint";
  // $1 key, $2 token or NULL for any, $3 the key's channel: as inspect, for the holder evicted.
  const std::string evicted = "WITH old AS (SELECT key, owner, token, holds, " + std::string(kTtlLeft) + " AS ttl, " +
                              kHeldFor + " AS held FROM " + t + " WHERE key = $1 AND " + kLive +
                              " AND ($2::bigint IS NULL OR token = $2::bigint) FOR UPDATE) UPDATE " + t + " l SET ";
  force_immediate = evicted +
                    "owner = '', holds = 0 FROM old WHERE l.key = old.key "
                    "RETURNING old.owner, old.token, old.holds, old.ttl, old.held, "
                    "CASE WHEN l.waiting THEN pg_notify($3, '') END";
  force_delayed = evicted + "holds = 0 FROM old WHERE l.key = old.key RETURNING old.owner, old.token, old.holds, old.ttl, old.held";
  // Clean-up, in one transaction that keeps every writer out (an acquire that read the
  // sequence before the delete would otherwise insert below a deleted token): the sequence is
  // raised to the largest token deleted, then the free rows go. now() is the transaction's
  // start, the same in both statements.
  const std::string idle = "(owner = '' OR expires_at <= now())";
  collect_begin = "BEGIN; LOCK TABLE " + t + " IN SHARE ROW EXCLUSIVE MODE; SELECT setval(" + seq +
                  ", GREATEST((SELECT last_value FROM \"" + table + "_seq\"), (SELECT max(token) FROM " + t + " WHERE " +
                  idle + ")))";
  collect_idle = "WITH d AS (DELETE FROM " + t + " WHERE " + idle + " RETURNING 1) SELECT count(*) FROM d";
}

std::string lock_table_schema(const std::string& table) {
  return "-- The lock table of postgres:// lease mode, and the sequence that starts new keys' fencing\n"
         "-- tokens. Keys and owners are text compared bytewise (COLLATE \"C\"). A low fillfactor keeps\n"
         "-- a key's updates on its page (HOT updates: no index write).\n"
         "CREATE TABLE IF NOT EXISTS \"" + table + "\" (\n"
         "  key text COLLATE \"C\" PRIMARY KEY,\n"
         "  owner text COLLATE \"C\" NOT NULL,       -- '' when free\n"
         "  token bigint NOT NULL,                 -- the fencing token of the key's last acquisition\n"
         "  holds integer NOT NULL,                -- re-entries; 0 with an owner: evicted, lock delay\n"
         "  expires_at timestamptz NOT NULL,       -- the lease's end, by the server's clock\n"
         "  acquired_at timestamptz NOT NULL,\n"
         "  waiting boolean NOT NULL DEFAULT false  -- a waiter listens: the last release notifies it\n"
         ") WITH (fillfactor = 50);\n"
         "CREATE SEQUENCE IF NOT EXISTS \"" + table + "_seq\";\n"
         "-- What clients did, for dlock serve's /metrics: one row, to which each client adds.\n"
         "CREATE TABLE IF NOT EXISTS \"" + table + "_activity\" (\n"
         "  id integer PRIMARY KEY CHECK (id = 1),\n"
         "  acquisitions bigint NOT NULL, conflicts bigint NOT NULL, waits bigint NOT NULL,\n"
         "  wait_us bigint NOT NULL, renewals bigint NOT NULL, losses bigint NOT NULL\n"
         ");\n";
}

}  // namespace dlock::backends::postgres
