// Fencing a database write with the lock's token.
//
// A lock alone cannot stop a holder that paused past the end of its lease (GC, swap, a slow
// disk, a partition) from writing once it resumes, after the next holder has written: it still
// believes it holds the lock. The database can stop it. Each acquisition's fencing token is
// greater than every earlier one's, so the table keeps the token of the last write beside the
// data, and the write itself refuses an older token.
//
// Here two holders take the lock in turn, the first losing it while it pauses (force-released,
// as an operator would; an expired lease is the same), and the first one's late write is refused.
//   DLOCK_URL=sqlite:///tmp/locks.db ./fencing /tmp/reports.db
#include <dlock/dlock.hpp>
#include <sqlite3.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace {

using Database = std::unique_ptr<sqlite3, decltype(&sqlite3_close)>;

Database open_database(const char* path) {
  sqlite3* handle = nullptr;
  const int rc = sqlite3_open(path, &handle);
  Database db(handle, &sqlite3_close);
  if (rc != SQLITE_OK) throw std::runtime_error(std::string("cannot open ") + path + ": " + sqlite3_errmsg(handle));
  const char* schema =
      "CREATE TABLE IF NOT EXISTS reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER NOT NULL);"
      "INSERT OR IGNORE INTO reports (id, body, fence) VALUES (1, '', 0);";
  if (sqlite3_exec(db.get(), schema, nullptr, nullptr, nullptr) != SQLITE_OK) {
    throw std::runtime_error(std::string("cannot create the table: ") + sqlite3_errmsg(db.get()));
  }
  return db;
}

// Writes the report unless a holder with a newer token already has. The check and the write are
// one statement, so nothing can come between them. `<=`, not `<`: one holder may write more
// than once with its token.
bool write_report(sqlite3* db, const std::string& body, std::uint64_t token) {
  sqlite3_stmt* raw = nullptr;
  sqlite3_prepare_v2(db, "UPDATE reports SET body = ?1, fence = ?2 WHERE id = 1 AND fence <= ?2", -1, &raw,
                     nullptr);
  std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> statement(raw, &sqlite3_finalize);
  sqlite3_bind_text(raw, 1, body.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(raw, 2, static_cast<sqlite3_int64>(token));
  if (sqlite3_step(raw) != SQLITE_DONE) throw std::runtime_error(std::string("write failed: ") + sqlite3_errmsg(db));
  return sqlite3_changes(db) == 1;
}

dlock::LockOptions owned_by(std::string owner) {
  dlock::LockOptions options;
  options.owner = std::move(owner);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fencing DATABASE_FILE   (the lock store: $DLOCK_URL)\n");
    return 64;
  }
  const Database db = open_database(argv[1]);
  const auto client = dlock::Client::open();
  const std::string key = "examples/report-1";

  dlock::Lease first = client.acquire(key, owned_by("writer-a"));
  std::printf("writer-a holds %s with token %llu, and pauses\n", key.c_str(),
              static_cast<unsigned long long>(first.token()));
  client.force_release(key, dlock::Eviction::immediate);  // its lease ends while it is paused

  dlock::Lease second = client.acquire(key, owned_by("writer-b"));
  const bool b_written = write_report(db.get(), "written by writer-b", second.token());
  std::printf("writer-b holds it with token %llu; its write is %s\n",
              static_cast<unsigned long long>(second.token()), b_written ? "accepted" : "REFUSED");

  // writer-a resumes, unaware, and writes with its old token.
  const bool a_written = write_report(db.get(), "written by writer-a", first.token());
  std::printf("writer-a's late write with token %llu is %s\n", static_cast<unsigned long long>(first.token()),
              a_written ? "ACCEPTED: the data is corrupt" : "refused");
  try {
    first.release();
  } catch (const dlock::LockLostError& e) {  // release tells it the section was not exclusive
    std::printf("writer-a learns at release: %s\n", e.what());
  }
  return b_written && !a_written ? 0 : 1;
}
