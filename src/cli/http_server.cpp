#include "cli/http_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <string_view>

namespace dlock::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string numeric_host(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  }
  return text;
}

int port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

// Whom a connection counts against: its address, or for IPv6 its /64, which one host
// usually has whole.
std::string peer_of(socket_t sock) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(sock, reinterpret_cast<sockaddr*>(&address), &size) != 0) return {};
  if (address.ss_family == AF_INET6) {
    auto& ip = reinterpret_cast<sockaddr_in6&>(address).sin6_addr;
    if (!IN6_IS_ADDR_V4MAPPED(&ip)) {
      std::fill(ip.s6_addr + 8, ip.s6_addr + 16, 0);
      return numeric_host(address) + "/64";
    }
  }
  return numeric_host(address);
}

// A connection's socket, read and written within the deadlines of ConnectionLimits, through
// a buffer (cpp-httplib reads a request line byte by byte).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, int stop_fd, const ConnectionLimits& limits)
      : sock_(sock), stop_fd_(stop_fd), limits_(limits) {}

  // A new request: its bytes must all arrive by `deadline`.
  void next_request(Clock::time_point deadline) {
    read_deadline_ = deadline;
    write_deadline_.reset();
    request_bytes_ = 0;
  }
  // Waits for the next request's first byte until `deadline`.
  bool wait_for_request(Clock::time_point deadline) const { return buffered() || wait(POLLIN, deadline); }

  bool is_readable() const override { return buffered() || wait(POLLIN, read_deadline_); }
  bool is_writable() const override { return wait(POLLOUT, response_deadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (request_bytes_ >= limits_.request_bytes || !wait(POLLIN, read_deadline_)) return -1;
      const ssize_t n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min({size, end_ - begin_, limits_.request_bytes - request_bytes_});
    std::copy_n(buffer_.data() + begin_, n, ptr);
    begin_ += n;
    request_bytes_ += n;
    return static_cast<ssize_t>(n);
  }

  // Never blocks past the deadline: what fits now, then wait again.
  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      if (!wait(POLLOUT, response_deadline())) return -1;
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  bool buffered() const { return begin_ < end_; }

  Clock::time_point response_deadline() const {
    if (!write_deadline_) write_deadline_ = Clock::now() + limits_.response_time;
    return *write_deadline_;
  }

  // Until the socket is ready for `events` (or failed: the next call reports it); false at
  // `deadline` or when the server stops.
  bool wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      std::array<pollfd, 2> fds{{{sock_, events, 0}, {stop_fd_, POLLIN, 0}}};
      const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 60'000)));
      if (ready < 0 && errno != EINTR) return false;
      if (fds[1].revents != 0) return false;
      if (fds[0].revents != 0) return true;
    }
  }

  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage storage{};
    socklen_t size = sizeof storage;
    if (get(sock_, reinterpret_cast<sockaddr*>(&storage), &size) != 0) return;
    ip = numeric_host(storage);
    port = port_of(storage);
  }

  socket_t sock_;
  int stop_fd_;
  const ConnectionLimits& limits_;
  Clock::time_point read_deadline_;
  mutable std::optional<Clock::time_point> write_deadline_;
  std::size_t request_bytes_ = 0;
  std::array<char, 4096> buffer_{};
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// Best effort, without waiting: the client learns why, unless it is not reading.
void refuse(socket_t sock, const std::string& peer, std::size_t limit) {
  const std::string body = R"({"error":"too many connections from )" + peer + ": at most " +
                           std::to_string(limit) + R"( at a time"})";
  const std::string response = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  // What the client already sent, read so that closing does not reset the connection.
  std::array<char, 4096> discard{};
  while (::recv(sock, discard.data(), discard.size(), MSG_DONTWAIT) > 0) {
  }
}

}  // namespace

HttpServer::HttpServer(ConnectionLimits limits)
    : limits_(limits), stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  new_task_queue = [threads = limits_.threads] { return new httplib::ThreadPool(threads); };
}

HttpServer::~HttpServer() { ::close(stop_fd_); }

int HttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound >= 0 && ::listen(svr_sock_, SOMAXCONN) != 0) return -1;  // Linux takes a new backlog
  return bound;
}

void HttpServer::shut_down() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(stop_fd_, &one, sizeof one);
  stop();
}

bool HttpServer::enter(const std::string& peer) {
  std::lock_guard lock(mutex_);
  std::size_t& count = connections_[peer];
  if (count >= limits_.connections_per_peer) return false;
  ++count;
  return true;
}

void HttpServer::leave(const std::string& peer) {
  std::lock_guard lock(mutex_);
  if (--connections_[peer] == 0) connections_.erase(peer);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  const std::string peer = peer_of(sock);
  bool served = false;
  if (!enter(peer)) {
    refuse(sock, peer, limits_.connections_per_peer);
  } else {
    DeadlineStream stream(sock, stop_fd_, limits_);
    stream.next_request(Clock::now() + limits_.request_time);
    for (std::size_t n = 1; n <= limits_.requests_per_connection; ++n) {
      bool client_closes = false;
      served = process_request(stream, n == limits_.requests_per_connection, client_closes, nullptr);
      if (!served || client_closes || !stream.wait_for_request(Clock::now() + limits_.idle_time)) break;
      stream.next_request(Clock::now() + limits_.request_time);
    }
    leave(peer);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return served;
}

}  // namespace dlock::cli
