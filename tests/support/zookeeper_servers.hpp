#pragma once

// Private ZooKeeper servers of one test: a standalone server or an ensemble of N nodes, started
// with scripts/servers/zookeeper.sh in a fresh temporary directory, for cases that kill, pause
// or restart a server and so must not share one. Stopped and removed when the object goes.
//
// Nodes are numbered from 1, as the script numbers them (node 1 is the standalone server).
// Not thread-safe: one thread owns the object (the clients under test may run on others).

#include <filesystem>
#include <string>

namespace dlock::test {

class ZooKeeperServers {
 public:
  // Whether Debian's ZooKeeper is installed (its server jar). Cases skip without it: the
  // script would otherwise install the package.
  static bool installed();

  // Starts `count` nodes (1: standalone) with `script` (scripts/servers/zookeeper.sh), waiting
  // until they serve and an ensemble has its leader. Throws std::runtime_error.
  ZooKeeperServers(std::string script, int count = 1);
  ~ZooKeeperServers();
  ZooKeeperServers(const ZooKeeperServers&) = delete;
  ZooKeeperServers& operator=(const ZooKeeperServers&) = delete;

  // A value of the script's env file (DLOCK_ZK_URL, DLOCK_ZK_PORTS, ...).
  std::string env(const std::string& name) const;
  // zookeeper://127.0.0.1:PORT of node 1, without a path.
  std::string url() const { return url_; }
  // zookeeper://H1:P1,H2:P2,... of every node, without a path; url() for a standalone server.
  std::string ensemble_url() const { return ensemble_url_; }
  int count() const noexcept { return count_; }
  const std::filesystem::path& dir() const noexcept { return dir_; }

  // Sends `signal` ("KILL", "TERM", "STOP", "CONT", ...) to node `node`; after KILL, TERM or
  // INT, returns once the node is gone (it stays down until restart()).
  void kill(int node, const std::string& signal);
  // Starts node `node` again (stopped first if it runs) with its config and data; returns
  // once it serves.
  void restart(int node);
  // The node leading the ensemble now (1 for a standalone server). Throws when none leads.
  int leader() const;

 private:
  // Runs the script with `arguments`; returns its standard output. Throws on a non-zero exit.
  std::string run(const std::string& arguments) const;

  std::string script_;
  std::filesystem::path dir_;
  int count_ = 0;
  std::string url_;
  std::string ensemble_url_;
};

}  // namespace dlock::test
