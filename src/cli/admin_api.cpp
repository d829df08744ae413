#include "cli/admin_api.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>

#include "cli/admin_page.hpp"
#include "cli/cli_common.hpp"

namespace dlock::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kDefaultPage = 100;
constexpr std::size_t kMaxPage = 1000;

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

}  // namespace

AdminApi::AdminApi(Client client, AuditLog& audit, std::optional<std::string> token)
    : client_(std::move(client)), audit_(audit), token_(std::move(token)) {}

void AdminApi::install(httplib::Server& server) {
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

void AdminApi::force_release(const httplib::Request& request, httplib::Response& response) {
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

std::string AdminApi::metrics() {
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

}  // namespace dlock::cli
