// `dlock serve`: the admin HTTP API over whichever backend the URL names (docs/http-api.md).
// Loopback only unless an access token is set; answers only to its own names (--allow-host
// adds some); state changes are JSON POSTs, which a page on another site cannot send without
// the browser asking first; every force-release is appended to a durable audit log before the
// answer goes out.
//
// It is a program of its own, dlock-serve, which `dlock serve` runs: Debian's cpp-httplib is
// a shared library only, and the statically linked `dlock` starts faster (see `dlock run`).

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/admin_api.hpp"
#include "cli/audit_log.hpp"
#include "cli/cli_common.hpp"
#include "cli/http_server.hpp"

namespace dlock::cli {
namespace {

using nlohmann::json;

struct ServeOptions {
  std::string listen = "127.0.0.1:7474";
  std::string token_file;
  std::string audit_log;
  std::vector<std::string> allow_hosts;
  std::size_t metrics_held_max = 1000;
};

struct ListenAddress {
  std::string host;
  int port = 0;
};

ListenAddress parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw InvalidArgument("--listen '" + text + "' must be ADDRESS:PORT, e.g. 127.0.0.1:7474 or [::1]:7474");
  }
  ListenAddress address{text.substr(0, colon), 0};
  if (address.host.size() > 2 && address.host.front() == '[' && address.host.back() == ']') {
    address.host = address.host.substr(1, address.host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
    throw InvalidArgument("--listen '" + text + "': the port must be 0 to 65535 (0: any free port)");
  }
  address.port = static_cast<int>(value);
  return address;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// The access token: --token-file's first line without surrounding blanks, else
// $DLOCK_SERVE_TOKEN, else none.
std::optional<std::string> read_token(const ServeOptions& options) {
  if (!options.token_file.empty()) {
    std::ifstream file(options.token_file);
    if (!file) throw InvalidArgument("--token-file '" + options.token_file + "' cannot be read");
    std::string line;
    std::getline(file, line);
    const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
    const auto first = std::find_if_not(line.begin(), line.end(), blank);
    const auto last = std::find_if_not(line.rbegin(), line.rend(), blank).base();
    const std::string token = first < last ? std::string(first, last) : std::string();
    if (token.empty()) throw InvalidArgument("--token-file '" + options.token_file + "' is empty: put the token on its first line");
    return token;
  }
  const char* env = std::getenv("DLOCK_SERVE_TOKEN");  // NOLINT(concurrency-mt-unsafe): read once at start
  if (env && *env) return std::string(env);
  return std::nullopt;
}

int serve(const GlobalOptions& global, const ServeOptions& options) {
  const ListenAddress address = parse_listen(options.listen);
  const std::optional<std::string> token = read_token(options);
  if (!token && !is_loopback(address.host)) {
    throw InvalidArgument("listening on '" + address.host +
                          "' exposes force-release to the network: give an access token with --token-file FILE "
                          "(or $DLOCK_SERVE_TOKEN), or listen on 127.0.0.1");
  }
  AuditLog audit(options.audit_log.empty() ? default_audit_log() : options.audit_log);
  Client client = open_client(global);
  // A client that hangs up before reading its answer must cost one EPIPE, not the server
  // (cpp-httplib sends without MSG_NOSIGNAL).
  ::signal(SIGPIPE, SIG_IGN);

  // SIGINT and SIGTERM stop the server from a thread of its own (stop() is not
  // async-signal-safe); every other thread inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  HttpServer server;
  const int port = server.bind(address.host, address.port);
  if (port < 0) {
    throw ConfigurationError("cannot listen on " + options.listen + ": " + std::strerror(errno), "serve");
  }
  AdminApi api(std::move(client), audit,
               {AllowedHosts(address.host, port, options.allow_hosts), token, options.metrics_held_max});
  api.install(server);
  const std::string shown = address.host.find(':') == std::string::npos ? address.host : "[" + address.host + "]";
  std::printf("dlock serve: listening on http://%s:%d\n", shown.c_str(), port);
  std::fflush(stdout);

  std::thread stopper([&server, stop_signals] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    server.shut_down();
  });
  const bool served = server.listen_after_bind();
  if (!served) ::kill(::getpid(), SIGTERM);  // lets the stopper thread end
  stopper.join();
  return kExitOk;
}

int serve_main(int argc, char** argv) {
  CLI::App app{"Serve the admin page and HTTP API: list, inspect and force-release locks.",
               "dlock serve"};
  GlobalOptions global;
  ServeOptions options;
  app.add_option("--password-file", global.password_file,
                 "File whose first line is the store's password (default: $DLOCK_PASSWORD_FILE, else $DLOCK_PASSWORD)")
      ->type_name("FILE");
  app.add_option("--url", global.url, "Backend URL (default: $DLOCK_URL, else the embedded default)")
      ->type_name("URL");
  app.add_option("--listen", options.listen,
                 "ADDRESS:PORT to listen on; anything but loopback needs --token-file (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--token-file", options.token_file,
                 "File whose first line is the access token every request must bring "
                 "(default: $DLOCK_SERVE_TOKEN)");
  app.add_option("--audit-log", options.audit_log,
                 "Where force-releases are recorded, one JSON line each "
                 "(default: $XDG_STATE_HOME/dlock/audit.log)");
  app.add_option("--allow-host", options.allow_hosts,
                 "Also answer requests for NAME (any port) or NAME:PORT, e.g. a reverse proxy's public name; "
                 "repeatable. By default only the listening address's own names are served")
      ->type_name("NAME[:PORT]");
  app.add_option("--metrics-held-max", options.metrics_held_max,
                 "/metrics counts held locks up to N, a list call per 1000")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}))
      ->capture_default_str()
      ->type_name("N");
  try {
    std::vector<std::string> args = hide_url_passwords(argc, argv);
    std::reverse(args.begin(), args.end());
    args.pop_back();  // the program's name
    app.parse(args);
    return serve(global, options);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "dlock: %s (see dlock serve --help)\n", e.what());
    return kExitUsage;
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "dlock: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlock: %s\n", e.what());
    return kExitError;
  }
}

}  // namespace
}  // namespace dlock::cli

int main(int argc, char** argv) {
  try {
    return dlock::cli::serve_main(argc, argv);
  } catch (...) {  // never a crash
    std::fputs("dlock: unexpected internal error\n", stderr);
    return dlock::cli::kExitError;
  }
}
