#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// sqlite:///abs/path.db or sqlite://relative/path.db[?busy_timeout=10s]: leases in a SQLite
// file shared by the processes of one host (never on NFS), judged by the host's boot-time
// clock, with futex wake-ups through PATH-wake. See src/backends/sqlite/README.md.
// Throws ConfigurationError when the path is empty or cannot be used as a database.
std::shared_ptr<backend::Backend> make_sqlite_backend(const core::Url& url);

}  // namespace dlock::backends
