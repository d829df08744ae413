#include "support/backend_params.hpp"

#if DLOCK_WITH_MYSQL
#include "support/mysql_rows.hpp"
#endif

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <map>
#include <sstream>

namespace dlock::test {
namespace {

// The value of `name=` in a URL's query, or "".
std::string option(const std::string& url, const std::string& name) {
  const auto query = url.find('?');
  if (query == std::string::npos) return "";
  std::istringstream pairs(url.substr(query + 1));
  for (std::string pair; std::getline(pairs, pair, '&');) {
    if (pair.rfind(name + "=", 0) == 0) return pair.substr(name.size() + 1);
  }
  return "";
}

std::string sanitize(std::string_view text) {
  std::string out;
  for (const char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "backend" : out;
}

BackendParam local_param() {
  BackendParam p;
  p.name = "local";
  p.make_url = [](const std::filesystem::path&) {
    static std::atomic<int> next{0};
    // A store of its own per test: local:// stores live as long as the process.
    return "local://conformance-" + std::to_string(::getpid()) + "-" + std::to_string(++next);
  };
  p.malformed_urls = {
      {"local://x?bogus=1", {"bogus"}},
      {"local://x/some/path", {"path"}},
  };
  return p;
}

#if DLOCK_WITH_SQLITE
BackendParam sqlite_param() {
  BackendParam p;
  p.name = "sqlite";
  p.make_url = [](const std::filesystem::path& temp_dir) {
    return "sqlite://" + (temp_dir / "locks.db").string();
  };
  // procfs refuses to create directories, even for root.
  p.bad_location_url = "sqlite:///proc/dlock-nope/x.db";
  p.bad_location_names = "/proc/dlock-nope";
  p.malformed_urls = {
      {"sqlite://", {"path", "file"}},
  };
  return p;
}
#endif

}  // namespace

std::vector<BackendParam> all_backends() {
  std::vector<BackendParam> params;
  params.push_back(local_param());
#if DLOCK_WITH_SQLITE
  params.push_back(sqlite_param());
#endif
  const char* env = std::getenv("DLOCK_TEST_URLS");  // NOLINT(concurrency-mt-unsafe): nothing sets it
  std::istringstream urls(env ? env : "");
  std::map<std::string, int> seen;
  for (const auto& p : params) seen[p.name] = 1;  // DLOCK_TEST_URLS=sqlite://… becomes sqlite_2
  for (std::string url; urls >> url;) {
    BackendParam p;
    const auto sep = url.find("://");
    const std::string scheme = sep == std::string::npos ? url : url.substr(0, sep);
    std::string name = sanitize(scheme);
    if (const std::string mode = option(url, "mode"); !mode.empty()) name += "_" + sanitize(mode);
    if (option(url, "fair") == "true") name += "_fair";
    if (option(url, "lock_delay") == "true") name += "_lock_delay";
    if (const int n = ++seen[name]; n > 1) name += "_" + std::to_string(n);
    p.name = name;
    if (scheme == "mysql" || scheme == "mariadb") {
      const std::string mode = option(url, "mode");
      // A table of its own per test, so tests running side by side never share keys.
      p.make_url = [url, mode](const std::filesystem::path& temp_dir) {
        const std::string table = (mode == "row" ? "r_" : "t_") + sanitize(temp_dir.filename().string()).substr(0, 53);
#if DLOCK_WITH_MYSQL
        if (mode == "row") create_row_table(url, table);
#endif
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "table=" + table;
      };
#if DLOCK_WITH_MYSQL
      if (mode == "row") {
        p.prepare_key = [](const std::string& test_url, const std::string& key) {
          insert_row(test_url, option(test_url, "table"), key);
        };
      }
#endif
    } else if (scheme == "postgres" || scheme == "postgresql") {
      // A table of its own per test, as for mysql://.
      p.make_url = [url](const std::filesystem::path& temp_dir) {
        const std::string table = "t_" + sanitize(temp_dir.filename().string()).substr(0, 48);
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "table=" + table;
      };
      p.bad_location_url = "postgres://dlock@127.0.0.1:1/dlock?connect_timeout=2s";  // nothing listens on port 1
      p.bad_location_names = "127.0.0.1:1";
      p.malformed_urls = {
          {"postgres://dlock@127.0.0.1:5432/db?mode=sometimes", {"mode"}},
          {"postgres://dlock@127.0.0.1:5432", {"database"}},
          {"postgres://127.0.0.1:5432/db", {"user"}},
          {"postgres://dlock@127.0.0.1:5432/db?table=no-dashes", {"table"}},
          {"postgres://dlock@127.0.0.1:5432/db?sslmode=sometimes", {"sslmode"}},
          {"postgres://dlock@127.0.0.1:5432/db?sslmode=verify-full", {"sslrootcert"}},
      };
    } else {
      p.make_url = [url](const std::filesystem::path&) { return url; };
    }
    if (scheme == "redis") {
      p.bad_location_url = "redis://127.0.0.1:1/0";  // nothing listens on port 1
      p.bad_location_names = "127.0.0.1:1";
      p.malformed_urls = {
          {"redis://127.0.0.1:6379/zero", {"database"}},
          {"rediss://127.0.0.1:6379/0", {"TLS"}},
          {"redis://127.0.0.1:6379/0?fair=maybe", {"fair"}},
          {"redis://127.0.0.1:6379/0?namespace=a%20b", {"namespace"}},
          {"redis://h1:1,h2:2/0", {"one host"}},
      };
    }
    if (scheme == "redlock") {
      p.bad_location_url = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0";  // nothing listens there
      p.bad_location_names = "127.0.0.1:1";
      p.malformed_urls = {
          {"redlock://127.0.0.1:1,127.0.0.1:2/0", {"at least 3"}},
          {"redlock://h1:1,h1:1,h2:2/0", {"twice"}},
          {"redlock://h1:1,h2:x,h3:3/0", {"port"}},
          {"redlock://h1:1,,h3:3/0", {"empty"}},
          {"redlock://h1:1,h2:2,h3:3/0?fair=true", {"fair"}},
          {"redlock://h1:1,h2:2,h3:3/zero", {"database"}},
      };
    }
    if (scheme == "zookeeper") {
      p.bad_location_url = "zookeeper://127.0.0.1:1/dlock?connect_timeout=1s";  // nothing listens on port 1
      p.bad_location_names = "127.0.0.1:1";
      p.malformed_urls = {
          {"zookeeper://127.0.0.1:2181/dlock?session_timeout=soon", {"session_timeout"}},
          {"zookeeper:///dlock", {"servers"}},
          {"zookeeper://127.0.0.1:2181/a//b", {"path"}},
          {"zookeeper://:secret@127.0.0.1:2181/dlock", {"user"}},
      };
    }
    if (scheme == "etcd") {
      p.bad_location_url = "etcd://127.0.0.1:1/dlock?connect_timeout=1s";  // nothing listens on port 1
      p.bad_location_names = "127.0.0.1:1";
      p.malformed_urls = {
          {"etcd://127.0.0.1:2379/dlock?ttl=soon", {"ttl"}},
          {"etcd://127.0.0.1:2379/dlock?ttl=1500ms", {"whole"}},
          {"etcd:///dlock", {"servers"}},
          {"etcd://127.0.0.1:2379,127.0.0.1/dlock", {"port"}},
          {"etcd://127.0.0.1:2379/a//b", {"prefix"}},
          {"etcd://:secret@127.0.0.1:2379/dlock", {"user"}},
      };
    }
    params.push_back(std::move(p));
  }
  return params;
}

}  // namespace dlock::test
