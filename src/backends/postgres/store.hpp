#pragma once

// What every part of postgres:// talks to the server through: the client's connections, and
// the lock tables made on first use when they are missing.

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/postgres/common.hpp"
#include "backends/postgres/pool.hpp"

namespace dlock::backends::postgres {

class Store {
 public:
  explicit Store(Settings settings) : settings_(std::move(settings)), pool_(settings_.connect) {}

  const Settings& settings() const noexcept { return settings_; }
  // A waiter takes its connection from here too, and gives it back as it found it
  // (listen_bell.hpp): a waiting call rarely needs a new one.
  Pool& pool() noexcept { return pool_; }

  // Runs `f` on `on`, or on a pooled connection; makes the tables when `f` finds them missing,
  // and runs it again. Throws the dlock error for what failed (common.hpp's raise), about `key`.
  template <class F>
  std::invoke_result_t<F&, Connection&> with_connection(std::string_view key, F&& f, Connection* on = nullptr) {
    for (bool created = false;; created = true) {
      try {
        std::optional<Pool::Lease> pooled;
        Connection& connection = on ? *on : *pooled.emplace(pool_.take());
        try {
          return f(connection);
        } catch (const PgError& e) {
          if (created || (e.sqlstate != kUndefinedTable && e.sqlstate != kUndefinedFunction)) throw;
          create_tables(connection, e);
        }
      } catch (const PgError& e) {
        raise(e, settings_, key);
      }
    }
  }

  // A prepared statement's rows, on `on` or a pooled connection.
  std::vector<Row> query(std::string_view key, const std::string& sql, std::initializer_list<Param> params,
                         Connection* on = nullptr) {
    return with_connection(key, [&](Connection& c) { return c.query(sql, params); }, on);
  }

 private:
  void create_tables(Connection& connection, const PgError& missing);

  const Settings settings_;
  Pool pool_;
};

}  // namespace dlock::backends::postgres
