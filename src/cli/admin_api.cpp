#include "cli/admin_api.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>
#include <variant>

#include "cli/admin_page.hpp"
#include "cli/cli_common.hpp"

namespace dlock::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kDefaultPage = 100;
constexpr std::size_t kMaxPage = 1000;
constexpr std::size_t kMaxBody = 16 * 1024;  // a force-release is a key, a reason and a name

// Equal in time independent of where the strings differ, so the token cannot be guessed
// byte by byte from response times.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char differ = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) {
    differ |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return differ == 0;
}

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

struct ForceRelease {
  std::string key;
  std::optional<std::uint64_t> token;  // of the one holder to evict; without it, every holder
  std::string reason;
  std::string by;
  bool lock_delay = true;
};

// The body of POST /api/force-release, or what is wrong with it. A field that is not one of
// these is refused rather than ignored: a misspelt "lock_delay" must not go unnoticed.
std::variant<ForceRelease, std::string> parse_force_release(const std::string& text) {
  constexpr const char* shape =
      R"({"key": "...", "token": 42, "reason": "...", "by": "...", "lock_delay": true})";
  const json body = json::parse(text, nullptr, false);
  if (!body.is_object()) return fmt::format("the body must be a JSON object: {}", shape);
  ForceRelease request;
  for (const auto& [name, value] : body.items()) {
    if (value.is_null()) continue;  // as if absent
    if (name == "lock_delay") {
      if (!value.is_boolean()) return fmt::format("'lock_delay' must be true or false, not {}", value.type_name());
      request.lock_delay = value.get<bool>();
      continue;
    }
    if (name == "token") {
      if (!value.is_number_unsigned()) {
        return fmt::format("'token' must be a fencing token (a whole number), not {}", value.dump());
      }
      request.token = value.get<std::uint64_t>();
      continue;
    }
    std::string* text_field = name == "key"      ? &request.key
                              : name == "reason" ? &request.reason
                              : name == "by"     ? &request.by
                                                 : nullptr;
    if (!text_field) return fmt::format("unknown field '{}': the body is {}", name, shape);
    if (!value.is_string()) return fmt::format("'{}' must be a string, not {}", name, value.type_name());
    *text_field = value.get<std::string>();
  }
  if (request.key.empty()) return fmt::format("give the key to release: {}", shape);
  if (request.reason.empty()) return std::string("give a reason: it goes to the audit log");
  return request;
}

// What the store can do (backend::Capabilities), for the page and tools that must not guess it
// from the URL: the page shows a lock's time left by lease_is_the_session.
json capabilities_json(const backend::Capabilities& can) {
  return {{"spans_processes", can.spans_processes},
          {"holds_outlive_the_client", can.holds_outlive_the_client},
          {"frees_when_holder_dies", can.frees_when_holder_dies},
          {"lease_is_the_session", can.lease_is_the_session},
          {"records_acquisition_time", can.records_acquisition_time},
          {"counts_waiters", can.counts_waiters},
          {"names_waiters", can.names_waiters},
          {"shared_holders", can.shared_holders},
          {"notifies_evictions", can.notifies_evictions}};
}

}  // namespace

AdminApi::AdminApi(Client client, AuditLog& audit, AdminApiOptions options)
    : client_(std::move(client)), audit_(audit), options_(std::move(options)) {}

