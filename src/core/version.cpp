#include "dlock/version.hpp"

namespace dlock {

const char* version() noexcept { return DLOCK_VERSION_STRING; }

}  // namespace dlock
