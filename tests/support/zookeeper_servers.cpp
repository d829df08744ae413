#include "support/zookeeper_servers.hpp"

#include <filesystem>
#include <string>

namespace dlock::test {

bool ZooKeeperServers::installed() {
  std::error_code error;
  return std::filesystem::exists("/usr/share/java/zookeeper.jar", error);
}

ZooKeeperServers::ZooKeeperServers(std::string script, int count)
    : ScriptedServers(std::move(script), "dlock-zk", count),
      url_(env("DLOCK_ZK_URL")),
      ensemble_url_(count > 1 ? env("DLOCK_ZK_ENSEMBLE_URL") : url_) {}

void ZooKeeperServers::restart(int node) { run("restart '" + dir().string() + "' " + std::to_string(node)); }

}  // namespace dlock::test
