// `dlock serve`, driven over HTTP as its users would: each test starts the real binary on a
// free loopback port with a fresh sqlite:// database in a temporary directory (or, when
// DLOCK_SERVE_TEST_URL names a mysql:// server, a fresh table of its own), holds locks with
// `dlock acquire` from other processes and checks the JSON API's answers (docs/http-api.md).

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "support/process.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char* const kDlock = dlock::test::dlock_binary();

using dlock::test::describe;
using dlock::test::Process;
using dlock::test::Result;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// An HTTP answer, its body parsed when it is JSON (else `doc` is discarded).
struct Reply {
  int status = -1;  // -1: no answer at all
  std::string body;
  std::string content_type;
  json doc;
};

// A member of a JSON object, or null: a missing field fails the comparison instead of the test.
json field(const json& object, const std::string& name) {
  return object.is_object() && object.contains(name) ? object.at(name) : json();
}

// The one entry of an array of holders (a key's "holders", a force-release's "released") or of
// audit entries: every store grants only exclusive holds, one holder per key.
json sole(const json& entries) {
  EXPECT_TRUE(entries.is_array() && entries.size() == 1) << "not one entry: " << entries;
  return entries.is_array() && entries.size() == 1 ? entries[0] : json();
}

// The lines of a text, without their newlines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& each : lines_of(text)) {
    if (each == line) return true;
  }
  return false;
}

// Seconds between a UTC ISO-8601 time (2026-11-23T20:15:00.123Z) and now; a huge value when
// it is malformed.
long long seconds_from_now(const std::string& iso) {
  static const std::regex format(R"((\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?Z)");
  std::smatch parts;
  if (!std::regex_match(iso, parts, format)) return 1LL << 40;
  std::tm time{};
  time.tm_year = std::stoi(parts[1]) - 1900;
  time.tm_mon = std::stoi(parts[2]) - 1;
  time.tm_mday = std::stoi(parts[3]);
  time.tm_hour = std::stoi(parts[4]);
  time.tm_min = std::stoi(parts[5]);
  time.tm_sec = std::stoi(parts[6]);
  return static_cast<long long>(::timegm(&time)) - static_cast<long long>(std::time(nullptr));
}

