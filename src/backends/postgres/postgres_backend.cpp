#include "backends/postgres/postgres_backend.hpp"

#include <algorithm>
#include <utility>

#include "backends/postgres/common.hpp"
#include "backends/postgres/lease_sql.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {

using postgres::kName;

std::string postgres_schema(const std::string& table) {
  if (!postgres::valid_table(table)) {
    throw ConfigurationError("postgres:// table '" + table +
                                 "' must be 1 to 50 letters, digits or underscores, not starting with a digit",
                             kName);
  }
  return postgres::lock_table_schema(table);
}

std::shared_ptr<backend::Backend> make_postgres_backend(const core::Url& url) {
  postgres::Settings settings;
  core::UrlOptions options(url);
  settings.mode = options.take_string("mode").value_or(settings.mode);
  settings.table = options.take_string("table").value_or(settings.table);
  settings.create_table = options.take_bool("create_table").value_or(true);
  auto& c = settings.connect;
  c.connect_timeout = options.take_duration("connect_timeout").value_or(c.connect_timeout);
  c.read_timeout = options.take_duration("read_timeout").value_or(c.read_timeout);
  c.sslrootcert = options.take_string("sslrootcert").value_or("");
  c.sslmode = options.take_string("sslmode").value_or(c.sslrootcert.empty() ? c.sslmode : "verify-full");
  options.finish();
  c.redacted_url = url.redacted();
  if (settings.mode != "lease" && settings.mode != "session") {
    throw ConfigurationError("postgres:// mode must be lease or session; got '" + settings.mode + "'", kName);
  }
  postgres_schema(settings.table);  // validates the name
  if (c.read_timeout < std::chrono::seconds(1)) {
    throw ConfigurationError("postgres:// read_timeout must be at least 1s; got " +
                                 std::to_string(c.read_timeout.count()) + "ms",
                             kName);
  }
  static const char* const kSslModes[] = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"};
  if (std::find(std::begin(kSslModes), std::end(kSslModes), c.sslmode) == std::end(kSslModes)) {
    throw ConfigurationError("postgres:// sslmode must be disable, allow, prefer, require, verify-ca or verify-full; got '" +
                                 c.sslmode + "'",
                             kName);
  }
  if ((c.sslmode == "verify-ca" || c.sslmode == "verify-full") && c.sslrootcert.empty()) {
    throw ConfigurationError("postgres:// sslmode=" + c.sslmode +
                                 " needs sslrootcert=FILE: the CA certificates (PEM) that signed the server's certificate",
                             kName);
  }
  if (url.host.empty() || url.host.find(',') != std::string::npos || url.path.size() < 2 ||
      url.path.find('/', 1) != std::string::npos) {
    throw ConfigurationError("postgres:// needs one host and a database: postgres://user:password@host:5432/database; got " +
                                 url.redacted(),
                             kName);
  }
  if (url.user.empty()) {
    throw ConfigurationError("postgres:// needs a user: postgres://user:password@host:5432/database; got " +
                                 url.redacted(),
                             kName);
  }
  c.host = url.host;
  c.port = url.port.value_or(5432);
  c.user = url.user;
  c.password = url.password;
  c.database = url.path.substr(1);
  return settings.mode == "session" ? postgres::make_session_backend(std::move(settings))
                                    : postgres::make_lease_backend(std::move(settings));
}

}  // namespace dlock::backends
