// The URL's ssl-mode means what MySQL's own client means by it (src/backends/mysql/README.md):
// disabled never encrypts, preferred encrypts whenever the server offers TLS, required refuses
// a server without TLS before anything secret is sent, verify-ca also checks the certificate
// against ssl-ca but not the name in it, and verify-identity checks that name too.
//
// The server is the one `MARIADB_TLS=1 scripts/servers/mariadb.sh` starts (scripts/test.sh
// does), named by
//   DLOCK_MYSQL_TLS_URL           a user the server admits over TLS only (REQUIRE SSL)
//   DLOCK_MYSQL_TLS_MISNAMED_URL  the same server at an address its certificate does not name
//   DLOCK_MYSQL_TLS_CA            the CA that signed its certificate
//   DLOCK_MYSQL_TLS_OTHER_CA      a CA that did not
// A server without TLS is played by a listener in the test that records what the client sends.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;

using test::env;
using test::random_hex;
using test::with_option;

// A MySQL server on 127.0.0.1 that does not offer TLS: it greets every client (without
// CLIENT_SSL among its capabilities), keeps the first packet the client answers with, and
// closes the connection.
class ServerWithoutTls {
 public:
  ServerWithoutTls() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ServerWithoutTls() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) ::close(listener_);
  }
  ServerWithoutTls(const ServerWithoutTls&) = delete;
  ServerWithoutTls& operator=(const ServerWithoutTls&) = delete;

  unsigned port() const { return port_; }
  // Everything clients sent after the greeting, all connections together.
  std::string received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd incoming{listener_, POLLIN, 0};
      if (::poll(&incoming, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const std::string greeting = packet(0, handshake());
      if (::send(client, greeting.data(), greeting.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(greeting.size())) {
        keep_first_packet(client);
      }
      ::close(client);
    }
  }

  // Reads until the client's first packet is complete, it closes, or 10 s pass.
  void keep_first_packet(int client) {
    std::string in;
    char buffer[4096];
    for (int waited_ms = 0; waited_ms < 10'000; waited_ms += 50) {
      if (in.size() >= 4) {
        const std::size_t length = static_cast<unsigned char>(in[0]) | static_cast<unsigned char>(in[1]) << 8 |
                                   static_cast<unsigned char>(in[2]) << 16;
        if (in.size() >= 4 + length) break;
      }
      pollfd readable{client, POLLIN, 0};
      if (::poll(&readable, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      in.append(buffer, static_cast<std::size_t>(n));
    }
    std::lock_guard lock(mutex_);
    received_ += in;
  }

  static std::string packet(char sequence, const std::string& payload) {
    const std::size_t n = payload.size();
    return std::string{static_cast<char>(n & 0xff), static_cast<char>(n >> 8 & 0xff), static_cast<char>(n >> 16 & 0xff),
                       sequence} +
           payload;
  }

  // Protocol 10: long passwords, found rows, long flags, connect with db, 4.1 protocol,
  // transactions, secure connection, multi statements and results, plugin auth; no SSL.
  static std::string handshake() {
    const unsigned capabilities = 0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x10000 | 0x20000 | 0x80000;
    std::string p;
    p += '\x0a';
    p += std::string("5.5.5-10.11.0-MariaDB-without-tls") + '\0';
    p += std::string("\x01\x00\x00\x00", 4);  // connection id
    p += "abcdefgh";                           // scramble, first part
    p += '\0';
    p += static_cast<char>(capabilities & 0xff);
    p += static_cast<char>(capabilities >> 8 & 0xff);
    p += '\x2d';                              // utf8mb4_general_ci
    p += std::string("\x02\x00", 2);          // autocommit
    p += static_cast<char>(capabilities >> 16 & 0xff);
    p += static_cast<char>(capabilities >> 24 & 0xff);
    p += '\x15';                              // scramble length, 21
    p += std::string(10, '\0');
    p += std::string("ijklmnopqrst") + '\0';  // scramble, second part
    p += std::string("mysql_native_password") + '\0';
    return p;
  }

  int listener_ = -1;
  unsigned port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::string received_;
};

class MysqlTls : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"DLOCK_MYSQL_TLS_URL", "DLOCK_MYSQL_TLS_MISNAMED_URL", "DLOCK_MYSQL_TLS_CA",
                             "DLOCK_MYSQL_TLS_OTHER_CA"}) {
      if (!env(name)) {
        GTEST_SKIP() << name << " is not set: start the server with MARIADB_TLS=1 scripts/servers/mariadb.sh start DIR "
                     << "and export the lines of DIR/env (scripts/test.sh does both)";
      }
    }
    url_ = *env("DLOCK_MYSQL_TLS_URL");
    misnamed_url_ = *env("DLOCK_MYSQL_TLS_MISNAMED_URL");
    ca_ = *env("DLOCK_MYSQL_TLS_CA");
    other_ca_ = *env("DLOCK_MYSQL_TLS_OTHER_CA");
  }

  std::string url_, misnamed_url_, ca_, other_ca_;
};

