// `dlock serve`: the admin HTTP API over whichever backend the URL names (docs/http-api.md).
// Loopback only unless an access token is set; state changes are JSON POSTs, which a page on
// another site cannot send without the browser asking first; every force-release is appended
// to a durable audit log before the answer goes out.
//
// It is a program of its own, dlock-serve, which `dlock serve` runs: Debian's cpp-httplib is
// a shared library only, and the statically linked `dlock` starts faster (see `dlock run`).

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/admin_page.hpp"
#include "cli/cli_common.hpp"

namespace dlock::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kDefaultPage = 100;
constexpr std::size_t kMaxPage = 1000;

struct ServeOptions {
  std::string listen = "127.0.0.1:7474";
  std::string token_file;
  std::string audit_log;
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

// The access token: --token-file's first line, else $DLOCK_SERVE_TOKEN, else none.
std::optional<std::string> read_token(const ServeOptions& options) {
  if (!options.token_file.empty()) {
    std::ifstream file(options.token_file);
    if (!file) throw InvalidArgument("--token-file '" + options.token_file + "' cannot be read");
    std::string token;
    std::getline(file, token);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.empty()) throw InvalidArgument("--token-file '" + options.token_file + "' is empty: put the token on its first line");
    return token;
  }
  const char* env = std::getenv("DLOCK_SERVE_TOKEN");  // NOLINT(concurrency-mt-unsafe): read once at start
  if (env && *env) return std::string(env);
  return std::nullopt;
}

// Beside the embedded default database, in the same per-user state directory.
std::string default_audit_log() {
  constexpr std::string_view scheme = "sqlite://";
  return (std::filesystem::path(Client::embedded_default_url().substr(scheme.size())).parent_path() / "audit.log")
      .string();
}

// Equal in time independent of where the strings differ, so the token cannot be guessed
// byte by byte from response times.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char differ = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) {
    differ |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return differ == 0;
}

std::string utc_now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", text, ms);
}

// Force-releases, one JSON object a line, each written and fsynced before the answer.
class AuditLog {
 public:
  explicit AuditLog(std::string path) : path_(std::move(path)) {
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ignored);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      throw ConfigurationError("cannot open the audit log '" + path_ + "': " + std::strerror(errno) +
                                   " (choose another with --audit-log)",
                               "serve");
    }
  }
  ~AuditLog() { ::close(fd_); }
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  void append(const json& entry) {
    const std::string line = entry.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::lock_guard lock(mutex_);
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fsync(fd_) != 0) {
      throw std::system_error(errno, std::generic_category(), "could not write the audit log '" + path_ + "'");
    }
  }

  // The newest `limit` entries, newest first.
  json newest(std::size_t limit) const {
    std::deque<std::string> lines;
    {
      std::lock_guard lock(mutex_);
      std::ifstream file(path_);
      for (std::string line; std::getline(file, line);) {
        if (line.empty()) continue;
        lines.push_back(std::move(line));
        if (lines.size() > limit) lines.pop_front();
      }
    }
    json entries = json::array();
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) entries.push_back(json::parse(*it, nullptr, false));
    return entries;
  }

 private:
  std::string path_;
  int fd_ = -1;
  mutable std::mutex mutex_;
};

void reply(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void fail(httplib::Response& response, int status, const std::string& message) {
  reply(response, status, {{"error", message}});
}

// A page size from ?limit=, or nothing after answering 400.
std::optional<std::size_t> page_limit(const httplib::Request& request, httplib::Response& response) {
  if (!request.has_param("limit")) return kDefaultPage;
  const std::string text = request.get_param_value("limit");
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1 || value > static_cast<long long>(kMaxPage)) {
    fail(response, 400, fmt::format("limit must be 1 to {}, not '{}'", kMaxPage, text));
    return std::nullopt;
  }
  return static_cast<std::size_t>(value);
}

class AdminApi {
 public:
  AdminApi(Client client, AuditLog& audit, std::optional<std::string> token)
      : client_(std::move(client)), audit_(audit), token_(std::move(token)) {}

