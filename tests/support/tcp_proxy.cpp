#include "support/tcp_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <list>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace dlock::test {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "tcp proxy: " + what);
}

sockaddr_in address(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    throw std::runtime_error("tcp proxy: '" + host + "' is not an IPv4 address");
  }
  return addr;
}

// One direction of a connection: bytes read from `from` wait in `pending` until `to` takes them.
struct Direction {
  int from;
  int to;
  std::string pending;
};

// A client's connection and the proxy's to the server, relayed both ways; closed on the first
// EOF or error of either, which is all the clients under test need.
struct Link {
  Link(int client, int server) : up{client, server, {}}, down{server, client, {}} {}
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link() {
    ::close(up.from);
    ::close(up.to);
  }
  Direction up;
  Direction down;
  bool open = true;
};

// Moves what it can without blocking; false once the link should close.
bool relay(Direction& d, short from_events) {
  if ((from_events & (POLLIN | POLLHUP | POLLERR)) != 0 && d.pending.empty()) {
    char buffer[16384];
    const ssize_t n = ::read(d.from, buffer, sizeof buffer);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
    if (n > 0) d.pending.assign(buffer, static_cast<std::size_t>(n));
  }
  if (!d.pending.empty()) {
    const ssize_t n = ::send(d.to, d.pending.data(), d.pending.size(), MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (n > 0) d.pending.erase(0, static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

TcpProxy::TcpProxy(std::string host, int port) : host_(std::move(host)), target_port_(port) {
  address(host_, target_port_);  // checked now rather than at the first connection
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener_ < 0) fail("socket");
  sockaddr_in local = address("127.0.0.1", 0);
  socklen_t length = sizeof local;
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    const int error = errno;
    ::close(listener_);
    errno = error;
    fail("listen on 127.0.0.1");
  }
  port_ = ntohs(local.sin_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    ::close(listener_);
    fail("eventfd");
  }
  thread_ = std::thread([this] { run(); });
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  wake();
  thread_.join();
  ::close(wake_fd_);
  ::close(listener_);
}

void TcpProxy::partition() {
  std::lock_guard lock(mutex_);
  partitioned_ = true;
  wake();
}

void TcpProxy::cut_answers() {
  std::lock_guard lock(mutex_);
  answers_cut_ = true;
  wake();
}

void TcpProxy::heal() {
  std::lock_guard lock(mutex_);
  partitioned_ = false;
  answers_cut_ = false;
  wake();
}

void TcpProxy::sever() {
  std::lock_guard lock(mutex_);
  sever_ = true;
  partitioned_ = false;
  answers_cut_ = false;
  wake();
}

void TcpProxy::wake() const {
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    // Only fails when the counter is saturated: the poll wakes either way.
  }
}

void TcpProxy::run() {
  std::list<Link> links;
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    bool partitioned = false;
    bool answers_cut = false;
    {
      std::lock_guard lock(mutex_);
      if (std::exchange(sever_, false)) links.clear();
      partitioned = partitioned_;
      answers_cut = answers_cut_;
    }
    // Partitioned, only the wake-up is watched: nothing is read, written or accepted.
    fds.assign({{wake_fd_, POLLIN, 0}});
    if (!partitioned) {
      fds.push_back({listener_, POLLIN, 0});
      for (const Link& link : links) {
        // Read a side only when what it sent last has been passed on; write it when it has some.
        // With the answers cut, the server's side is neither read nor written to its client.
        const bool down = !answers_cut;
        fds.push_back({link.up.from,
                       static_cast<short>((link.up.pending.empty() ? POLLIN : 0) |
                                          (down && !link.down.pending.empty() ? POLLOUT : 0)),
                       0});
        fds.push_back({link.up.to,
                       static_cast<short>((down && link.down.pending.empty() ? POLLIN : 0) |
                                          (link.up.pending.empty() ? 0 : POLLOUT)),
                       0});
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    std::uint64_t count = 0;
    if (::read(wake_fd_, &count, sizeof count) < 0) {
      // EAGAIN: woken by a socket.
    }
    std::lock_guard lock(mutex_);
    // A partition(), cut_answers() or sever() that arrived during the poll wins.
    if (partitioned_ || partitioned || answers_cut_ != answers_cut || sever_) continue;
    std::size_t at = 2;
    for (Link& link : links) {
      const short client = fds[at++].revents;
      const short server = fds[at++].revents;
      link.open = relay(link.up, client) && (answers_cut || relay(link.down, server));
    }
    links.remove_if([](const Link& link) { return !link.open; });
    if ((fds[1].revents & POLLIN) == 0) continue;
    const int accepted = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (accepted < 0) continue;
    const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in target = address(host_, target_port_);
    // A blocking connect: the server is local. The client's connection is dropped if it fails.
    if (upstream < 0 || ::connect(upstream, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0 ||
        ::fcntl(upstream, F_SETFL, O_NONBLOCK) != 0) {
      ::close(accepted);
      if (upstream >= 0) ::close(upstream);
      continue;
    }
    links.emplace_back(accepted, upstream);
  }
}

}  // namespace dlock::test
