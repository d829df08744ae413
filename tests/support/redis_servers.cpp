#include "support/redis_servers.hpp"

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dlock::test {

RedisServers::RedisServers(std::string script, int count) : script_(std::move(script)) {
  dir_ = std::filesystem::temp_directory_path() / ("dlock-redis-" + std::to_string(std::random_device{}()));
  run(" start '" + dir_.string() + "' " + std::to_string(count) + " >/dev/null");
  std::istringstream urls(env("DLOCK_REDIS_URLS"));
  for (std::string url; urls >> url;) urls_.push_back(url);
  if (urls_.size() != static_cast<std::size_t>(count)) throw std::runtime_error("redis.sh started too few servers");
}

RedisServers::~RedisServers() {
  const std::string stop = script_ + " stop '" + dir_.string() + "'";
  (void)std::system(stop.c_str());  // NOLINT(concurrency-mt-unsafe)
  std::filesystem::remove_all(dir_);
}

void RedisServers::run(const std::string& command) const {
  const std::string line = script_ + command;
  if (std::system(line.c_str()) != 0) throw std::runtime_error("failed: " + line);  // NOLINT(concurrency-mt-unsafe)
}

std::string RedisServers::env(const std::string& name) const {
  std::ifstream file(dir_ / "env");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind(name + "=", 0) != 0) continue;
    std::string value = line.substr(name.size() + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return value;
  }
  throw std::runtime_error(name + " is not in " + (dir_ / "env").string());
}

std::string RedisServers::url(int index) const { return urls_.at(static_cast<std::size_t>(index)); }

int RedisServers::pid(int index) const {
  std::ifstream file(dir_ / std::to_string(index + 1) / "redis.pid");
  int pid = 0;
  if (!(file >> pid) || pid <= 0) throw std::runtime_error("no pid for redis instance " + std::to_string(index));
  return pid;
}

void RedisServers::kill(int index) {
  const int victim = pid(index);
  ::kill(victim, SIGKILL);
  // Gone once it is no process or a zombie (the daemon's parent may never reap it).
  for (int i = 0; i < 500 && ::kill(victim, 0) == 0; ++i) {
    std::ifstream stat("/proc/" + std::to_string(victim) + "/stat");
    std::string field, state;
    if (stat >> field >> field >> state && state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void RedisServers::pause(int index) { ::kill(pid(index), SIGSTOP); }
void RedisServers::resume(int index) { ::kill(pid(index), SIGCONT); }

void RedisServers::restart(int index) {
  run(" restart '" + dir_.string() + "' " + std::to_string(index + 1) + " >/dev/null");
}

}  // namespace dlock::test
