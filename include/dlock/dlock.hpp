#pragma once

// The whole public API of dlock.
#include "dlock/backend.hpp"
#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "dlock/multi_lock.hpp"
#include "dlock/options.hpp"
#include "dlock/shared_lock.hpp"
#include "dlock/types.hpp"
#include "dlock/version.hpp"
#include "dlock/with_lock.hpp"