std::string random_secret() {
  std::random_device device;
  std::string secret = "s3cr3t-";
  for (int i = 0; i < 4; ++i) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", device());
    secret += hex;
  }
  return secret;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Like the server, the test's HTTP client may write to a connection the server has closed
    // (a refused large body): EPIPE, not the end of the test.
    ::signal(SIGPIPE, SIG_IGN);
    dir_ = dlock::test::make_temp_dir("dlock-serve");
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
    const char* server = std::getenv("DLOCK_SERVE_TEST_URL");
    if (server && *server) {
      // A table (mysql, postgres), key namespace (redis, redlock) or node path (zookeeper,
      // whose URL then has neither) of the test's own.
      const std::string base = server;
      backend_ = base.substr(0, base.find("://"));
      const std::string own = "serve_" + std::filesystem::path(dir_).filename().string().substr(12);
      if (backend_ == "zookeeper" || backend_ == "etcd") {
        url_ = base + "/" + own;
      } else {
        url_ = base + (base.find('?') == std::string::npos ? "?" : "&") +
               (backend_ == "mysql" || backend_ == "mariadb" || backend_ == "postgres" ? "table="
                                                                                       : "namespace=") +
               own;
      }
    } else {
      url_ = "sqlite://" + dir_ + "/locks.db";
    }
  }
  void TearDown() override {
    server_.reset();  // killed if a failed assertion left it running
    std::filesystem::remove_all(dir_);
  }

  // The test's environment without DLOCK_* variables (a DLOCK_SERVE_TOKEN of the caller's
  // must not leak in), plus `extra`.
  static std::vector<std::string> env(const std::vector<std::string>& extra = {}) {
    return dlock::test::environment_without_dlock(extra);
  }

  std::vector<std::string> serve_command(const std::vector<std::string>& options) const {
    std::vector<std::string> argv = {kDlock, "--url", url_, "serve", "--audit-log", path("audit.log")};
    bool listen_given = false;
    for (const auto& option : options) listen_given = listen_given || option == "--listen";
    if (!listen_given) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    argv.insert(argv.end(), options.begin(), options.end());
    return argv;
  }

  // Starts `dlock serve` and reads the port it announces. False (and a failure) when it did not.
  bool serve(const std::vector<std::string>& options = {}, const std::vector<std::string>& extra_env = {}) {
    const auto argv = serve_command(options);
    server_ = std::make_unique<Process>(argv, env(extra_env));
    port_ = 0;
    const auto line = server_->first_line(5s);
    if (!line) {
      const Result result = server_->wait(2s);
      ADD_FAILURE() << describe(argv) << " announced no port; exit code " << result.exit_code
                    << "\nstdout: " << result.out << "\nstderr: " << result.err;
      return false;
    }
    static const std::regex announcement(R"(dlock serve: listening on http://(\S+):(\d{1,5}))");
    std::smatch parts;
    if (!std::regex_match(*line, parts, announcement)) {
      ADD_FAILURE() << "unexpected first line: '" << *line << "'";
      return false;
    }
    const std::string host = parts[1];
    if (host != "0.0.0.0") {
      EXPECT_EQ(host, "127.0.0.1") << *line;
    }
    port_ = std::stoi(parts[2]);
    EXPECT_GT(port_, 0) << *line;
    return port_ > 0;
  }

  // SIGTERM to the server: it must exit 0 within 5 s. Returns all it printed.
  Result stop() {
    if (!server_) return {};
    server_->signal(SIGTERM);
    Result result = server_->wait(5s);
    EXPECT_EQ(result.exit_code, 0) << "dlock serve after SIGTERM\nstderr: " << result.err;
    server_.reset();
    return result;
  }

  // A short-lived dlock command on this test's database.
  Result dlock(std::vector<std::string> args) const {
    args.insert(args.begin(), {kDlock, "--url", url_});
    return Process(args, env()).wait(10s);
  }

  // Holds `key` from another process (a lease that outlives `dlock acquire`); its token.
  std::uint64_t hold(const std::string& key, const std::string& owner = "holder-1",
                     const std::string& ttl = "10m") const {
    const Result result = dlock({"acquire", "--owner", owner, "--ttl", ttl, key});
    EXPECT_EQ(result.exit_code, 0) << "acquire " << key << ": " << result.err;
    return result.exit_code == 0 ? std::stoull(result.out) : 0;
  }

  // `dlock --json status KEY`.
  json status(const std::string& key) const {
    const Result result = dlock({"--json", "status", key});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return json::parse(result.out, nullptr, false);
  }
  // The one holder `dlock --json status KEY` names.
  json holder(const std::string& key) const { return sole(field(status(key), "holders")); }

  httplib::Client http() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    client.set_write_timeout(5, 0);
    return client;
  }

  Reply record(const httplib::Result& result) {
    Reply reply;
    if (!result) {
      reply.body = "no answer: " + httplib::to_string(result.error());
      return reply;
    }
    reply.status = result->status;
    reply.body = result->body;
    reply.content_type = result->get_header_value("Content-Type");
    reply.doc = json::parse(reply.body, nullptr, false);
    bodies_.push_back(reply.body);
    return reply;
  }

  Reply get(const std::string& path, const httplib::Params& params = {},
            const httplib::Headers& headers = {}) {
    auto client = http();
    return record(client.Get(path, params, headers));
  }

  Reply post(const std::string& path, const std::string& body, const std::string& content_type,
             const httplib::Headers& headers = {}) {
    auto client = http();
    return record(client.Post(path, headers, body, content_type));
  }

  Reply force_release(const json& body, const httplib::Headers& headers = {}) {
    return post("/api/force-release", body.dump(), "application/json", headers);
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string read(const std::string& name) const { return dlock::test::read_text(path(name)); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  // The audit log's entries, oldest first; a line that is not a JSON object fails the test.
  std::vector<json> audit_file() const {
    std::vector<json> entries;
    for (const auto& line : lines_of(read("audit.log"))) {
      if (line.empty()) continue;
      json entry = json::parse(line, nullptr, false);
      EXPECT_TRUE(entry.is_object()) << "audit log line: " << line;
      entries.push_back(std::move(entry));
    }
    return entries;
  }

  std::string dir_;
  std::string url_;
  std::string backend_ = "sqlite";
  std::unique_ptr<Process> server_;
  int port_ = 0;
  std::vector<std::string> bodies_;  // every response body received
};

// Whether the store under test records when an acquisition took its key (held_for_ms): every
// store but etcd://, which keeps no time at all (Capabilities::records_acquisition_time).
bool store_records_acquisition_time() {
  const char* server = std::getenv("DLOCK_SERVE_TEST_URL");  // NOLINT(concurrency-mt-unsafe)
  return server == nullptr || !std::string_view(server).starts_with("etcd://");
}

// The lock object of the API, for a lock that `hold` took.
void expect_lock(const json& lock, const std::string& key, std::uint64_t token, int hold_count = 1,
                 const std::string& owner = "holder-1") {
  EXPECT_EQ(field(lock, "key"), key) << lock;
  EXPECT_EQ(field(lock, "owner"), owner) << lock;
  EXPECT_EQ(field(lock, "mode"), "exclusive") << lock;
  EXPECT_EQ(field(lock, "token"), token) << lock;
  EXPECT_EQ(field(lock, "hold_count"), hold_count) << lock;
  const json ttl = field(lock, "ttl_left_ms");
  ASSERT_TRUE(ttl.is_number_integer()) << lock;
  EXPECT_GT(ttl.get<long long>(), 0) << lock;
  EXPECT_LE(ttl.get<long long>(), 600000) << lock;
  const json held_for = field(lock, "held_for_ms");
  if (!store_records_acquisition_time()) {
    EXPECT_TRUE(held_for.is_null()) << lock;
    return;
  }
  ASSERT_TRUE(held_for.is_number_integer()) << lock;
  EXPECT_GE(held_for.get<long long>(), 0) << lock;
  EXPECT_LE(held_for.get<long long>(), 600000) << lock;
}

// The keys of a listing, in its order.
std::vector<std::string> keys_of(const json& listing) {
  std::vector<std::string> keys;
  for (const auto& lock : field(listing, "locks")) {
    const json key = field(lock, "key");
    keys.push_back(key.is_string() ? key.get<std::string>() : key.dump());
  }
  return keys;
}

using Keys = std::vector<std::string>;

TEST_F(ServeTest, HealthzAnswers) {
  ASSERT_TRUE(serve());
  const Reply reply = get("/healthz");
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(field(reply.doc, "ok"), true) << reply.body;
  EXPECT_EQ(field(reply.doc, "backend"), backend_) << reply.body;
  // What the store can do, each of backend::Capabilities as true or false. The page reads
  // lease_is_the_session to tell a countdown from a session's length: true on zookeeper:// and
  // mysql:// mode=session, which the test knows from the URL it chose (the server must not).
  const json capabilities = field(reply.doc, "capabilities");
  ASSERT_TRUE(capabilities.is_object()) << reply.body;
  const std::vector<std::string> names = {
      "spans_processes",      "holds_outlive_the_client", "frees_when_holder_dies",
      "lease_is_the_session", "records_acquisition_time", "counts_waiters",
      "names_waiters",        "shared_holders",           "notifies_evictions"};
  EXPECT_EQ(capabilities.size(), names.size()) << capabilities;
  for (const auto& name : names) {
    EXPECT_TRUE(field(capabilities, name).is_boolean()) << name << ": " << capabilities;
  }
  const bool session = backend_ == "zookeeper" || backend_ == "etcd" || contains(url_, "mode=session");
  EXPECT_EQ(field(capabilities, "lease_is_the_session"), session) << url_ << ": " << capabilities;
  EXPECT_EQ(field(capabilities, "spans_processes"), true) << capabilities;
  // Every store keeps several holders per key but mysql:// row mode, where a key is one row of
  // the user's table, with one owner.
  EXPECT_EQ(field(capabilities, "shared_holders"), !contains(url_, "mode=row"))
      << url_ << ": " << capabilities;
  EXPECT_EQ(reply.doc.size(), 3u) << "more than ok, the scheme and the capabilities: " << reply.body;
  stop();
}

TEST_F(ServeTest, ListsALockHeldByAnotherProcessAndPages) {
  const std::uint64_t a = hold("k/a");
  const std::uint64_t b = hold("k/b");
  const std::uint64_t c = hold("k/c");
  hold("k/0-expiring", "holder-2", "300ms");
  ASSERT_TRUE(serve());

  // A lease that ended is not listed, though nobody released it.
  const auto deadline = Clock::now() + 5s;
  while (field(status("k/0-expiring"), "held") != false) {
    ASSERT_LT(Clock::now(), deadline) << "a 300ms lease did not end";
    std::this_thread::sleep_for(20ms);
  }

  const Reply all = get("/api/locks");
  ASSERT_EQ(all.status, 200) << all.body;
  const json locks = field(all.doc, "locks");
  ASSERT_EQ(locks.size(), 3u) << all.body;
  expect_lock(locks[0], "k/a", a);
  expect_lock(locks[1], "k/b", b);
  expect_lock(locks[2], "k/c", c);
  EXPECT_TRUE(all.doc.contains("next_after") && field(all.doc, "next_after").is_null()) << all.body;

  const Reply first = get("/api/locks", {{"limit", "2"}});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(keys_of(first.doc), (Keys{"k/a", "k/b"})) << first.body;
  ASSERT_EQ(field(first.doc, "next_after"), "k/b") << first.body;

  const Reply second = get("/api/locks", {{"limit", "2"}, {"after", "k/b"}});
  ASSERT_EQ(second.status, 200) << second.body;
  ASSERT_EQ(keys_of(second.doc), Keys{"k/c"}) << second.body;
  expect_lock(field(second.doc, "locks")[0], "k/c", c);
  EXPECT_TRUE(second.doc.contains("next_after") && field(second.doc, "next_after").is_null()) << second.body;
  stop();
}

TEST_F(ServeTest, PrefixSearchIsServerSide) {
  hold("orders/1");
  hold("orders/2");
  hold("users/1");
  hold("ordersX");
  ASSERT_TRUE(serve());

  const Reply orders = get("/api/locks", {{"prefix", "orders/"}});
  ASSERT_EQ(orders.status, 200) << orders.body;
  EXPECT_EQ(keys_of(orders.doc), (Keys{"orders/1", "orders/2"})) << orders.body;
  EXPECT_TRUE(field(orders.doc, "next_after").is_null()) << orders.body;

  // Paging within a prefix: the page after the last order ends there, not at users/1.
  const Reply page = get("/api/locks", {{"prefix", "orders/"}, {"limit", "1"}});
  EXPECT_EQ(keys_of(page.doc), Keys{"orders/1"}) << page.body;
  EXPECT_EQ(field(page.doc, "next_after"), "orders/1") << page.body;
  const Reply rest = get("/api/locks", {{"prefix", "orders/"}, {"limit", "1"}, {"after", "orders/1"}});
  EXPECT_EQ(keys_of(rest.doc), Keys{"orders/2"}) << rest.body;
  const Reply end = get("/api/locks", {{"prefix", "orders/"}, {"after", "orders/2"}});
  EXPECT_EQ(end.status, 200) << end.body;
  EXPECT_TRUE(keys_of(end.doc).empty()) << end.body;
  EXPECT_TRUE(field(end.doc, "next_after").is_null()) << end.body;

  // The prefix selects before the limit counts: no empty pages of keys filtered out afterwards.
  const Reply users = get("/api/locks", {{"prefix", "users/"}, {"limit", "1"}});
  EXPECT_EQ(keys_of(users.doc), Keys{"users/1"}) << users.body;
  // The prefix is literal text, not a pattern.
  for (const std::string pattern : {"%", "order_/", "orders/%", "*"}) {
    const Reply none = get("/api/locks", {{"prefix", pattern}});
    EXPECT_EQ(none.status, 200) << pattern << ": " << none.body;
    EXPECT_TRUE(keys_of(none.doc).empty()) << pattern << ": " << none.body;
  }
  stop();
}

TEST_F(ServeTest, InspectHeldAndFree) {
  const std::uint64_t token = hold("jobs/nightly report");
  ASSERT_EQ(hold("jobs/nightly report"), token) << "re-entry keeps the token";
  ASSERT_TRUE(serve());

  const Reply held = get("/api/lock", {{"key", "jobs/nightly report"}});
  ASSERT_EQ(held.status, 200) << held.body;
  expect_lock(sole(field(held.doc, "holders")), "jobs/nightly report", token, 2);
  EXPECT_EQ(field(held.doc, "key"), "jobs/nightly report") << held.body;
  EXPECT_EQ(field(held.doc, "held"), true) << held.body;

  const Reply free = get("/api/lock", {{"key", "nightly"}});
  EXPECT_EQ(free.status, 404) << free.body;
  EXPECT_EQ(free.doc, json({{"key", "nightly"}, {"held", false}, {"holders", json::array()}})) << free.body;
  stop();
}

TEST_F(ServeTest, ForceReleaseFreesTheKeyAndIsAudited) {
  const std::uint64_t token = hold("deploy");
  const std::uint64_t other = hold("nightly", "cron-7");
  ASSERT_TRUE(serve());

  // Without the lock delay (ForceReleaseLockDelayShowsTheEvictedHolder has it): free at once.
  const Reply freed = force_release(
      {{"key", "deploy"}, {"reason", "stuck after host crash"}, {"by", "alice"}, {"lock_delay", false}});
  ASSERT_EQ(freed.status, 200) << freed.body;
  expect_lock(sole(field(freed.doc, "released")), "deploy", token);
  const json audit = sole(field(freed.doc, "audit"));
  EXPECT_EQ(field(audit, "by"), "alice") << audit;
  EXPECT_EQ(field(audit, "from"), "127.0.0.1") << audit;
  EXPECT_EQ(field(audit, "reason"), "stuck after host crash") << audit;
  EXPECT_EQ(field(audit, "key"), "deploy") << audit;
  EXPECT_EQ(field(audit, "owner"), "holder-1") << audit;
  EXPECT_EQ(field(audit, "mode"), "exclusive") << audit;
  EXPECT_EQ(field(audit, "token"), token) << audit;
  const json at = field(audit, "at");
  ASSERT_TRUE(at.is_string()) << audit;
  EXPECT_LE(std::abs(seconds_from_now(at.get<std::string>())), 60) << "not UTC ISO-8601 of now: " << at;

  const json after = status("deploy");
  EXPECT_EQ(field(after, "held"), false) << after;
  EXPECT_EQ(get("/api/lock", {{"key", "deploy"}}).status, 404);
  EXPECT_EQ(field(holder("nightly"), "token"), other) << "only the named key is freed";

  const std::vector<json> logged = audit_file();
  ASSERT_EQ(logged.size(), 1u) << read("audit.log");
  EXPECT_EQ(logged[0], audit);

  const Reply again =
      force_release({{"key", "deploy"}, {"reason", "twice"}, {"by", "alice"}, {"lock_delay", false}});
  EXPECT_EQ(again.status, 404) << again.body;
  EXPECT_EQ(again.doc, json({{"key", "deploy"}, {"released", json::array()}})) << again.body;

  // Without "by", the entry says anonymous; the listing is newest first.
  const Reply anonymous =
      force_release({{"key", "nightly"}, {"reason", "cron host retired"}, {"lock_delay", false}});
  ASSERT_EQ(anonymous.status, 200) << anonymous.body;
  expect_lock(sole(field(anonymous.doc, "released")), "nightly", other, 1, "cron-7");
  const json anonymous_audit = sole(field(anonymous.doc, "audit"));
  EXPECT_EQ(field(anonymous_audit, "by"), "anonymous") << anonymous.body;

  const Reply listing = get("/api/audit");
  ASSERT_EQ(listing.status, 200) << listing.body;
  const json entries = field(listing.doc, "entries");
  ASSERT_EQ(entries.size(), 2u) << listing.body;
  EXPECT_EQ(entries[0], anonymous_audit);
  EXPECT_EQ(entries[1], audit);
  const json newest = field(get("/api/audit", {{"limit", "1"}}).doc, "entries");
  ASSERT_EQ(newest.size(), 1u) << newest;
  EXPECT_EQ(newest[0], anonymous_audit);
  EXPECT_EQ(audit_file().size(), 2u) << read("audit.log");

  const Result retaken = dlock({"acquire", "--no-wait", "--owner", "holder-2", "deploy"});
  ASSERT_EQ(retaken.exit_code, 0) << "the key is free for the next holder: " << retaken.err;
  EXPECT_GT(std::stoull(retaken.out), token);
  stop();
}

// The on-call path end to end: a `dlock run` holds the key in another process; the API's
// force-release frees it, and the holder learns of it at its next renewal and stops its
// command (exit 75).
// "token" names the one holder to evict: the one the page shows, not whoever holds the key by
// the time the request comes. Another token evicts nothing.
TEST_F(ServeTest, ForceReleaseByToken) {
  const std::uint64_t token = hold("deploy");
  ASSERT_TRUE(serve());
  const Reply wrong = force_release({{"key", "deploy"}, {"token", token + 1}, {"reason", "r"}});
  EXPECT_EQ(wrong.status, 404) << wrong.body;
  EXPECT_EQ(wrong.doc, json({{"key", "deploy"}, {"released", json::array()}})) << wrong.body;
  EXPECT_EQ(field(holder("deploy"), "evicted"), false) << "a wrong token evicted the holder";
  EXPECT_TRUE(audit_file().empty()) << read("audit.log");

  const Reply right =
      force_release({{"key", "deploy"}, {"token", token}, {"reason", "r"}, {"lock_delay", false}});
  ASSERT_EQ(right.status, 200) << right.body;
  expect_lock(sole(field(right.doc, "released")), "deploy", token);
  EXPECT_EQ(field(sole(audit_file()), "token"), token) << read("audit.log");
  EXPECT_EQ(field(status("deploy"), "held"), false);
  stop();
}

TEST_F(ServeTest, ForceReleaseStopsTheHoldersCommand) {
  Process holder({kDlock, "--url", url_, "run", "--ttl", "900ms", "job", "--", "sleep", "60"}, env());
  const auto deadline = Clock::now() + 5s;
  while (field(status("job"), "held") != true && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(field(status("job"), "held"), true) << "dlock run never took the key";
  ASSERT_TRUE(serve());

  const Reply freed = force_release({{"key", "job"}, {"reason", "runaway job"}, {"by", "oncall"}});
  ASSERT_EQ(freed.status, 200) << freed.body;
  const Result run = holder.wait(5s);
  EXPECT_EQ(run.exit_code, 75) << "the holder's dlock run did not stop its command\nstderr: " << run.err;
  EXPECT_LT(run.elapsed, 10s);
  stop();
}

TEST_F(ServeTest, ForceReleaseRefusesCrossSiteRequests) {
  const std::uint64_t token = hold("deploy");
  ASSERT_TRUE(serve());
  const std::string body = json({{"key", "deploy"}, {"reason", "csrf"}}).dump();

  // The content types a cross-site form or fetch may send without a preflight.
  for (const std::string type : {"text/plain", "application/x-www-form-urlencoded", ""}) {
    const Reply reply = post("/api/force-release", body, type);
    EXPECT_EQ(reply.status, 415) << "Content-Type '" << type << "': " << reply.body;
  }
  const std::string self = "http://127.0.0.1:" + std::to_string(port_);
  for (const std::string& origin : {std::string("http://evil.example"), std::string("null"),
                                    self + ".evil.example", std::string("http://127.0.0.1")}) {
    const Reply reply = post("/api/force-release", body, "application/json", {{"Origin", origin}});
    EXPECT_EQ(reply.status, 403) << "Origin '" << origin << "': " << reply.body;
  }
  auto client = http();
  const Reply by_get = record(client.Get("/api/force-release?key=deploy&reason=csrf"));
  EXPECT_TRUE(by_get.status == 405 || by_get.status == 404) << by_get.status << ": " << by_get.body;

  const json still = status("deploy");
  EXPECT_EQ(field(still, "held"), true) << still;
  EXPECT_EQ(field(sole(field(still, "holders")), "token"), token) << still;
  EXPECT_TRUE(audit_file().empty()) << read("audit.log");

  // The page's own origin may.
  const Reply same = post("/api/force-release", body, "application/json", {{"Origin", self}});
  EXPECT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(field(holder("deploy"), "evicted"), true) << "evicted, behind the default lock delay";
  EXPECT_EQ(audit_file().size(), 1u) << read("audit.log");
  stop();
}

TEST_F(ServeTest, AuditLogSurvivesARestart) {
  hold("first");
  const std::uint64_t second_token = hold("second");
  ASSERT_TRUE(serve());
  const Reply first = force_release({{"key", "first"}, {"reason", "before the restart"}, {"by", "bob"}});
  ASSERT_EQ(first.status, 200) << first.body;
  const json first_audit = sole(field(first.doc, "audit"));
  stop();

  ASSERT_TRUE(serve());
  const Reply kept = get("/api/audit");
  ASSERT_EQ(kept.status, 200) << kept.body;
  ASSERT_EQ(field(kept.doc, "entries").size(), 1u) << kept.body;
  EXPECT_EQ(field(kept.doc, "entries")[0], first_audit);

  const Reply second = force_release({{"key", "second"}, {"reason", "after the restart"}, {"by", "bob"}});
  ASSERT_EQ(second.status, 200) << second.body;
  const json second_audit = sole(field(second.doc, "audit"));
  EXPECT_EQ(field(second_audit, "token"), second_token);
  const json entries = field(get("/api/audit").doc, "entries");
  ASSERT_EQ(entries.size(), 2u) << entries;
  EXPECT_EQ(entries[0], second_audit);
  EXPECT_EQ(entries[1], first_audit);
  stop();

  const std::vector<json> logged = audit_file();
  ASSERT_EQ(logged.size(), 2u) << read("audit.log");
  EXPECT_EQ(logged[0], first_audit);
  EXPECT_EQ(logged[1], second_audit);
}

TEST_F(ServeTest, NonLoopbackWithoutTokenRefusesToStart) {
  const auto argv = serve_command({"--listen", "0.0.0.0:0"});
  const Result result = Process(argv, env()).wait(5s);
  EXPECT_EQ(result.exit_code, 64) << result.out << result.err;
  EXPECT_TRUE(result.err.starts_with("dlock: ")) << result.err;
  EXPECT_TRUE(contains(result.err, "--token-file")) << result.err;
  EXPECT_FALSE(contains(result.out, "listening")) << result.out;
}

TEST_F(ServeTest, NonLoopbackStartsWithATokenFromTheEnvironment) {
  const std::string token = random_secret();
  ASSERT_TRUE(serve({"--listen", "0.0.0.0:0"}, {"DLOCK_SERVE_TOKEN=" + token}));
  EXPECT_EQ(get("/api/locks").status, 401);
  EXPECT_EQ(get("/api/locks", {}, {{"Authorization", "Bearer " + token}}).status, 200);
  const Result result = stop();
  EXPECT_FALSE(contains(result.out + result.err, token));
}

TEST_F(ServeTest, EmptyTokenFileRefusesToStart) {
  write("token", "");
  const Result result = Process(serve_command({"--token-file", path("token")}), env()).wait(5s);
  EXPECT_EQ(result.exit_code, 64) << result.out << result.err;
  EXPECT_TRUE(result.err.starts_with("dlock: ")) << result.err;
}

TEST_F(ServeTest, TokenRequiredAndNeverEchoed) {
  const std::string token = random_secret();
  write("token", token + "  \n");
  const std::uint64_t held = hold("deploy");
  ASSERT_TRUE(serve({"--token-file", path("token")}));
  const httplib::Headers good = {{"Authorization", "Bearer " + token}};

  EXPECT_EQ(get("/healthz").status, 200) << "health checks need no token";
  for (const std::string target : {"/api/locks", "/api/lock", "/api/audit", "/metrics"}) {
    const Reply reply = get(target, {{"key", "deploy"}});
    EXPECT_EQ(reply.status, 401) << target << ": " << reply.body;
    EXPECT_TRUE(field(reply.doc, "error").is_string()) << target << ": " << reply.body;
  }
  for (const std::string& wrong :
       {std::string("Bearer wrong"), "Bearer " + token + "x", "Bearer " + token.substr(1), token,
        "Basic " + token, std::string("Bearer")}) {
    const Reply reply = get("/api/locks", {}, {{"Authorization", wrong}});
    EXPECT_EQ(reply.status, 401) << "Authorization: " << wrong << "\n" << reply.body;
  }
  const Reply refused = force_release({{"key", "deploy"}, {"reason", "no token"}});
  EXPECT_EQ(refused.status, 401) << refused.body;
  EXPECT_EQ(field(status("deploy"), "held"), true);

  EXPECT_EQ(get("/api/locks", {}, good).status, 200);
  const Reply inspected = get("/api/lock", {{"key", "deploy"}}, good);
  EXPECT_EQ(inspected.status, 200) << inspected.body;
  EXPECT_EQ(get("/metrics", {}, good).status, 200);
  const Reply freed = force_release({{"key", "deploy"}, {"reason", "with the token"}}, good);
  ASSERT_EQ(freed.status, 200) << freed.body;
  EXPECT_EQ(field(sole(field(freed.doc, "released")), "token"), held);
  EXPECT_EQ(get("/api/audit", {}, good).status, 200);
  const Result result = stop();

  ASSERT_FALSE(bodies_.empty());
  for (const auto& body : bodies_) EXPECT_FALSE(contains(body, token)) << body;
  EXPECT_FALSE(contains(result.out, token)) << result.out;
  EXPECT_FALSE(contains(result.err, token)) << result.err;
  EXPECT_FALSE(contains(read("audit.log"), token)) << read("audit.log");
}

TEST_F(ServeTest, MetricsInPrometheusTextFormat) {
  ASSERT_TRUE(serve());
  const Reply empty = get("/metrics");
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_TRUE(empty.content_type.starts_with("text/plain; version=0.0.4")) << empty.content_type;
  EXPECT_TRUE(has_line(empty.body, "dlock_held_locks 0")) << empty.body;
  EXPECT_TRUE(has_line(empty.body, "dlock_force_releases_total 0")) << empty.body;
  const std::vector<std::string> counters = {
      "dlock_force_releases_total", "dlock_acquisitions_total", "dlock_conflicts_total", "dlock_waits_total",
      "dlock_wait_seconds_total",   "dlock_renewals_total",     "dlock_losses_total"};
  EXPECT_TRUE(contains(empty.body, "# HELP dlock_held_locks ")) << empty.body;
  EXPECT_TRUE(has_line(empty.body, "# TYPE dlock_held_locks gauge")) << empty.body;
  for (const std::string& metric : counters) {
    EXPECT_TRUE(contains(empty.body, "# HELP " + metric + " ")) << empty.body;
    EXPECT_TRUE(has_line(empty.body, "# TYPE " + metric + " counter")) << empty.body;
    EXPECT_TRUE(has_line(empty.body, metric + " 0")) << empty.body;
  }

  // What the CLI's clients did reaches the store's totals when they exit.
  hold("a");
  hold("b", "holder-2");
  EXPECT_EQ(dlock({"acquire", "--owner", "holder-3", "--no-wait", "b"}).exit_code, 1);
  const Reply two = get("/metrics");
  EXPECT_TRUE(has_line(two.body, "dlock_held_locks 2")) << two.body;
  EXPECT_TRUE(has_line(two.body, "dlock_force_releases_total 0")) << two.body;
  EXPECT_TRUE(has_line(two.body, "dlock_acquisitions_total 2")) << two.body;
  EXPECT_TRUE(has_line(two.body, "dlock_conflicts_total 1")) << two.body;
  EXPECT_TRUE(has_line(two.body, "dlock_waits_total 0")) << two.body;

  ASSERT_EQ(force_release({{"key", "a"}, {"reason", "metrics"}, {"lock_delay", false}}).status, 200);
  const Reply one = get("/metrics");
  EXPECT_TRUE(has_line(one.body, "dlock_held_locks 1")) << one.body;
  EXPECT_TRUE(has_line(one.body, "dlock_force_releases_total 1")) << one.body;
  stop();
}

TEST_F(ServeTest, BadRequests) {
  hold("deploy");
  ASSERT_TRUE(serve());
  for (const std::string limit : {"0", "5000", "1001", "-1", "abc"}) {
    const Reply reply = get("/api/locks", {{"limit", limit}});
    EXPECT_EQ(reply.status, 400) << "limit=" << limit << ": " << reply.body;
    EXPECT_TRUE(field(reply.doc, "error").is_string()) << "limit=" << limit << ": " << reply.body;
  }
  for (const std::string limit : {"1", "1000"}) {
    const Reply reply = get("/api/locks", {{"limit", limit}});
    EXPECT_EQ(reply.status, 200) << "limit=" << limit << ": " << reply.body;
  }

  const Reply no_key = get("/api/lock");
  EXPECT_EQ(no_key.status, 400) << no_key.body;
  EXPECT_TRUE(field(no_key.doc, "error").is_string()) << no_key.body;

  for (const std::string body : {R"({"reason":"r"})", R"({"key":"","reason":"r"})", R"({"key":"deploy"})",
                                 R"({"key":"deploy","reason":""})", R"({"key":"deploy")", "[]", ""}) {
    const Reply reply = post("/api/force-release", body, "application/json");
    EXPECT_EQ(reply.status, 400) << body << ": " << reply.body;
  }
  EXPECT_EQ(field(status("deploy"), "held"), true) << "a bad request released the lock";

  for (const std::string target : {"/nope", "/api/nope", "/api/locks/deploy", "/healthz/x"}) {
    const Reply reply = get(target);
    EXPECT_EQ(reply.status, 404) << target;
    EXPECT_TRUE(field(reply.doc, "error").is_string()) << target << ": " << reply.body;
  }
  stop();
}

// DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends its
// requests here with its own name in Host and Origin. Only this server's own names are served.
TEST_F(ServeTest, DnsRebindingHostIsRefused) {
  const std::uint64_t token = hold("deploy");
  ASSERT_TRUE(serve());
  const std::string evil = "evil.example:" + std::to_string(port_);
  const httplib::Headers rebound = {{"Host", evil}, {"Origin", "http://" + evil}};

  for (const std::string target : {"/api/locks", "/api/lock", "/api/audit", "/metrics", "/"}) {
    const Reply reply = get(target, {{"key", "deploy"}}, {{"Host", evil}});
    EXPECT_TRUE(reply.status == 403 || reply.status == 421)
        << target << ": " << reply.status << " " << reply.body;
    EXPECT_TRUE(contains(reply.body, "--allow-host")) << target << ": " << reply.body;
    EXPECT_FALSE(contains(reply.body, "holder-1")) << target << ": " << reply.body;
  }
  const Reply post = force_release({{"key", "deploy"}, {"reason", "x"}}, rebound);
  EXPECT_TRUE(post.status == 403 || post.status == 421) << post.status << " " << post.body;
  const json still = status("deploy");
  EXPECT_EQ(field(still, "held"), true) << still;
  EXPECT_EQ(field(sole(field(still, "holders")), "token"), token) << still;
  EXPECT_TRUE(audit_file().empty()) << read("audit.log");

  // Another port of a loopback name, or no port (80), is another server.
  for (const std::string& host : {std::string("127.0.0.1"), "localhost:" + std::to_string(port_ + 1)}) {
    const Reply reply = get("/api/locks", {}, {{"Host", host}});
    EXPECT_TRUE(reply.status == 403 || reply.status == 421) << host << ": " << reply.body;
  }
  // Probes may send any Host: /healthz holds nothing but the backend's scheme.
  EXPECT_EQ(get("/healthz", {}, {{"Host", evil}}).status, 200);

  // The listening address's own names still work.
  const std::string port = std::to_string(port_);
  for (const std::string& host :
       {"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port, "[::1]:" + port}) {
    const Reply reply = get("/api/locks", {}, {{"Host", host}});
    EXPECT_EQ(reply.status, 200) << host << ": " << reply.body;
  }
  EXPECT_EQ(get("/").status, 200);
  const Reply own = force_release({{"key", "deploy"}, {"reason", "own origin"}},
                                  {{"Host", "localhost:" + port}, {"Origin", "http://localhost:" + port}});
  EXPECT_EQ(own.status, 200) << own.body;
  stop();
}

// Behind a TLS-terminating reverse proxy: the browser's Origin is https://NAME, and the proxy
// passes Host: NAME (with or without a port); --allow-host names it.
TEST_F(ServeTest, DnsRebindingAllowHostServesAReverseProxy) {
  hold("deploy");
  hold("nightly");
  ASSERT_TRUE(serve({"--allow-host", "locks.example.com", "--allow-host", "admin.example.com:8443"}));
  const httplib::Headers proxied = {{"Host", "locks.example.com"}, {"Origin", "https://locks.example.com"}};

  EXPECT_EQ(get("/api/locks", {}, {{"Host", "locks.example.com"}}).status, 200);
  EXPECT_EQ(get("/", {}, {{"Host", "locks.example.com:443"}}).status, 200);
  const Reply freed =
      force_release({{"key", "deploy"}, {"reason", "through the proxy"}, {"lock_delay", false}}, proxied);
  EXPECT_EQ(freed.status, 200) << freed.body;
  EXPECT_EQ(field(status("deploy"), "held"), false);

  // A name given with a port is allowed with that port only.
  EXPECT_EQ(get("/api/locks", {}, {{"Host", "admin.example.com:8443"}}).status, 200);
  const Reply other_port = get("/api/locks", {}, {{"Host", "admin.example.com:9443"}});
  EXPECT_TRUE(other_port.status == 403 || other_port.status == 421) << other_port.body;
  // An allowed Host does not make another site's Origin allowed, nor a scheme but http(s).
  for (const std::string origin :
       {"https://evil.example", "ftp://locks.example.com", "null", "https://locks.example.com.evil.example",
        "https://admin.example.com:9443"}) {
    const Reply reply = force_release({{"key", "nightly"}, {"reason", "x"}},
                                      {{"Host", "locks.example.com"}, {"Origin", origin}});
    EXPECT_EQ(reply.status, 403) << origin << ": " << reply.body;
  }
  EXPECT_EQ(field(status("nightly"), "held"), true);
  stop();

  for (const std::string bad :
       {"", "locks.example.com:0", "locks.example.com:x", "[::1", "a b", "http://x"}) {
    const Result result = Process(serve_command({"--allow-host", bad}), env()).wait(5s);
    EXPECT_EQ(result.exit_code, 64) << "--allow-host '" << bad << "': " << result.out << result.err;
    EXPECT_TRUE(contains(result.err, "--allow-host")) << result.err;
  }
}

// A TCP connection to the server from `source`, another loopback address being another peer.
class Connection {
 public:
  Connection(const std::string& source, int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &local.sin_addr);
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
    connected_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0 &&
                 ::connect(fd_, reinterpret_cast<sockaddr*>(&remote), sizeof remote) == 0;
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& text) const {
    return ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
  }
  // Reads until the server closes the connection (end of stream or reset): true, with what it
  // sent in `received`; false if it is still open at `deadline`.
  bool closed_by_server(Clock::time_point deadline, std::string& received) const {
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd wait{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&wait, 1, static_cast<int>(left)) <= 0) return false;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) return true;
      received.append(buffer, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

// Pre-auth slowloris: connections that never finish their request must neither starve the
// other clients of the server's threads nor stay open: 40 of them from one peer, then
// /healthz from another.
TEST_F(ServeTest, SlowlorisHalfOpenRequestsDoNotStarveOthers) {
  ASSERT_TRUE(serve());
  std::vector<std::unique_ptr<Connection>> slow;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(std::make_unique<Connection>("127.0.0.2", port_));
    ASSERT_TRUE(slow.back()->connected()) << "connection " << i << ": " << std::strerror(errno);
    ASSERT_TRUE(slow.back()->send("GET /api/lo")) << "connection " << i;
  }

  const auto start = Clock::now();
  const Reply health = get("/healthz");
  const auto took = Clock::now() - start;
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_LT(took, 3s) << "/healthz took " << std::chrono::duration_cast<milliseconds>(took).count() << " ms";

  // Each half-open request is cut off (the request time is 5 s), and the peer keeps at most 16
  // connections at a time: others are answered 503 at once. (How many in all depends on how
  // the server's threads take them up: one it takes after 5 s finds the first 16 gone.)
  const auto deadline = Clock::now() + 20s;
  int refused = 0;
  for (std::size_t i = 0; i < slow.size(); ++i) {
    std::string received;
    EXPECT_TRUE(slow[i]->closed_by_server(deadline, received))
        << "half-open connection " << i << " is still open";
    EXPECT_FALSE(contains(received, " 200 ")) << received;
    if (received.starts_with("HTTP/1.1 503 ")) {
      ++refused;
      EXPECT_TRUE(contains(received, "too many connections from 127.0.0.2: at most 16")) << received;
    }
  }
  EXPECT_GT(refused, 0) << "no connection of the peer with 40 was refused";
  stop();
}

// Bodies are small: a huge one is answered 413 once the first 16 KiB are in, not read to its
// end. Sent by hand: a client writing the whole megabyte may see its write fail first, and the
// answer must come well before the 5 s read timeout.
TEST_F(ServeTest, SlowlorisLargeBodyIsRefused) {
  hold("deploy");
  ASSERT_TRUE(serve());
  Connection client("127.0.0.1", port_);
  ASSERT_TRUE(client.connected()) << std::strerror(errno);
  ASSERT_TRUE(client.send("POST /api/force-release HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port_) +
                          "\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"));
  client.send(std::string(64 * 1024, 'x'));  // may fail: the server hangs up once it has had enough
  std::string answer;
  client.closed_by_server(Clock::now() + 3s, answer);  // what came within 3 s, closed or not
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << "no 413 before the megabyte: " << answer.substr(0, 200);
  EXPECT_EQ(get("/healthz").status, 200);
  EXPECT_EQ(field(status("deploy"), "held"), true);
  stop();
}

// {"key":5} reached the JSON library's exception (503 with its message): every field of the
// body has its type checked, and the answer names the field.
TEST_F(ServeTest, ForceReleaseBodyFieldTypesAreChecked) {
  hold("deploy");
  ASSERT_TRUE(serve());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"key":5,"reason":"r"})", "key"},
      {R"({"key":["deploy"],"reason":"r"})", "key"},
      {R"({"key":"deploy","reason":{"why":"r"}})", "reason"},
      {R"({"key":"deploy","reason":"r","by":7})", "by"},
      {R"({"key":"deploy","reason":"r","lock_delay":"no"})", "lock_delay"},
      {R"({"key":"deploy","reason":"r","lock_delay":0})", "lock_delay"},
      {R"({"key":"deploy","reason":"r","lockdelay":false})", "lockdelay"},
      {R"({"key":"deploy","reason":"r","token":"7"})", "token"},
      {R"({"key":"deploy","reason":"r","token":-7})", "token"},
      {R"({"key":"deploy","reason":"r","token":7.5})", "token"},
  };
  for (const auto& [body, name] : cases) {
    const Reply reply = post("/api/force-release", body, "application/json");
    EXPECT_EQ(reply.status, 400) << body << ": " << reply.body;
    const json error = field(reply.doc, "error");
    ASSERT_TRUE(error.is_string()) << body << ": " << reply.body;
    EXPECT_TRUE(contains(error.get<std::string>(), "'" + name + "'")) << body << ": " << reply.body;
    EXPECT_FALSE(contains(error.get<std::string>(), "[json.exception")) << body << ": " << reply.body;
  }
  EXPECT_EQ(field(status("deploy"), "held"), true) << "a bad request released the lock";
  // An invalid key is the caller's mistake too.
  const Reply control = force_release({{"key", "a\nb"}, {"reason", "r"}});
  EXPECT_EQ(control.status, 400) << control.body;
  stop();
}

