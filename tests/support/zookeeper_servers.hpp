#pragma once

// Private ZooKeeper servers of one test: a standalone server or an ensemble of N nodes, started
// with scripts/servers/zookeeper.sh (support/scripted_servers.hpp). Node 1 is the standalone
// server.

#include <string>

#include "support/scripted_servers.hpp"

namespace dlock::test {

class ZooKeeperServers : public ScriptedServers {
 public:
  // Whether Debian's ZooKeeper is installed (its server jar). Cases skip without it: the
  // script would otherwise install the package.
  static bool installed();

  // Starts `count` nodes (1: standalone) with `script` (scripts/servers/zookeeper.sh), waiting
  // until they serve and an ensemble has its leader. Throws std::runtime_error.
  ZooKeeperServers(std::string script, int count = 1);

  // zookeeper://127.0.0.1:PORT of node 1, without a path.
  std::string url() const { return url_; }
  // zookeeper://H1:P1,H2:P2,... of every node, without a path; url() for a standalone server.
  std::string ensemble_url() const { return ensemble_url_; }

  // Starts node `node` again (stopped first if it runs) with its config and data; returns
  // once it serves.
  void restart(int node);

 private:
  std::string url_;
  std::string ensemble_url_;
};

}  // namespace dlock::test
