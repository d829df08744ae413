#pragma once

// Lease mode's statements, built once for the client's table. Every time is the server's:
// clock_timestamp(), never the caller's clock. Parameters are text; lease_sql.cpp says what
// each statement takes and returns. Shared holds (read-write locks, semaphores) go through
// PL/pgSQL functions the DDL makes beside the tables (shared_sql.cpp).

#include <string>

namespace dlock::backends::postgres {

struct LeaseSql {
  explicit LeaseSql(const std::string& table);

  std::string acquire;          // a try-once attempt: the row taken, re-entered, or nothing
  std::string acquire_waiting;  // a waiter's attempt: takes the key, or marks that a waiter listens
  std::string renew;
  std::string release;        // one hold of a live lease
  std::string release_stale;  // an expired or evicted holder's release: frees the key
  std::string inspect;        // every live holder of a key, exclusive or shared
  std::string list;
  std::string collect_begin;  // opens clean-up's transaction
  std::string collect_idle;   // then deletes the free rows: returns how many
  // Shared holds and force-release: calls of the functions of shared_sql.cpp.
  std::string shared_take;
  std::string shared_renew;
  std::string shared_free;
  std::string evict;
};

// The DDL of the lock tables, their sequence and functions (`dlock schema postgres`).
std::string lock_table_schema(const std::string& table);
// The functions' part of it.
std::string shared_functions(const std::string& table);

}  // namespace dlock::backends::postgres
