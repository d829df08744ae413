#pragma once

#include <string_view>

#include "dlock/client.hpp"

namespace dlock::core {

// Sends one line to the handler installed with dlock::set_log_handler (stderr by default).
void log(LogLevel level, std::string_view message) noexcept;

}  // namespace dlock::core
