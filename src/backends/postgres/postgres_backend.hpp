#pragma once

#include <memory>
#include <string>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// postgres://user:password@host:5432/database?mode=lease&table=…&sslmode=…&connect_timeout=…
// (postgresql:// too). src/backends/postgres/README.md has the options and the design.
std::shared_ptr<backend::Backend> make_postgres_backend(const core::Url& url);

// The DDL `dlock schema postgres` prints: the lock table and its sequence.
std::string postgres_schema(const std::string& table);

}  // namespace dlock::backends
