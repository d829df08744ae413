#pragma once

#include <memory>

#include "core/url.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends {

// local://[NAME]: locks in this process's memory, judged by its steady clock. Clients opened
// with the same NAME share one store (and one fencing sequence) for the life of the process.
std::shared_ptr<backend::Backend> make_local_backend(const core::Url& url);

}  // namespace dlock::backends