// A lock taken and released through `url`: its connections got past the server.
void lock_cycle(const std::string& url) {
  Client client = Client::open(url);
  const std::string key = "tls-" + random_hex(12);
  Attempt attempt = client.try_acquire(key, LockOptions{.ttl = 10s});
  ASSERT_TRUE(attempt) << "a fresh key was held";
  attempt.lease().release();
}

// Opening `url` fails with a ConfigurationError; returns its message.
std::string refused(const std::string& url) {
  try {
    Client::open(url);
  } catch (const ConfigurationError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dlock::ConfigurationError, got: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "opened " << url;
  return {};
}

// Defect: ssl-mode=preferred, the default, set no TLS option, so it never encrypted. The
// server admits this user over TLS only.
TEST_F(MysqlTls, SslModePreferredUsesTlsWhenOffered) {
  EXPECT_NO_FATAL_FAILURE(lock_cycle(url_));
  EXPECT_NO_FATAL_FAILURE(lock_cycle(with_option(url_, "ssl-mode=preferred")));
}

TEST_F(MysqlTls, SslModeDisabledDoesNotUseTls) {
  const std::string message = refused(with_option(url_, "ssl-mode=disabled"));
  EXPECT_NE(message.find("refused user 'dlock_tls'"), std::string::npos) << message;
}

// required encrypts but checks no certificate: any name, any CA.
TEST_F(MysqlTls, SslModeRequiredChecksNoCertificate) {
  EXPECT_NO_FATAL_FAILURE(lock_cycle(with_option(misnamed_url_, "ssl-mode=required")));
}

// Defect: verify-ca also checked the host name, as verify-identity does. The server's
// certificate names 127.0.0.1 and localhost, not the address this URL reaches it at.
TEST_F(MysqlTls, SslModeVerifyCaAcceptsACertForAnotherName) {
  EXPECT_NO_FATAL_FAILURE(lock_cycle(with_option(misnamed_url_, "ssl-mode=verify-ca&ssl-ca=" + ca_)));
  // ssl-ca alone means verify-ca, as in MySQL's client.
  EXPECT_NO_FATAL_FAILURE(lock_cycle(with_option(misnamed_url_, "ssl-ca=" + ca_)));
}

// verify-identity takes the certificate where it names the host, and refuses it elsewhere,
// saying which host and which option.
TEST_F(MysqlTls, SslModeVerifyIdentityRejectsAWrongHostName) {
  EXPECT_NO_FATAL_FAILURE(lock_cycle(with_option(url_, "ssl-mode=verify-identity&ssl-ca=" + ca_)));
  const std::string message = refused(with_option(misnamed_url_, "ssl-mode=verify-identity&ssl-ca=" + ca_));
  EXPECT_NE(message.find("ssl-mode=verify-identity"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.2"), std::string::npos) << message;
  EXPECT_EQ(message.find("dlock-tls-pw"), std::string::npos) << "the password leaked: " << message;
}

// Defect: a certificate that ssl-ca did not sign failed as "cannot reach the server", which
// names neither the option nor the file.
TEST_F(MysqlTls, SslModeVerifyCaRejectsACertOfAnotherCaNamingSslCa) {
  for (const char* mode : {"verify-ca", "verify-identity"}) {
    const std::string message = refused(with_option(url_, std::string("ssl-mode=") + mode + "&ssl-ca=" + other_ca_));
    EXPECT_NE(message.find(std::string("ssl-mode=") + mode), std::string::npos) << message;
    EXPECT_NE(message.find("ssl-ca=" + other_ca_), std::string::npos) << message;
  }
}

// Defect: ssl-mode=required (and ssl-ca without verify-identity) fell back to a plain
// connection when the server offered no TLS, after sending the login in the clear. Each of
// these modes must refuse such a server before its login leaves; preferred logs in in the
// clear, which shows the listener sees a login when one is sent.
TEST(MysqlTlsWithoutServer, SslModeRequiredWithoutTlsFails) {
  // A file for ssl-ca: the handshake never gets as far as reading it.
  const std::string ca = ::testing::TempDir() + "dlock-tls-test-ca-" + random_hex(8) + ".pem";
  std::ofstream(ca) << "not read\n";
  for (const std::string mode : {"required", "verify-ca", "verify-identity", "preferred"}) {
    ServerWithoutTls server;
    const std::string user = "tls_" + random_hex(10);
    std::string url = "mysql://" + user + ":secret@127.0.0.1:" + std::to_string(server.port()) +
                      "/db?connect_timeout=5s&ssl-mode=" + mode;
    if (mode.rfind("verify", 0) == 0) url += "&ssl-ca=" + ca;
    std::string message;
    try {
      Client::open(url);
      ADD_FAILURE() << "ssl-mode=" << mode << ": opened a client on a server that closes every connection";
    } catch (const Error& e) {
      message = e.what();
      std::fprintf(stderr, "ssl-mode=%s: %s\n", mode.c_str(), message.c_str());
    }
    const bool login_sent = server.received().find(user) != std::string::npos;
    if (mode == "preferred") {
      EXPECT_TRUE(login_sent) << "preferred did not log in without TLS";
      continue;
    }
    EXPECT_FALSE(login_sent) << "ssl-mode=" << mode << " sent the login to a server without TLS";
    EXPECT_NE(message.find("ssl-mode=" + mode), std::string::npos) << message;
  }
  std::remove(ca.c_str());
}

// Contradictions and omissions in the TLS options are refused before connecting.
TEST(MysqlTlsOptions, SslOptionsThatCannotBeMetAreRefused) {
  const std::string base = "mysql://u:p@127.0.0.1:1/db?";
  const std::string ca = ::testing::TempDir() + "dlock-tls-test-ca-" + random_hex(8) + ".pem";
  std::ofstream(ca) << "not read\n";
  const struct {
    std::string query, expected;
  } cases[] = {
      {"ssl-mode=verify-ca", "ssl-ca"},
      {"ssl-mode=verify-identity", "ssl-ca"},
      {"ssl-mode=required&ssl-ca=" + ca, "verify-ca"},
      {"ssl-mode=disabled&ssl-ca=" + ca, "verify-ca"},
      {"ssl-mode=verify-ca&ssl-ca=/nonexistent/ca.pem", "/nonexistent/ca.pem"},
      {"ssl-mode=sometimes", "verify-identity"},
  };
  for (const auto& c : cases) {
    try {
      Client::open(base + c.query);
      ADD_FAILURE() << "accepted " << c.query;
    } catch (const ConfigurationError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << c.query << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.query << ": expected dlock::ConfigurationError, got: " << e.what();
    }
  }
  std::remove(ca.c_str());
}

}  // namespace
}  // namespace dlock