// The docs say the token file's first line is taken without surrounding blanks: both ends.
TEST_F(ServeTest, TokenFileIsTrimmedOnBothEnds) {
  const std::string token = random_secret();
  write("token", " \t" + token + " \r\n");
  ASSERT_TRUE(serve({"--token-file", path("token")}));
  EXPECT_EQ(get("/api/locks", {}, {{"Authorization", "Bearer " + token}}).status, 200);
  EXPECT_EQ(get("/api/locks", {}, {{"Authorization", "Bearer  \t" + token}}).status, 401);
  stop();
}

// A scrape paged through every held lock: it counts no further than --metrics-held-max
// (default 1000, one page), and says where it stopped.
TEST_F(ServeTest, MetricsScrapeDoesNotPageThroughEveryLock) {
  for (const std::string key : {"m/1", "m/2", "m/3", "m/4", "m/5"}) hold(key);
  ASSERT_TRUE(serve({"--metrics-held-max", "3"}));
  const Reply capped = get("/metrics");
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_TRUE(has_line(capped.body, "dlock_held_locks 3")) << capped.body;
  EXPECT_TRUE(has_line(capped.body, "dlock_held_locks_limit 3")) << capped.body;
  EXPECT_TRUE(has_line(capped.body, "# TYPE dlock_held_locks_limit gauge")) << capped.body;
  stop();

  ASSERT_TRUE(serve());
  const Reply all = get("/metrics");
  EXPECT_TRUE(has_line(all.body, "dlock_held_locks 5")) << all.body;
  EXPECT_TRUE(has_line(all.body, "dlock_held_locks_limit 1000")) << all.body;
  stop();

  for (const std::string bad : {"0", "-1", "x"}) {
    const Result result = Process(serve_command({"--metrics-held-max", bad}), env()).wait(5s);
    EXPECT_EQ(result.exit_code, 64) << bad << ": " << result.out << result.err;
  }
}

