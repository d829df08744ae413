#include "cli/store_probe.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace dlock::cli {
namespace {

// The child's answer: the capabilities' bytes (one binary on both ends), then the name.
static_assert(std::is_trivially_copyable_v<backend::Capabilities>);

std::string answer_of(const GlobalOptions& global) {
  const Client client = open_client(global);
  const backend::Capabilities capabilities = client.capabilities();
  std::string answer(sizeof capabilities, '\0');
  std::memcpy(answer.data(), &capabilities, sizeof capabilities);
  return answer.append(client.backend_name());
}

}  // namespace

std::optional<StoreTraits> store_traits_in_child(const GlobalOptions& global) {
  std::fflush(nullptr);  // or the child would write out this process's buffered output again
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::close(fds[0]);
    try {
      const std::string answer = answer_of(global);
      const bool sent = ::write(fds[1], answer.data(), answer.size()) == static_cast<ssize_t>(answer.size());
      ::_exit(sent ? 0 : 1);
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(fds[1]);
  std::string answer;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || answer.size() <= sizeof(backend::Capabilities)) {
    return std::nullopt;
  }
  StoreTraits traits;
  std::memcpy(&traits.capabilities, answer.data(), sizeof traits.capabilities);
  traits.name = answer.substr(sizeof traits.capabilities);
  return traits;
}

}  // namespace dlock::cli
