#pragma once

// Private Redis servers of one test (scripts/servers/redis.sh start DIR N in a temporary
// directory), for cases that kill or restart a server and so must not share one. Stopped and
// removed when the object goes.

#include <filesystem>
#include <string>
#include <vector>

namespace dlock::test {

class RedisServers {
 public:
  // Starts `count` instances with `script` (scripts/servers/redis.sh). Throws std::runtime_error.
  RedisServers(std::string script, int count);
  ~RedisServers();
  RedisServers(const RedisServers&) = delete;
  RedisServers& operator=(const RedisServers&) = delete;

  // A value of the script's env file: DLOCK_REDIS_URL, DLOCK_REDLOCK_URL, ...
  std::string env(const std::string& name) const;
  // redis:// of instance `index` (0-based).
  std::string url(int index) const;
  // SIGKILL to instance `index`; it stays down until restart().
  void kill(int index);
  // Starts instance `index` again (killed or not) on its port, without its data.
  void restart(int index);
  // SIGSTOP and SIGCONT: a server that takes connections but answers nothing meanwhile.
  void pause(int index);
  void resume(int index);

 private:
  void run(const std::string& command) const;
  int pid(int index) const;

  std::string script_;
  std::filesystem::path dir_;
  std::vector<std::string> urls_;
};

}  // namespace dlock::test
