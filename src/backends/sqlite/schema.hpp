#pragma once

// The database file's schema, made ready on open: created, migrated from an older version,
// refused if newer than this build knows, and the leases of an earlier boot expired.

#include "backends/sqlite/connection.hpp"

namespace dlock::backends::sqlite {

// In one IMMEDIATE transaction, so concurrent first opens serialize; retried as a whole, as
// concurrent first opens of a new file can get SQLITE_BUSY without the busy handler being
// consulted (switching to WAL needs an exclusive lock). One read when the file is ready.
void set_up_schema(Connection& connection);

}  // namespace dlock::backends::sqlite
