#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// redlock://[user:password@]host1:port,host2:port,host3:port[/db][?…]: a lock is held while a
// majority of N independent Redis servers (7.0 or later) hold it for the same owner, taken
// within the lease's validity time; fencing tokens rise across acquisitions by the quorums'
// intersection. See src/backends/redlock/README.md.
std::shared_ptr<backend::Backend> make_redlock_backend(const core::Url& url);

}  // namespace dlock::backends
