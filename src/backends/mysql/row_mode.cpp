// mysql:// row mode: the lock lives in columns of the user's own table (seed 000 §2.1). The
// key is a row's id; acquiring it is one UPDATE that takes the row when it is free or
// expired and bumps its version, which is the fencing token; renew and release only touch
// the row while its version still equals that token. Nothing is created.
//
// A holder evicted with a lock delay keeps owner, version and expiry, with no holds: a state no
// other leaves (a release or an immediate eviction clears the owner). Nobody takes such a row,
// the owner included, until it expires or the holder's release frees it.

#include <mysqld_error.h>

#include <algorithm>
#include <cctype>

#include "backends/mysql/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

struct ColumnInfo {
  std::string data_type;
  std::uint64_t max_chars = 0;
  unsigned fraction_digits = 0;
  std::string collation;    // empty for binary strings and numbers
  std::string charset;      // likewise
  std::string column_type;  // as in DDL: varchar(64)
};

bool is_integer_type(const std::string& type) {
  static const char* const kTypes[] = {"tinyint", "smallint", "mediumint", "int", "bigint"};
  return std::find(std::begin(kTypes), std::end(kTypes), type) != std::end(kTypes);
}

// Integer ids compare as numbers: '01' and '-0' would name rows 1 and 0. Keys are the
// decimal integers as the column gives them back.
bool canonical_integer(std::string_view key) {
  const std::string_view digits = key.substr(!key.empty() && key[0] == '-' ? 1 : 0);
  return !digits.empty() && digits.size() <= 19 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
         (digits[0] != '0' || key == "0");
}

bool is_text_type(const std::string& type) {
  static const char* const kTypes[] = {"char", "varchar", "binary", "varbinary", "tinytext", "text",
                                       "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob"};
  return std::find(std::begin(kTypes), std::end(kTypes), type) != std::end(kTypes);
}