// Force-release takes "lock_delay" (default true: Eviction::delayed; false: at once), the
// audit records it, and every lock says whether its holder was evicted.
TEST_F(ServeTest, ForceReleaseLockDelayIsAudited) {
  hold("delayed");
  hold("at-once");
  ASSERT_TRUE(serve());
  const Reply held = get("/api/lock", {{"key", "delayed"}});
  EXPECT_EQ(field(sole(field(held.doc, "holders")), "evicted"), false) << held.body;
  const Reply listed = get("/api/locks");
  ASSERT_EQ(field(listed.doc, "locks").size(), 2u) << listed.body;
  for (const auto& lock : field(listed.doc, "locks")) EXPECT_EQ(field(lock, "evicted"), false) << lock;

  const Reply at_once = force_release({{"key", "at-once"}, {"reason", "r"}, {"lock_delay", false}});
  ASSERT_EQ(at_once.status, 200) << at_once.body;
  EXPECT_EQ(field(sole(field(at_once.doc, "audit")), "lock_delay"), false) << at_once.body;
  EXPECT_EQ(field(sole(field(at_once.doc, "released")), "evicted"), false) << at_once.body;
  EXPECT_EQ(get("/api/lock", {{"key", "at-once"}}).status, 404) << "the key is free at once";
  const Result next = dlock({"acquire", "--no-wait", "--owner", "holder-2", "at-once"});
  EXPECT_EQ(next.exit_code, 0) << next.err;

  const Reply delayed = force_release({{"key", "delayed"}, {"reason", "r"}});
  ASSERT_EQ(delayed.status, 200) << delayed.body;
  EXPECT_EQ(field(sole(field(delayed.doc, "audit")), "lock_delay"), true) << delayed.body;
  const std::vector<json> logged = audit_file();
  ASSERT_EQ(logged.size(), 2u) << read("audit.log");
  EXPECT_EQ(field(logged[0], "lock_delay"), false);
  EXPECT_EQ(field(logged[1], "lock_delay"), true);
  stop();
}

