#include "conformance/conformance_fixture.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "backends/registry.hpp"
#include "core/url.hpp"

namespace dlock::test {
namespace {

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::string>& log_lines() {
  static std::vector<std::string> lines;
  return lines;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warning:
      return "warning";
    case LogLevel::error:
      return "error";
  }
  return "?";
}

}  // namespace

const std::string& run_id() {
  static const std::string id = [] {
    std::random_device device;
    char text[17];
    std::snprintf(text, sizeof text, "%08x%08x", static_cast<unsigned>(device()),
                  static_cast<unsigned>(device()));
    return std::string(text);
  }();
  return id;
}

void LogCapture::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_log_handler([](LogLevel level, std::string_view message) {
      std::fprintf(stderr, "[dlock %s] %.*s\n", level_name(level), static_cast<int>(message.size()),
                   message.data());
      std::lock_guard lock(log_mutex());
      log_lines().emplace_back(message);
    });
  });
}

void LogCapture::clear() {
  std::lock_guard lock(log_mutex());
  log_lines().clear();
}

std::vector<std::string> LogCapture::lines() {
  std::lock_guard lock(log_mutex());
  return log_lines();
}

bool LogCapture::contains(std::initializer_list<std::string_view> parts) {
  std::lock_guard lock(log_mutex());
  return std::any_of(log_lines().begin(), log_lines().end(), [&](const std::string& line) {
    return std::all_of(parts.begin(), parts.end(),
                       [&](std::string_view part) { return line.find(part) != std::string::npos; });
  });
}

void BackendTest::SetUp() {
  LogCapture::install();
  LogCapture::clear();
  const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): nothing sets it
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlock-conformance-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "cannot create a temp directory from " << pattern;
  temp_dir_ = pattern;
  url_ = GetParam().make_url(temp_dir_);
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // name() is "Case/backend".
  key_base_ = "conformance/" + run_id() + "/" + info->name();
}

void BackendTest::TearDown() {
  std::error_code ignored;
  if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ignored);
}

std::shared_ptr<backend::Backend> BackendTest::open_backend() const {
  return backends::open_backend(core::Url::parse(url_));
}

const backend::Capabilities& BackendTest::capabilities() const {
  if (!capabilities_) capabilities_ = open_backend()->capabilities();
  return *capabilities_;
}

BackendTest::Faulty BackendTest::open_faulty() const {
  auto faults = std::make_shared<FaultBackend>(open_backend());
  Faulty faulty{Client::with_backend(faults), faults};
  // Warmed up (connections open, statements prepared, tables made): the cases time leases of a
  // few hundred milliseconds from their first acquire, which a loaded machine may spend opening
  // a connection (postgres_session lost such a lease before its first renewal in CI).
  faulty.client.acquire(key("warm-up"), {.ttl = std::chrono::seconds(10)}).release();
  faults->reset_counts();
  return faulty;
}

std::string BackendTest::key(std::string_view name) const { return prepared(key_base_ + "/" + std::string(name)); }

std::string BackendTest::prepared(std::string key) const {
  if (GetParam().prepare_key) GetParam().prepare_key(url_, key);
  return key;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

::testing::AssertionResult message_names(const std::string& message, const std::vector<std::string>& all,
                                         const std::vector<std::string>& any) {
  const std::string text = lower(message);
  for (const auto& part : all) {
    if (text.find(lower(part)) == std::string::npos) {
      return ::testing::AssertionFailure() << "the message does not name \"" << part << "\": " << message;
    }
  }
  if (!any.empty() && std::none_of(any.begin(), any.end(), [&](const std::string& part) {
        return text.find(lower(part)) != std::string::npos;
      })) {
    std::string wanted;
    for (const auto& part : any) wanted += (wanted.empty() ? "\"" : " or \"") + part + "\"";
    return ::testing::AssertionFailure() << "the message names none of " << wanted << ": " << message;
  }
  return ::testing::AssertionSuccess() << message;
}

}  // namespace dlock::test
