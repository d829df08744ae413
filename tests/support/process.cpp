#include "support/process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

extern char** environ;

namespace dlock::test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

#ifndef DLOCK_BINARY
#error "DLOCK_BINARY must name the dlock binary built beside the tests"
#endif

const char* dlock_binary() {
  static const char* const binary = [] {
    const char* other = std::getenv("DLOCK_TEST_BINARY");  // NOLINT(concurrency-mt-unsafe): read once
    return other && *other ? other : DLOCK_BINARY;
  }();
  return binary;
}

std::string describe(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& arg : argv) text += (text.empty() ? "" : " ") + arg;
  return text;
}

Process::Process(const std::vector<std::string>& argv, const std::vector<std::string>& env)
    : command_(describe(argv)), start_(Clock::now()) {
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  // A test runner started in the background may have SIGINT ignored; dlock must not inherit that.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signo : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) sigaddset(&defaults, signo);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const auto& var : env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (rc != 0)
    throw std::runtime_error("posix_spawn " + command_ + " failed: " + std::generic_category().message(rc));
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Process::signal(int signo) const { ::kill(pid_, signo); }

std::optional<std::string> Process::first_line(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto end = result_.out.find('\n');
    if (end != std::string::npos) return result_.out.substr(0, end);
    if (out_fd_ < 0 || Clock::now() >= deadline) return std::nullopt;
    drain(20);
  }
}

Result Process::wait(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  for (;;) {
    drain(20);
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << command_ << " still running after " << timeout.count() << " ms; killing it";
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
  }
  reaped_ = true;
  result_.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start_);
  drain(0);
  result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result_;
}

void Process::drain(int timeout_ms) {
  for (;;) {
    std::vector<pollfd> fds;
    for (int fd : {out_fd_, err_fd_}) {
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(milliseconds(timeout_ms));
      return;
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    for (const auto& ready : fds) {
      if (ready.revents == 0) continue;
      int& fd = ready.fd == out_fd_ ? out_fd_ : err_fd_;
      char buffer[4096];
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n > 0) {
        (&fd == &out_fd_ ? result_.out : result_.err).append(buffer, static_cast<std::size_t>(n));
      } else {
        ::close(fd);
        fd = -1;
      }
    }
    timeout_ms = 0;
  }
}

bool is_dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

std::vector<pid_t> keepers_of(const std::string& key) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::vector<std::string> args;
    for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
    const auto has = [&](const std::string& arg) {
      return std::find(args.begin(), args.end(), arg) != args.end();
    };
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (has("acquire") && has(key) && !is_dead(pid)) pids.push_back(pid);
  }
  return pids;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string make_temp_dir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
  return pattern;
}

std::vector<std::string> environment_without_dlock(const std::vector<std::string>& extra) {
  std::vector<std::string> vars;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!std::string_view(*entry).starts_with("DLOCK_")) vars.emplace_back(*entry);
  }
  vars.insert(vars.end(), extra.begin(), extra.end());
  return vars;
}

}  // namespace dlock::test
