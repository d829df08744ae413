#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// zookeeper://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH][?session_timeout=10s&connect_timeout=10s]
std::shared_ptr<backend::Backend> make_zookeeper_backend(const core::Url& url);

}  // namespace dlock::backends
