#pragma once

// Session mode's statements, built once for the client's table (session_sql.cpp says what each
// takes and returns). The lock is a session advisory lock of the holder's own connection; an
// UNLOGGED table beside it keeps what the lock cannot (owner, hold count, token, which
// connection holds it), so neither acquire nor release writes anything durable. Tokens are an
// epoch times 2^40 plus a count: the epoch, in a logged table, rises when the unlogged token
// floor is found missing (a crash empties unlogged tables; a clean restart keeps them).

#include <cstdint>
#include <string>
#include <string_view>

namespace dlock::backends::postgres {

struct SessionSql {
  explicit SessionSql(const std::string& table);

  std::string take_fast;  // the common acquisition, one plain statement: the key's free or left row taken
  std::string take;     // any exclusive attempt: acquired, busy, or 'epoch' (start one, then attempt again)
  std::string shared_take;  // any shared attempt: the same, or 'permits' (the key's holders took others)
  std::string epoch;    // starts an epoch: raises it durably and sets the token floor
  std::string renew;    // the holder's lease end, for a lock delay and for inspect
  std::string shared_renew;
  std::string free_fast;  // the common release, one plain statement: the last hold, on the holder's connection
  std::string free;     // one hold; the last gives the advisory lock back (or ends its session)
  std::string shared_free;
  std::string inspect;  // the key's live holders
  std::string list;
  std::string evict;    // force-release: immediate ends the holders' sessions
  std::string collect_idle;  // deletes the free rows, raising the floor: returns how many
};

// The advisory lock of a key: a 64-bit hash of the table and the key. Two keys may share one
// (they then wait for each other, nothing more: owner, holds and token are the key's row's).
std::int64_t session_lock_id(const std::string& table, std::string_view key);

// The session tables and functions, part of `dlock schema postgres`.
std::string session_schema(const std::string& table);

}  // namespace dlock::backends::postgres
