#include "backends/mysql/mysql_backend.hpp"

#include <algorithm>
#include <fstream>
#include <utility>

#include "backends/mysql/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {

using mysql::kName;

namespace {

// The TLS options, checked before connecting (connection.hpp says what each mode does).
void check_tls(const mysql::ConnectOptions& c) {
  static const char* const kSslModes[] = {"disabled", "preferred", "required", "verify-ca", "verify-identity"};
  if (std::find(std::begin(kSslModes), std::end(kSslModes), c.ssl_mode) == std::end(kSslModes)) {
    throw ConfigurationError("mysql:// ssl-mode must be disabled, preferred, required, verify-ca or verify-identity; got '" +
                                 c.ssl_mode + "'",
                             kName);
  }
  const bool verifies = c.ssl_mode == "verify-ca" || c.ssl_mode == "verify-identity";
  if (verifies && c.ssl_ca.empty()) {
    throw ConfigurationError("mysql:// ssl-mode=" + c.ssl_mode +
                                 " needs ssl-ca=FILE: the CA certificates (PEM) that signed the server's certificate",
                             kName);
  }
  if (!verifies && !c.ssl_ca.empty()) {
    throw ConfigurationError("mysql:// ssl-ca is used by ssl-mode=verify-ca and verify-identity only; ssl-mode=" +
                                 c.ssl_mode + " checks no certificate",
                             kName);
  }
  if (verifies && std::ifstream(c.ssl_ca).peek() == std::ifstream::traits_type::eof()) {
    throw ConfigurationError("mysql:// ssl-ca=" + c.ssl_ca + " cannot be read, or is empty", kName);
  }
}

}  // namespace

std::string mysql_schema(const std::string& mode, const std::string& table) {
  if (mode == "lease" || mode == "session") return mysql::lock_table_schema(table);
  if (mode != "row") throw ConfigurationError("mysql:// mode must be lease, row or session; got '" + mode + "'", kName);
  if (!mysql::valid_identifier(table)) {
    throw ConfigurationError("mysql:// table '" + table + "' must be 1 to 64 letters, digits or underscores", kName);
  }
  const mysql::RowColumns c;
  return "-- Row mode: the lock columns dlock needs in your table (other names: the URL's\n"
         "-- owner_column, expires_column, version_column, holds_column options).\n"
         "ALTER TABLE `" + table + "`\n"
         "  ADD COLUMN `" + c.owner + "` VARBINARY(128) NOT NULL DEFAULT '',       -- '' when free\n"
         "  ADD COLUMN `" + c.expires + "` DATETIME(6) NULL,                -- UTC, the server's clock\n"
         "  ADD COLUMN `" + c.version + "` BIGINT UNSIGNED NOT NULL DEFAULT 0,        -- fencing token; leave it to dlock\n"
         "  ADD COLUMN `" + c.holds + "` INT UNSIGNED NOT NULL DEFAULT 0;          -- hold count\n";
}

std::shared_ptr<backend::Backend> make_mysql_backend(const core::Url& url) {
  mysql::Settings settings;
  core::UrlOptions options(url);
  settings.mode = options.take_string("mode").value_or(settings.mode);
  settings.table = options.take_string("table").value_or(settings.mode == "row" ? "" : "dlock_locks");
  settings.create_table = options.take_bool("create_table").value_or(true);
  auto& columns = settings.columns;
  for (auto [option, column] : {std::pair{"id_column", &columns.id}, {"owner_column", &columns.owner},
                                {"expires_column", &columns.expires}, {"version_column", &columns.version},
                                {"holds_column", &columns.holds}}) {
    *column = options.take_string(option).value_or(*column);
    if (!mysql::valid_identifier(*column)) {
      throw ConfigurationError(std::string("mysql:// ") + option + " '" + *column +
                                   "' must be 1 to 64 letters, digits or underscores",
                               kName);
    }
  }
  const std::string id_collation = options.take_string("id_collation").value_or("exact");
  if (id_collation != "exact" && id_collation != "any") {
    throw ConfigurationError("mysql:// id_collation must be exact or any; got '" + id_collation + "'", kName);
  }
  settings.accept_folding_ids = id_collation == "any";
  settings.lock_delay = options.take_bool("lock_delay").value_or(false);
  auto& c = settings.connect;
  c.connect_timeout = options.take_duration("connect_timeout").value_or(c.connect_timeout);
  c.read_timeout = options.take_duration("read_timeout").value_or(c.read_timeout);
  c.write_timeout = options.take_duration("write_timeout").value_or(c.write_timeout);
  c.ssl_ca = options.take_string("ssl-ca").value_or("");
  // As in MySQL's client, a CA without a mode asks for verify-ca.
  c.ssl_mode = options.take_string("ssl-mode").value_or(c.ssl_ca.empty() ? c.ssl_mode : "verify-ca");
  options.finish();
  c.redacted_url = url.redacted();
  if (settings.mode == "row") {
    if (settings.table.empty()) {
      throw ConfigurationError("mysql:// mode=row locks rows of your own table: name it with table=YOUR_TABLE", kName);
    }
    if (!mysql::valid_identifier(settings.table)) {
      throw ConfigurationError("mysql:// table '" + settings.table + "' must be 1 to 64 letters, digits or underscores",
                               kName);
    }
    settings.connect.found_rows = true;
  } else if (settings.mode == "lease" || settings.mode == "session") {
    mysql::lock_table_schema(settings.table);  // validates the name
  } else {
    throw ConfigurationError("mysql:// mode must be lease, row or session; got '" + settings.mode + "'", kName);
  }
  if (settings.lock_delay && settings.mode != "session") {
    throw ConfigurationError("mysql:// lock_delay=true applies to mode=session only: in " + settings.mode +
                                 " mode a holder that dies keeps its key until its lease ends anyway",
                             kName);
  }
  check_tls(c);
  if (c.read_timeout < std::chrono::seconds(2)) {
    throw ConfigurationError("mysql:// read_timeout must be at least 2s (waiters block on the server that long)", kName);
  }
  if (url.host.empty() || url.path.size() < 2 || url.path.find('/', 1) != std::string::npos) {
    throw ConfigurationError("mysql:// needs a host and a database: mysql://user:password@host:3306/database; got " +
                                 url.redacted(),
                             kName);
  }
  if (url.user.empty()) {
    throw ConfigurationError("mysql:// needs a user: mysql://user:password@host:3306/database; got " + url.redacted(), kName);
  }
  c.host = url.host;
  c.port = url.port.value_or(3306);
  c.user = url.user;
  c.password = url.password;
  c.database = url.path.substr(1);
  if (settings.mode == "row") return mysql::make_row_backend(std::move(settings));
  if (settings.mode == "session") return mysql::make_session_backend(std::move(settings));
  return mysql::make_lease_backend(std::move(settings));
}

}  // namespace dlock::backends