  void install(httplib::Server& server) {
    server.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      // The page holds no data: it asks for the token and sends it with its API calls.
      if (!token_ || request.path == "/healthz" || request.path == "/") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      const std::string header = request.get_header_value("Authorization");
      if (header.starts_with("Bearer ") && same_secret(header.substr(7), *token_)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      fail(response, 401, "this server needs its access token: send the header 'Authorization: Bearer TOKEN'");
      return httplib::Server::HandlerResponse::Handled;
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
      try {
        std::rethrow_exception(error);
      } catch (const InvalidArgument& e) {
        fail(response, 400, e.what());
      } catch (const std::exception& e) {
        fail(response, 503, e.what());  // backend errors carry the redacted URL only
      }
    });
    server.Get("/", [](const httplib::Request&, httplib::Response& response) {
      // Never framed by another site (a force-release button under a decoy), and nothing
      // loaded from anywhere but this server.
      response.set_header("X-Frame-Options", "DENY");
      response.set_header("Content-Security-Policy",
                          "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                          "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
      response.set_header("Cache-Control", "no-store");
      response.set_content(kAdminPage, "text/html; charset=utf-8");
    });
    server.Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
      try {
        client_.ping();
        reply(response, 200, {{"ok", true}, {"backend", client_.backend_name()}});
      } catch (const std::exception& e) {
        reply(response, 503, {{"ok", false}, {"backend", client_.backend_name()}, {"error", e.what()}});
      }
    });
    server.Get("/api/locks", [this](const httplib::Request& request, httplib::Response& response) {
      const auto limit = page_limit(request, response);
      if (!limit) return;
      const ListPage page =
          client_.list(request.get_param_value("prefix"), request.get_param_value("after"), *limit);
      json locks = json::array();
      for (const LockInfo& info : page.locks) locks.push_back(lock_json(info));
      reply(response, 200,
            {{"locks", locks}, {"next_after", page.next_after.empty() ? json(nullptr) : json(page.next_after)}});
    });
    server.Get("/api/lock", [this](const httplib::Request& request, httplib::Response& response) {
      if (!request.has_param("key")) return fail(response, 400, "give the key: /api/lock?key=KEY");
      const std::string key = request.get_param_value("key");
      const auto held = client_.inspect(key);
      if (!held) return reply(response, 404, {{"key", key}, {"held", false}});
      json body = lock_json(*held);
      body["held"] = true;
      reply(response, 200, body);
    });
    server.Post("/api/force-release", [this](const httplib::Request& request, httplib::Response& response) {
      force_release(request, response);
    });
    server.Get("/api/audit", [this](const httplib::Request& request, httplib::Response& response) {
      const auto limit = page_limit(request, response);
      if (!limit) return;
      reply(response, 200, {{"entries", audit_.newest(*limit)}});
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }

 private:
  void force_release(const httplib::Request& request, httplib::Response& response) {
    // A cross-site page can only send a form or text/plain without the browser's preflight,
    // which this server never approves; and a browser names the page's origin.
    if (!request.get_header_value("Content-Type").starts_with("application/json")) {
      return fail(response, 415, "send the request as JSON (Content-Type: application/json)");
    }
    if (request.has_header("Origin") &&
        request.get_header_value("Origin") != "http://" + request.get_header_value("Host")) {
      return fail(response, 403, "a force-release from another site's page is refused");
    }
    const json body = json::parse(request.body, nullptr, false);
    if (!body.is_object()) return fail(response, 400, "the body must be a JSON object: {\"key\": ..., \"reason\": ...}");
    const std::string key = body.value("key", "");
    const std::string reason = body.value("reason", "");
    if (key.empty()) return fail(response, 400, "give the key to release: {\"key\": ..., \"reason\": ...}");
    if (reason.empty()) return fail(response, 400, "give a reason: it goes to the audit log");
    const auto freed = client_.force_release(key);
    if (!freed) return reply(response, 404, {{"key", key}, {"held", false}});
    const std::string by = body.value("by", "");
    const json entry = {{"at", utc_now_iso()},
                        {"by", by.empty() ? "anonymous" : by},
                        {"from", request.remote_addr},
                        {"reason", reason},
                        {"key", freed->key},
                        {"owner", freed->owner},
                        {"token", freed->token}};
    force_releases_.fetch_add(1);
    try {
      audit_.append(entry);
    } catch (const std::system_error& e) {
      return reply(response, 500, {{"error", std::string("the key was released, but ") + e.what()}, {"audit", entry}});
    }
    reply(response, 200, {{"released", lock_json(*freed)}, {"audit", entry}});
  }

  std::string metrics() {
    std::size_t held = 0;
    for (ListPage page = client_.list({}, {}, kMaxPage);; page = client_.list({}, page.next_after, kMaxPage)) {
      held += page.locks.size();
      if (page.next_after.empty()) break;
    }
    std::string text = fmt::format(
        "# HELP dlock_held_locks Locks held now.\n"
        "# TYPE dlock_held_locks gauge\n"
        "dlock_held_locks {}\n"
        "# HELP dlock_force_releases_total Force-releases through this server since it started.\n"
        "# TYPE dlock_force_releases_total counter\n"
        "dlock_force_releases_total {}\n",
        held, force_releases_.load());
    // Totals every client adds to the store, each within a few seconds of counting.
    if (const std::optional<Activity> activity = client_.store_activity()) {
      const auto counter = [&](std::string_view name, std::string_view help, auto value) {
        text += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, value);
      };
      counter("dlock_acquisitions_total", "New acquisitions by all clients (re-entries not counted).",
              activity->acquisitions);
      counter("dlock_conflicts_total", "Acquire calls whose first attempt found the key held.", activity->conflicts);
      counter("dlock_waits_total", "Acquire calls that waited for a busy key.", activity->waits);
      counter("dlock_wait_seconds_total", "Time those calls spent waiting.",
              static_cast<double>(activity->wait_us) / 1e6);
      counter("dlock_renewals_total", "Successful lease renewals.", activity->renewals);
      counter("dlock_losses_total", "Leases their holders lost (expired, taken over, renewals failing).",
              activity->losses);
    }
    return text;
  }

  Client client_;
  AuditLog& audit_;
  std::optional<std::string> token_;
  std::atomic<std::uint64_t> force_releases_{0};
};