// With the lock delay, the evicted holder stays listed, marked, until it stops or its lease
// ends; a force-release with "lock_delay": false frees the key at once.
TEST_F(ServeTest, ForceReleaseLockDelayShowsTheEvictedHolder) {
  const std::uint64_t token = hold("deploy");
  ASSERT_TRUE(serve());
  ASSERT_EQ(force_release({{"key", "deploy"}, {"reason", "r"}}).status, 200);
  const Reply closed = get("/api/lock", {{"key", "deploy"}});
  ASSERT_EQ(closed.status, 200) << "the default force-release must keep the evicted holder: " << closed.body;
  const json evicted = sole(field(closed.doc, "holders"));
  EXPECT_EQ(field(evicted, "evicted"), true) << closed.body;
  EXPECT_EQ(field(evicted, "token"), token) << closed.body;
  EXPECT_EQ(field(evicted, "hold_count"), 0) << closed.body;
  const json listed = field(get("/api/locks").doc, "locks");
  ASSERT_EQ(listed.size(), 1u) << listed;
  EXPECT_EQ(field(listed[0], "evicted"), true) << listed;
  EXPECT_EQ(dlock({"acquire", "--no-wait", "--owner", "holder-2", "deploy"}).exit_code, 1)
      << "the key is closed while the evicted holder may still run";

  const Reply opened = force_release({{"key", "deploy"}, {"reason", "r"}, {"lock_delay", false}});
  ASSERT_EQ(opened.status, 200) << opened.body;
  EXPECT_EQ(field(sole(field(opened.doc, "released")), "evicted"), true) << opened.body;
  EXPECT_EQ(get("/api/lock", {{"key", "deploy"}}).status, 404);
  stop();
}

}  // namespace