// The statements for one table and its columns. Expiry is judged by UTC_TIMESTAMP(6); the
// sessions run in time zone +00:00, so DATETIME and TIMESTAMP columns both hold UTC.
struct RowSql {
  // `round_up_us`: what expiries are padded by so the column's precision cannot shorten a
  // lease; reports of the time left take it off again.
  RowSql(const std::string& table, const RowColumns& c, std::int64_t round_up_us) {
    const auto q = [](const std::string& name) { return "`" + name + "`"; };
    const std::string t = q(table), id = q(c.id), o = q(c.owner), e = q(c.expires), v = q(c.version), h = q(c.holds);
    // Owners compare as bytes: under the owner column's collation 'Worker' may equal 'worker'.
    const std::string owner_is = "CAST(" + o + " AS BINARY) = ?";
    const std::string now = "UTC_TIMESTAMP(6)";
    // An owner with a live expiry holds the row, or was evicted from it (no holds).
    const std::string free = "(COALESCE(" + o + ", '') = '' OR " + e + " IS NULL OR " + e + " <= " + now + ")";
    // Only an attempt outside a waiting call re-enters (the flag; see acquire()).
    const std::string mine = "(? AND " + owner_is + " AND " + h + " > 0 AND " + e + " > " + now + ")";
    live = "COALESCE(" + o + ", '') <> '' AND " + e + " > " + now;
    const std::string left = "TIMESTAMPDIFF(MICROSECOND, " + now + ", " + e + ") - " + std::to_string(round_up_us);
    // Columns are assigned left to right and later ones see the new values: the version and
    // the hold count are decided on the old owner, then the owner and the expiry are written
    // (after the hold count, more than one hold means a re-entry, whose lease never shortens).
    // A take rings no one but tries the key's doorbell (GET_LOCK) so its release can ring it.
    // Parameters: reenter, owner, bell, bell, reenter, owner, owner, ttl, ttl, key, reenter, owner.
    acquire = "UPDATE " + t + " SET " + v + " = IF(" + mine + ", " + v + " + 0 * LAST_INSERT_ID(0), LAST_INSERT_ID(COALESCE(" +
              v + ", 0) + 1 + 0 * IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, 0), 0)))), " + h +
              " = IF(" + mine + ", " + h + " + 1, 1), " + o + " = ?, " + e + " = IF(" + h + " > 1, GREATEST(" + e + ", " +
              now + " + INTERVAL ? MICROSECOND), " + now + " + INTERVAL ? MICROSECOND) WHERE " + id + " = ? AND (" + free +
              " OR " + mine + ")";
    // The holder, and any doorbell taken for nothing (not one this session keeps for a lock of
    // the key it holds, or was evicted from). Parameters: kept, bell, bell, key.
    // The user's table records no acquisition time: NULL where the others give it.
    conflict = "SELECT " + o + ", " + v + ", " + h + ", " + left +
               ", NULL, IF(? = 0 AND IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0) FROM " + t + " WHERE " +
               id + " = ?";
    reentered = "SELECT " + v + ", " + h + " FROM " + t + " WHERE " + id + " = ? AND " + owner_is;
    // This acquisition's row, evicted or not.
    const std::string acquisition = " WHERE " + id + " = ? AND " + owner_is + " AND " + v + " = ? AND " + e + " > " + now;
    // Parameters: ttl, key, owner, token.
    renew = "UPDATE " + t + " SET " + e + " = " + now + " + INTERVAL ? MICROSECOND" + acquisition + " AND " + h + " > 0";
    // The holds left come back as the insert id (kEvictedRelease for an evicted holder, whose
    // release counts as its last hold's); the last hold rings the doorbell when this session
    // holds it. Parameters: bell, bell, key, owner, token.
    const std::string holds = "COALESCE(" + h + ", 0)";
    release = "UPDATE " + t + " SET " + o + " = IF(" + holds + " <= 1, '', " + o + "), " + e + " = IF(" + holds + " <= 1, " +
              now + ", " + e + "), " + h + " = IF(" + holds + " = 0, 0 * LAST_INSERT_ID(" + std::to_string(kEvictedRelease) +
              "), LAST_INSERT_ID(" + h + " - 1)) + 0 * IF(" + holds +
              " <= 1 AND IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)" + acquisition;
    const std::string info = o + ", " + v + ", " + h + ", " + left + ", NULL";
    inspect = "SELECT " + info + " FROM " + t + " WHERE " + id + " = ? AND " + live;
    // Byte order of the id's text, whatever the column's type and collation.
    const std::string bytes = "CAST(" + id + " AS BINARY)";
    list_bounded = "SELECT " + bytes + ", " + info + " FROM " + t + " WHERE " + bytes + " >= ? AND " + bytes + " < ? AND " +
                   bytes + " <> ? AND " + live + " ORDER BY " + bytes + " LIMIT ?";
    list_open = "SELECT " + bytes + ", " + info + " FROM " + t + " WHERE " + bytes + " >= ? AND " + bytes + " <> ? AND " +
                live + " ORDER BY " + bytes + " LIMIT ?";
    // Parameters of both: key, owner, token. A lock delay keeps all but the holds; these
    // connections count matched rows, so evicting an evicted holder again succeeds.
    force_release = "UPDATE " + t + " SET " + o + " = '', " + h + " = 0, " + e + " = " + now + " WHERE " + id + " = ? AND " +
                    owner_is + " AND " + v + " = ? AND " + live;
    evict = "UPDATE " + t + " SET " + h + " = 0 WHERE " + id + " = ? AND " + owner_is + " AND " + v + " = ? AND " + live;
  }

  std::string live, acquire, conflict, reentered, renew, release, inspect, list_bounded, list_open, force_release, evict;
};

class RowBackend final : public ModeBackend {
 public:
  explicit RowBackend(Settings settings)
      : ModeBackend(std::move(settings)),
        facts_(inspect_table()),
        sql_(settings_.table, settings_.columns, facts_.expiry_round_up_us) {}

