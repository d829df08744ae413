#include "support/scripted_servers.hpp"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace dlock::test {

ScriptedServers::ScriptedServers(std::string script, const std::string& name, int count)
    : script_(std::move(script)), count_(count) {
  std::string dir = (std::filesystem::temp_directory_path() / (name + "-XXXXXX")).string();
  if (!::mkdtemp(dir.data())) throw std::runtime_error("cannot make a temporary directory for " + name);
  dir_ = dir;
  try {
    run("start '" + dir_.string() + "' " + std::to_string(count));
  } catch (...) {
    const std::string stop = script_ + " stop '" + dir_.string() + "'";
    (void)std::system(stop.c_str());  // NOLINT(concurrency-mt-unsafe)
    std::filesystem::remove_all(dir_);
    throw;
  }
}

ScriptedServers::~ScriptedServers() {
  const std::string stop = script_ + " stop '" + dir_.string() + "'";
  (void)std::system(stop.c_str());  // NOLINT(concurrency-mt-unsafe)
  std::error_code error;
  std::filesystem::remove_all(dir_, error);
}

std::string ScriptedServers::run(const std::string& arguments) const {
  const std::string line = script_ + " " + arguments;
  FILE* pipe = ::popen(line.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run: " + line);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("failed (status " + std::to_string(status) + "): " + line);
  }
  return out;
}

std::string ScriptedServers::env(const std::string& name) const {
  std::ifstream file(dir_ / "env");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind(name + "=", 0) != 0) continue;
    std::string value = line.substr(name.size() + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    return value;
  }
  throw std::runtime_error(name + " is not in " + (dir_ / "env").string());
}

void ScriptedServers::kill(int member, const std::string& signal) {
  run("kill '" + dir_.string() + "' " + std::to_string(member) + " " + signal);
}

int ScriptedServers::leader() const {
  const std::string out = run("leader '" + dir_.string() + "'");
  try {
    return std::stoi(out);
  } catch (const std::exception&) {
    throw std::runtime_error(script_ + " leader printed '" + out + "'");
  }
}

}  // namespace dlock::test
