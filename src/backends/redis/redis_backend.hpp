#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// redis://[user:password@]host[:port][/db][?fair=true&connect_timeout=2s&command_timeout=5s]:
// leases in one Redis server (7.0 or later), each acquire, renew and release one Lua script
// judged by the server's clock; waiters queue per key and the release hands the key to the
// first of them. rediss:// is refused: hiredis 0.14 has no TLS. See src/backends/redis/README.md.
std::shared_ptr<backend::Backend> make_redis_backend(const core::Url& url);

}  // namespace dlock::backends
