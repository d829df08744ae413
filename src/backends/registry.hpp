#pragma once

// The one explicit list of backends built into this library (static self-registration is
// silently dropped by static linking, so there is none).

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// Throws ConfigurationError for an unknown scheme, naming the schemes built in.
std::shared_ptr<backend::Backend> open_backend(const core::Url& url);

}  // namespace dlock::backends
