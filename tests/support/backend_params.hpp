#pragma once

// The backends the conformance suite runs against: the ones built in (local://, sqlite://)
// plus any real server named in DLOCK_TEST_URLS (space-separated URLs), so a new backend
// plugs in without touching the tests:
//
//   DLOCK_TEST_URLS="redis://127.0.0.1:6390 mysql://dlock@127.0.0.1:3307/dlock" ./conformance_tests
//
// Each parameter's name becomes the test-name suffix: Backends/Conformance.Reentrancy/sqlite.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace dlock::test {

// A URL that must be rejected, and what its error message must name (any one of `names`).
struct MalformedUrl {
  std::string url;
  std::vector<std::string> names;
};

struct BackendParam {
  // Test-name suffix: [A-Za-z0-9_]+, unique.
  std::string name;
  // A fresh URL for one test: its own store (a new database file under `temp_dir`, a new
  // local:// store), or the shared server for DLOCK_TEST_URLS (tests use unique keys).
  std::function<std::string(const std::filesystem::path& temp_dir)> make_url;
  // What the store can do is not listed here: cases ask the backend (BackendTest::capabilities).
  // Called with the test's URL for every key a test uses: row mode locks rows that must
  // exist. Empty for every other backend.
  std::function<void(const std::string& url, const std::string& key)> prepare_key;
  // A URL pointing at a store that cannot be reached or created, and the text its error must
  // contain (the path, the host). Empty: the case is skipped for this backend.
  std::string bad_location_url;
  std::string bad_location_names;
  // Malformed URLs of this scheme, beyond the generic ones every test run checks.
  std::vector<MalformedUrl> malformed_urls;
};

// Built-ins first, then DLOCK_TEST_URLS in order.
std::vector<BackendParam> all_backends();

// For INSTANTIATE_TEST_SUITE_P's name generator.
struct BackendParamName {
  template <class ParamInfo>
  std::string operator()(const ParamInfo& info) const {
    return info.param.name;
  }
};

// GoogleTest prints parameters with this (instead of dumping bytes).
inline void PrintTo(const BackendParam& param, std::ostream* os) { *os << param.name; }

}  // namespace dlock::test
