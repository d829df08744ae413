#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?ttl=10s&connect_timeout=10s]
std::shared_ptr<backend::Backend> make_etcd_backend(const core::Url& url);

}  // namespace dlock::backends