void AdminApi::install(httplib::Server& server) {
  server.set_payload_max_length(kMaxBody);
  server.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    // Probes may use any name: the answer holds nothing but the backend's scheme and what
    // that store can do.
    if (request.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    const std::string host = request.get_header_value("Host");
    if (!options_.hosts.allows_host(host)) {
      fail(response, 403,
           fmt::format("'{}' is not a name of this server, so a page of another site may have sent this "
                       "request (DNS rebinding); to serve under that name, start dlock serve with --allow-host NAME",
                       host));
      return httplib::Server::HandlerResponse::Handled;
    }
    // The page holds no data: it asks for the token and sends it with its API calls.
    if (!options_.token || request.path == "/") return httplib::Server::HandlerResponse::Unhandled;
    const std::string header = request.get_header_value("Authorization");
    if (header.starts_with("Bearer ") && same_secret(header.substr(7), *options_.token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    fail(response, 401, "this server needs its access token: send the header 'Authorization: Bearer TOKEN'");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.set_exception_handler([](const httplib::Request& request, httplib::Response& response,
                                  std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const InvalidArgument& e) {
      fail(response, 400, e.what());
    } catch (const Error& e) {
      fail(response, 503, e.what());  // backend errors carry the redacted URL only
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dlock serve: internal error on %s %s: %s\n", request.method.c_str(),
                   request.path.c_str(), e.what());
      fail(response, 500, "internal error in dlock serve: its stderr has the details");
    }
  });
  // cpp-httplib's own refusals come without a body.
  server.set_error_handler(httplib::Server::Handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    switch (response.status) {
      case 404:
        return fail(response, 404, fmt::format("no such endpoint: {} {}", request.method, request.path));
      case 413:
        return fail(response, 413, fmt::format("the body is larger than {} KiB", kMaxBody / 1024));
      case 400:
        return fail(response, 400, "malformed HTTP request");
      default:
        return fail(response, response.status, fmt::format("refused (HTTP {})", response.status));
    }
  }));
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
    json body = {{"backend", client_.backend_name()},
                 {"capabilities", capabilities_json(client_.capabilities())}};
    try {
      client_.ping();
      body["ok"] = true;
      reply(response, 200, body);
    } catch (const std::exception& e) {
      body["ok"] = false;
      body["error"] = e.what();
      reply(response, 503, body);
    }
  });
  server.Get("/api/locks", [this](const httplib::Request& request, httplib::Response& response) {
    const auto limit = page_limit(request, response);
    if (!limit) return;
    const ListPage page =
        client_.list(request.get_param_value("prefix"), request.get_param_value("after"), *limit);
    reply(response, 200,
          {{"locks", holders_json(page.locks)},
           {"next_after", page.next_after.empty() ? json(nullptr) : json(page.next_after)}});
  });
  server.Get("/api/lock", [this](const httplib::Request& request, httplib::Response& response) {
    if (!request.has_param("key")) return fail(response, 400, "give the key: /api/lock?key=KEY");
    const std::string key = request.get_param_value("key");
    const auto holders = client_.inspect(key);
    reply(response, holders.empty() ? 404 : 200, key_json(key, holders));
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

void AdminApi::force_release(const httplib::Request& request, httplib::Response& response) {
  // A cross-site page can only send a form or text/plain without the browser's preflight,
  // which this server never approves; and a browser names the page's origin.
  if (!request.get_header_value("Content-Type").starts_with("application/json")) {
    return fail(response, 415, "send the request as JSON (Content-Type: application/json)");
  }
  if (request.has_header("Origin") && !options_.hosts.allows_origin(request.get_header_value("Origin"))) {
    return fail(response, 403,
                "a force-release from another site's page is refused: the Origin must be http:// or https:// "
                "and a name of this server (--allow-host adds one)");
  }
  const auto parsed = parse_force_release(request.body);
  if (const auto* error = std::get_if<std::string>(&parsed)) return fail(response, 400, *error);
  const ForceRelease& wanted = std::get<ForceRelease>(parsed);
  const auto freed = client_.force_release(
      wanted.key, wanted.lock_delay ? Eviction::delayed : Eviction::immediate, wanted.token);
  if (freed.empty()) return reply(response, 404, {{"key", wanted.key}, {"released", json::array()}});
  const AuditRequest audited{wanted.by.empty() ? "anonymous" : wanted.by, request.remote_addr, wanted.reason,
                             wanted.lock_delay};
  json entries = json::array();
  for (const LockInfo& holder : freed) entries.push_back(audit_entry(audited, holder));
  force_releases_.fetch_add(1);
  try {
    for (const json& entry : entries) audit_.append(entry);
  } catch (const std::system_error& e) {
    return reply(response, 500,
                 {{"error", std::string("the key was released, but ") + e.what()}, {"audit", entries}});
  }
  reply(response, 200, {{"released", holders_json(freed)}, {"audit", entries}});
}

std::string AdminApi::metrics() {
  // Counted no further than the limit, so that a scrape costs about one page of /api/locks
  // however many locks the store holds.
  const std::size_t limit = options_.held_locks_limit;
  std::size_t held = 0;
  for (std::string after;;) {
    const ListPage page = client_.list({}, after, std::min(kMaxPage, limit - held));
    held += count_keys(page.locks);
    if (page.next_after.empty() || held >= limit) break;
    after = page.next_after;
  }
  std::string text = fmt::format(
      "# HELP dlock_held_locks Locks held now, counted up to dlock_held_locks_limit.\n"
      "# TYPE dlock_held_locks gauge\n"
      "dlock_held_locks {}\n"
      "# HELP dlock_held_locks_limit Where dlock_held_locks stops counting: equal to it, there may be more.\n"
      "# TYPE dlock_held_locks_limit gauge\n"
      "dlock_held_locks_limit {}\n"
      "# HELP dlock_force_releases_total Force-releases through this server since it started.\n"
      "# TYPE dlock_force_releases_total counter\n"
      "dlock_force_releases_total {}\n",
      held, limit, force_releases_.load());
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

}  // namespace dlock::cli
