#pragma once

// The HTTP server of `dlock serve`: cpp-httplib's, with its connections handled here so that
// clients that never finish a request cannot hold its threads (docs/http-api.md#limits). Each
// request must arrive whole within a deadline, a response be taken within one, an idle
// keep-alive connection closes, and one peer (an address; an IPv6 /64) holds only a few
// connections at a time: beyond that, its next one is answered 503 and closed at once.

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

namespace dlock::cli {

struct ConnectionLimits {
  std::chrono::milliseconds request_time{5000};   // a request's bytes, from the connection or its first byte
  std::chrono::milliseconds response_time{5000};  // a response taken by the client
  std::chrono::milliseconds idle_time{5000};      // a keep-alive connection between requests
  std::size_t request_bytes = 64 * 1024;           // request line, headers and body
  std::size_t requests_per_connection = 100;
  std::size_t connections_per_peer = 16;
  std::size_t threads = 64;  // connections served at once; more wait for a thread
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(ConnectionLimits limits = {});
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (port 0: any free port) and listens with a backlog for bursts of connections
  // (cpp-httplib's is 5); the port, or -1 with errno set.
  int bind(const std::string& host, int port);
  // stop(), also waking the connections that wait for their clients.
  void shut_down();

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool enter(const std::string& peer);
  void leave(const std::string& peer);

  ConnectionLimits limits_;
  int stop_fd_;  // an eventfd, readable once shut_down() was called
  std::mutex mutex_;
  std::map<std::string, std::size_t> connections_;  // by peer
};

}  // namespace dlock::cli
