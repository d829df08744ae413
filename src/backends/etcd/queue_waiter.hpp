#pragma once

// A waiting call's place in a key's queue (Backend::waiter): its node, its watches on the nodes
// it awaits, and the handoff that needs no read where the queue's order allows it.

#include <memory>

#include "backends/etcd/store.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

std::unique_ptr<backend::Waiter> make_queue_waiter(EtcdBackend& backend,
                                                   const backend::AcquireRequest& request);

}  // namespace dlock::backends::etcd
