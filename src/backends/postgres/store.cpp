#include "backends/postgres/store.hpp"

#include <cstdint>

#include "backends/postgres/lease_sql.hpp"
#include "core/stable_hash.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::postgres {

void Store::create_tables(Connection& connection, const PgError& missing) {
  const auto& c = settings_.connect;
  const std::string ddl = "dlock schema postgres --table " + settings_.table;
  if (!settings_.create_table) {
    throw ConfigurationError("the lock tables of '" + settings_.table + "' are missing in database '" + c.database +
                                 "' of " + c.redacted_url + " (create_table=false): create them with the DDL `" + ddl +
                                 "` prints (" + missing.message + ")",
                             kName);
  }
  try {
    // One client at a time (the statements run as one transaction, which holds the advisory
    // lock to its end): PostgreSQL's CREATE ... IF NOT EXISTS and CREATE OR REPLACE FUNCTION
    // can fail when another session runs them at the same moment.
    const auto serial = static_cast<std::int64_t>(core::stable_hash("create\n" + settings_.table));
    connection.run("SELECT pg_advisory_xact_lock(" + std::to_string(serial) + ");\n" +
                   lock_table_schema(settings_.table));
  } catch (const PgError& e) {
    if (e.sqlstate == kInsufficientPrivilege) {
      throw ConfigurationError("the lock tables of '" + settings_.table + "' are missing in database '" + c.database +
                                   "' and user '" + c.user + "' may not create them (" + e.message +
                                   "): have the database's owner run the DDL `" + ddl +
                                   "` prints, and GRANT this user SELECT, INSERT, UPDATE, DELETE on them and USAGE on " +
                                   settings_.table + "_seq",
                               kName);
    }
    // Another client made them at the same moment: the statement will find them.
    if (e.sqlstate != kUniqueViolation && e.sqlstate != kDuplicateTable && e.sqlstate != kDuplicateObject) throw;
  }
}

}  // namespace dlock::backends::postgres