int serve(const GlobalOptions& global, const ServeOptions& options) {
  const ListenAddress address = parse_listen(options.listen);
  const std::optional<std::string> token = read_token(options);
  if (!token && !is_loopback(address.host)) {
    throw InvalidArgument("listening on '" + address.host +
                          "' exposes force-release to the network: give an access token with --token-file FILE "
                          "(or $DLOCK_SERVE_TOKEN), or listen on 127.0.0.1");
  }
  AuditLog audit(options.audit_log.empty() ? default_audit_log() : options.audit_log);
  AdminApi api(open_client(global), audit, token);

  // SIGINT and SIGTERM stop the server from a thread of its own (stop() is not
  // async-signal-safe); every other thread inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  httplib::Server server;
  api.install(server);
  const int port = address.port == 0 ? server.bind_to_any_port(address.host)
                                     : (server.bind_to_port(address.host, address.port) ? address.port : -1);
  if (port < 0) {
    throw ConfigurationError("cannot listen on " + options.listen + ": " + std::strerror(errno), "serve");
  }
  const std::string shown = address.host.find(':') == std::string::npos ? address.host : "[" + address.host + "]";
  std::printf("dlock serve: listening on http://%s:%d\n", shown.c_str(), port);
  std::fflush(stdout);

  std::thread stopper([&server, stop_signals] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    server.stop();
  });
  const bool served = server.listen_after_bind();
  if (!served) ::kill(::getpid(), SIGTERM);  // lets the stopper thread end
  stopper.join();
  return kExitOk;
}

int serve_main(int argc, char** argv) {
  CLI::App app{"Serve the admin HTTP API: list, inspect and force-release locks (docs/http-api.md).",
               "dlock serve"};
  GlobalOptions global;
  ServeOptions options;
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
  try {
    app.parse(argc, argv);
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
