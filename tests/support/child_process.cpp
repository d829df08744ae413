#include "support/child_process.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

extern char** environ;

namespace dlock::test {

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) {
    pid_ = -1;
    throw std::system_error(rc, std::generic_category(), "posix_spawn " + argv.at(0));
  }
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
  other.status_.reset();
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0 || status_) return;
  ::kill(pid_, SIGKILL);
  try_reap(true);
}

void ChildProcess::kill(int signal) const {
  if (pid_ > 0 && !status_) ::kill(pid_, signal);
}

bool ChildProcess::try_reap(bool block) {
  if (pid_ <= 0) return true;
  if (status_) return true;
  int status = 0;
  for (;;) {
    const pid_t rc = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (rc == pid_) break;
    if (rc == 0) return false;
    if (errno == EINTR) continue;
    status_ = -1;  // not our child any more (should not happen)
    return true;
  }
  if (WIFEXITED(status)) {
    status_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    status_ = 128 + WTERMSIG(status);
  } else {
    status_ = -1;
  }
  return true;
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!try_reap(false)) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status_;
}

int ChildProcess::wait() {
  try_reap(true);
  return *status_;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::system_error(errno, std::generic_category(), "write " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "rename " + temp);
  }
}

}  // namespace dlock::test
