#pragma once

// What sqlite:// takes from the host rather than from SQLite: the clock leases are judged by,
// the id of the boot that clock counts from, and the directories the database file goes in.

#include <cstdint>
#include <filesystem>
#include <string>

namespace dlock::backends::sqlite {

// The host-wide clock every process on this host shares; it does not jump with NTP and keeps
// counting through suspend. It restarts at boot, hence the boot id in dlock_meta.
std::int64_t boot_time_us() noexcept;

// The kernel's id of the current boot. Throws ConfigurationError when /proc does not tell it.
std::string read_boot_id();

// mkdir -p, making only the directories that are missing, each private to this user. Throws
// ConfigurationError naming the directory that cannot be reached or made.
void create_parent_directories(const std::filesystem::path& file);

}  // namespace dlock::backends::sqlite
