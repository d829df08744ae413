#pragma once

// Lease mode's statements, built once for the client's table. Every time is the server's:
// clock_timestamp(), never the caller's clock. Parameters are text; the comments in
// lease_sql.cpp say what each takes and returns.

#include <string>

namespace dlock::backends::postgres {

struct LeaseSql {
  explicit LeaseSql(const std::string& table);

  std::string acquire;          // a try-once attempt: the row taken, re-entered, or nothing
  std::string acquire_waiting;  // a waiter's attempt: takes the key, or marks that a waiter listens
  std::string renew;
  std::string release;        // one hold of a live lease
  std::string release_stale;  // an expired or evicted holder's release: frees the key
  std::string inspect;
  std::string list;
  std::string force_immediate;
  std::string force_delayed;
  std::string collect_begin;  // opens clean-up's transaction
  std::string collect_idle;   // then deletes the free rows: returns how many
};

// The DDL of the lock table and its sequence (`dlock schema postgres`).
std::string lock_table_schema(const std::string& table);

}  // namespace dlock::backends::postgres
