#pragma once

// Private servers of one test, started with a project script (scripts/servers/*.sh) in a fresh
// temporary directory, for cases that kill, pause or restart a server and so must not share
// one. Stopped and removed when the object goes. The script answers the verbs
//   start DIR N, stop DIR, kill DIR I SIGNAL, leader DIR
// (zookeeper.sh, etcd.sh) and writes DIR/env. Members are numbered from 1, as the scripts do.
// Not thread-safe: one thread owns the object (the clients under test may run on others).

#include <filesystem>
#include <string>

namespace dlock::test {

class ScriptedServers {
 public:
  // Starts `count` members with `script`, waiting until they serve (and a cluster has its
  // leader), under a new directory named `name`-XXXXXX. Throws std::runtime_error.
  ScriptedServers(std::string script, const std::string& name, int count);
  ~ScriptedServers();
  ScriptedServers(const ScriptedServers&) = delete;
  ScriptedServers& operator=(const ScriptedServers&) = delete;

  // A value of the script's env file.
  std::string env(const std::string& name) const;
  int count() const noexcept { return count_; }
  const std::filesystem::path& dir() const noexcept { return dir_; }

  // Sends `signal` ("KILL", "TERM", "STOP", "CONT", ...) to member `member`; after KILL, TERM
  // or INT, returns once it is gone.
  void kill(int member, const std::string& signal);
  // The member leading the cluster now (1 for a single server). Throws when none leads.
  int leader() const;

 protected:
  // Runs the script with `arguments`; returns its standard output. Throws on a non-zero exit.
  std::string run(const std::string& arguments) const;

 private:
  std::string script_;
  std::filesystem::path dir_;
  int count_ = 0;
};

}  // namespace dlock::test
