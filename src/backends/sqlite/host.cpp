#include "backends/sqlite/host.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <ctime>
#include <fstream>
#include <vector>

#include "backends/sqlite/errors.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {

std::int64_t boot_time_us() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (id.empty()) {
    throw ConfigurationError(
        "sqlite:// needs /proc/sys/kernel/random/boot_id to tell leases of an earlier boot (is /proc mounted?)",
        kName);
  }
  return id;
}

void create_parent_directories(const std::filesystem::path& file) {
  std::vector<std::filesystem::path> missing;
  for (auto dir = file.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) path_error("cannot use", dir.string(), ENOTDIR);
      break;
    }
    if (errno != ENOENT) path_error("cannot reach", dir.string(), errno);
    missing.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) path_error("cannot create directory", it->string(), errno);
  }
}

}  // namespace dlock::backends::sqlite
