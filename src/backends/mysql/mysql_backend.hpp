#pragma once

#include <memory>
#include <string>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// mysql://user:password@host[:port]/database[?table=dlock_locks&...] (also mariadb://): leases
// in an InnoDB table, each acquire, renew and release one statement judged by the server's
// clock, waiters woken through a GET_LOCK doorbell. See src/backends/mysql/README.md.
std::shared_ptr<backend::Backend> make_mysql_backend(const core::Url& url);

// The DDL `dlock schema mysql` prints, for teams whose DBAs create tables themselves: the
// lock table of lease and session modes, or for row mode the lock columns to add to `table`.
std::string mysql_schema(const std::string& mode, const std::string& table);

}  // namespace dlock::backends