  std::size_t max_key_bytes() const noexcept override { return facts_.max_key_bytes; }
  // The user's table has no column for when a lock was taken, and row mode creates no table
  // for activity totals.
  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true, .holds_outlive_the_client = true};
  }

  backend::AcquireResult attempt(const backend::AcquireRequest& request, DoorbellChannel* through) override {
    check_key(request.key);
    if (request.owner.size() > facts_.owner_max) {
      throw InvalidArgument("owner '" + std::string(request.owner) + "' is " + std::to_string(request.owner.size()) +
                            " bytes, but column `" + settings_.columns.owner + "` of table '" + settings_.table +
                            "' holds " + std::to_string(facts_.owner_max) + "; widen the column or use a shorter owner");
    }
    Attempt attempt = attempt_for(request, through, false);
    DoorbellChannel* channel = attempt.channel;
    if (!channel) return attempt_on(*attempt.connection, request, nullptr);
    try {
      return attempt_on(channel->connection(), request, channel);
    } catch (const Error&) {
      if (!channel->connection().broken()) throw;
    }
    // The server ended the waiter's session (KILL, restart) before the answer came. The attempt
    // is made again on a new session, which never re-enters: a row this owner holds then may
    // be the lost attempt's, or another call's of the same owner, which the row cannot tell.
    channel->reconnect();
    auto result = attempt_on(channel->connection(), request, channel);
    const auto* busy = std::get_if<backend::Busy>(&result);
    if (busy && std::any_of(busy->holders.begin(), busy->holders.end(),
                            [&](const LockInfo& holder) { return holder.owner == request.owner; })) {
      throw OutcomeUnknownError("the connection to " + settings_.connect.redacted_url +
                                    " broke before the answer came, and the row is now this owner's: the lost attempt"
                                    " may have taken it (inspect gives the token to release it with; it frees when"
                                    " its lease ends)",
                                std::string(request.key), kName);
    }
    return result;
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    auto connection = take();
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew, {expiry_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    return outcome.affected == 1;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take_for(lease.key, lease.owner, lease.token);
    const bool on_holder = remembered(lease.key, lease.owner, lease.token) == connection->serial();
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.release,
                                 {bell, bell, lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    const bool evicted = outcome.affected == 1 && outcome.insert_id == kEvictedRelease;
    if (outcome.affected == 1 && outcome.insert_id > 0 && !evicted) return static_cast<std::uint32_t>(outcome.insert_id);
    forget(lease.key, lease.owner, lease.token);
    if (evicted) return std::nullopt;  // freed, and rang, as its last release
    if (outcome.affected == 1) return 0u;
    // Lost: drop the doorbell its session still holds for it (any other connection's is a
    // newer acquisition's).
    if (on_holder) with_retries(lease.key, [&] {
      return connection->query("SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)", {bell, bell});
    });
    return std::nullopt;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    if (!key_fits(key)) return {};
    return inspect_on(*take(), key, sql_.inspect);
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return list_page(prefix, after, limit, sql_.list_bounded, sql_.list_open);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    if (!key_fits(key)) return {};
    return evict(key, token, sql_.inspect, eviction == Eviction::delayed ? sql_.evict : sql_.force_release);
  }

 private:
  // One attempt on `connection`: through a waiting call's `channel`, which never re-enters (its
  // owner held nothing when it began to wait), or not.
  backend::AcquireResult attempt_on(Connection& connection, const backend::AcquireRequest& request,
                                    DoorbellChannel* channel) {
    const std::string bell = bell_name(request.key);
    const std::int64_t reenter = channel ? 0 : 1;
    const std::int64_t ttl = expiry_us(request.ttl);
    const auto outcome = with_retries(request.key, [&] {
      return connection.execute(sql_.acquire, {reenter, request.owner, bell, bell, reenter, request.owner, request.owner,
                                               ttl, ttl, request.key, reenter, request.owner});
    });
    if (outcome.affected == 1 && outcome.insert_id != 0) {  // taken: the new version is the token
      remember(request.key, request.owner, connection.serial(), outcome.insert_id);
      if (channel) channel->bell_settled();
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected == 1) {  // a re-entry
      const auto rows = with_retries(request.key, [&] {
        return connection.query(sql_.reentered, {request.key, request.owner});
      });
      if (rows.empty()) throw BackendError("a re-entry of '" + std::string(request.key) + "' left no row", kName);
      return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
    }
    const std::int64_t kept = keeps_doorbell(request.key, connection) ? 1 : 0;
    const auto rows =
        with_retries(request.key, [&] { return connection.query(sql_.conflict, {kept, bell, bell, request.key}); });
    if (channel) channel->bell_settled();
    if (rows.empty()) {
      throw InvalidArgument("row mode locks rows that exist: table '" + settings_.table + "' has no row with `" +
                            settings_.columns.id + "` = '" + std::string(request.key) + "'; insert it first");
    }
    LockInfo holder = info(std::string(request.key), rows[0], 0);
    // Freed between the two statements: try again at once.
    if (holder.owner.empty() || holder.ttl_left.count() == 0) {
      return backend::Busy{{}, std::chrono::milliseconds(1)};
    }
    const auto left = holder.ttl_left;
    return backend::Busy{{std::move(holder)}, left};
  }

  // Why `key` is not a row's id of its own, for keys the id column would take for another's
  // (an integer id: 'abc' is 0, '01' is 1; a collation padding with spaces: 'a ' is 'a').
  std::optional<std::string> misfit(std::string_view key) const {
    const std::string column = "column `" + settings_.columns.id + "` of table '" + settings_.table + "'";
    if (facts_.integer_id && !canonical_integer(key)) {
      return column + " is an integer, so keys must be decimal integers as it writes them (no leading zeros, no -0); got '" +
             std::string(key) + "'";
    }
    if (!facts_.padding_collation.empty() && !key.empty() && key.back() == ' ') {
      return "key '" + std::string(key) + "' ends in a space, which " + column + " ignores (collation " +
             facts_.padding_collation + " pads with spaces), so it would be the lock of the key without it;" +
             " drop the trailing spaces, or give the column a binary collation that does not pad (MariaDB: *_nopad_bin;" +
             " MySQL 8: utf8mb4_0900_bin)";
    }
    return std::nullopt;
  }
  bool key_fits(std::string_view key) const { return !misfit(key); }
  void check_key(std::string_view key) const {
    if (const auto why = misfit(key)) throw InvalidArgument(*why);
  }
  // The TTL, rounded up to what the expiry column keeps: a DATETIME(0) column must not make
  // a lease end up to a second early.
  std::int64_t expiry_us(std::chrono::milliseconds ttl) const { return ttl_us(ttl) + facts_.expiry_round_up_us; }

  // What the table's columns allow.
  struct TableFacts {
    bool integer_id = false;
    std::string padding_collation;  // the id's binary collation, when it ignores trailing spaces
    std::size_t max_key_bytes = kMaxKeyBytes;
    std::size_t owner_max = kMaxOwnerBytes;
    std::int64_t expiry_round_up_us = 0;
  };

  TableFacts inspect_table() {
    auto connection = take();
    std::vector<Row> rows;
    try {
      rows = connection->query(
          "SELECT LOWER(COLUMN_NAME), LOWER(DATA_TYPE), CHARACTER_MAXIMUM_LENGTH, DATETIME_PRECISION, COLLATION_NAME,"
          " CHARACTER_SET_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
          " AND TABLE_NAME = ?",
          {settings_.table});
    } catch (const SqlError& e) {
      raise(e, settings_);
    }
    const auto& c = settings_.columns;
    if (rows.empty()) {
      throw ConfigurationError("table '" + settings_.table + "' does not exist in database '" +
                                   settings_.connect.database + "' (or user '" + settings_.connect.user +
                                   "' may not see it); row mode locks rows of your own table, which needs the columns `" +
                                   c.id + "`, `" + c.owner + "`, `" + c.expires + "`, `" + c.version + "` and `" + c.holds +
                                   "`: see `dlock schema mysql --mode row`",
                               kName);
    }
    const auto column = [&](const std::string& name, const char* option, const char* ddl) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
      for (const Row& row : rows) {
        if (row[0] == lower) {
          return ColumnInfo{row[1].value_or(""), to_u64(row[2]), static_cast<unsigned>(to_u64(row[3])),
                            row[4].value_or(""), row[5].value_or(""), row[6].value_or("")};
        }
      }
      throw ConfigurationError("table '" + settings_.table + "' has no column `" + name + "`: add it (ALTER TABLE `" +
                                   settings_.table + "` ADD COLUMN `" + name + "` " + ddl + ") or name yours with " +
                                   option + "=",
                               kName);
    };
    const auto require = [&](bool ok, const std::string& name, const char* wanted) {
      if (!ok) {
        throw ConfigurationError("column `" + name + "` of table '" + settings_.table + "' must be " + wanted, kName);
      }
    };
    const ColumnInfo id = column(c.id, "id_column", "VARBINARY(255) PRIMARY KEY");
    const ColumnInfo owner = column(c.owner, "owner_column", "VARBINARY(128) NOT NULL DEFAULT ''");
    const ColumnInfo expires = column(c.expires, "expires_column", "DATETIME(6) NULL");
    const ColumnInfo version = column(c.version, "version_column", "BIGINT UNSIGNED NOT NULL DEFAULT 0");
    const ColumnInfo holds = column(c.holds, "holds_column", "INT UNSIGNED NOT NULL DEFAULT 0");
    require(is_text_type(id.data_type) || is_integer_type(id.data_type), c.id, "a text or an integer column");
    require(is_text_type(owner.data_type), c.owner, "a text column (VARCHAR or VARBINARY)");
    require(expires.data_type == "datetime" || expires.data_type == "timestamp", c.expires, "DATETIME or TIMESTAMP");
    require(is_integer_type(version.data_type), c.version, "an integer column");
    require(is_integer_type(holds.data_type), c.holds, "an integer column");
    TableFacts facts;
    facts.integer_id = is_integer_type(id.data_type);
    if (!id.collation.empty() && !settings_.accept_folding_ids) facts.padding_collation = check_id_collation(*connection, id);
    facts.max_key_bytes =
        facts.integer_id ? 20 : static_cast<std::size_t>(std::min<std::uint64_t>(id.max_chars, kMaxKeyBytes));
    facts.owner_max = static_cast<std::size_t>(std::min<std::uint64_t>(owner.max_chars, kMaxOwnerBytes));
    std::int64_t unit = 1;
    for (unsigned digit = std::min(expires.fraction_digits, 6u); digit < 6; ++digit) unit *= 10;
    facts.expiry_round_up_us = unit - 1;
    return facts;
  }

  // Keys are told apart by binary strings (no collation) and binary collations, which compare
  // code points. Any other collation holds some different keys equal (case, accents, trailing
  // spaces), so they would be one row and one lock: refused. Returns the collation if it is
  // binary but pads with spaces (trailing spaces ignored), empty if it compares exactly.
  std::string check_id_collation(Connection& connection, const ColumnInfo& id) {
    const std::string& c = settings_.columns.id;
    if (!id.collation.ends_with("_bin")) {
      throw ConfigurationError(
          "column `" + c + "` of table '" + settings_.table + "' compares keys by collation " + id.collation +
              ", under which different keys can be equal (in case, accents or trailing spaces): they would be one" +
              " row, so one lock. Make it compare exactly (ALTER TABLE `" + settings_.table + "` MODIFY `" + c + "` " +
              id.column_type + " CHARACTER SET " + id.charset + " COLLATE " + id.charset +
              "_nopad_bin NOT NULL, on MySQL 8 utf8mb4_0900_bin; or VARBINARY), or accept that with id_collation=any",
          kName);
    }
    // Both names come from the server; they are checked before going into the statement.
    if (!valid_identifier(id.charset) || !valid_identifier(id.collation)) return id.collation;
    const std::string probe = "SELECT CONVERT('a' USING " + id.charset + ") COLLATE " + id.collation +
                              " = CONVERT('a ' USING " + id.charset + ")";
    try {
      return connection.query(probe, {}).at(0).at(0) == "1" ? id.collation : "";
    } catch (const SqlError& e) {
      raise(e, settings_);
    }
  }

  TableFacts facts_;
  RowSql sql_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_row_backend(Settings settings) {
  return std::make_shared<RowBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
