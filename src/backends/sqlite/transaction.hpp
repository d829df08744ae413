#pragma once

// A write transaction on a connection: BEGIN IMMEDIATE, rolled back unless committed (an error,
// or an answer that must change nothing). Its statements are cached like the others, so a
// transaction costs no parsing.

#include "backends/sqlite/connection.hpp"
#include "backends/sqlite/statements.hpp"

namespace dlock::backends::sqlite {

class Transaction {
 public:
  explicit Transaction(Connection& connection) : connection_(connection) {
    Query(connection_, statements::kBegin).run();
  }
  ~Transaction() {
    if (!open_) return;
    sqlite3_stmt* rollback = connection_.cached(statements::kRollback);
    sqlite3_step(rollback);
    sqlite3_reset(rollback);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  void commit() {
    Query(connection_, statements::kCommit).run();
    open_ = false;
  }

 private:
  Connection& connection_;
  bool open_ = true;
};

}  // namespace dlock::backends::sqlite
