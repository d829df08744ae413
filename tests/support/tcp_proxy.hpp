#pragma once

// A userspace TCP proxy for partition tests: it listens on 127.0.0.1 (a free port) and relays
// every connection to one server, until partition() stops all relaying in both directions
// without closing anything, as a network partition would: bytes sent meanwhile wait in the
// kernel's buffers, and new connections are left in the listen backlog, so a client's
// connect, write or read hangs until its own timeout. heal() relays again, what waited
// included; sever() instead closes every connection, what waited lost, and then relays new
// ones: a request sent meanwhile never reached the server. cut_answers() stops only the
// server-to-client direction: requests arrive and are served, their answers wait. One thread of
// its own relays; the methods may be called from any thread.

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace dlock::test {

class TcpProxy {
 public:
  // Forwards to `host`:`port` (an IPv4 address). Throws std::system_error if it cannot listen,
  // std::runtime_error if `host` is not an IPv4 address.
  TcpProxy(std::string host, int port);
  // Closes every connection and the listener.
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // The port it listens on, on 127.0.0.1.
  int port() const noexcept { return port_; }
  // No byte is relayed and no connection accepted once it returns, until heal().
  void partition();
  // Requests still reach the server; no answer reaches a client, until heal() or sever().
  void cut_answers();
  void heal();
  // Closes every relayed connection, what waited in it lost, and relays new ones.
  void sever();

 private:
  void run();
  void wake() const;

  std::string host_;
  int target_port_;
  int listener_ = -1;
  int port_ = 0;
  int wake_fd_ = -1;  // an eventfd: partition(), heal() and the destructor interrupt the poll
  std::mutex mutex_;  // held while relaying, so partition() returns only between batches
  bool partitioned_ = false;
  bool answers_cut_ = false;
  bool sever_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dlock::test
