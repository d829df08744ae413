// The DDL of the lock tables of lease and session modes (`dlock schema mysql`).

#include "backends/mysql/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {

std::string lock_table_schema(const std::string& table) {
  if (!valid_identifier(table, kMaxIdentifier - 9)) {
    throw ConfigurationError("mysql:// table '" + table + "' must be 1 to " + std::to_string(kMaxIdentifier - 9) +
                                 " letters, digits or underscores",
                             kName);
  }
  return "CREATE TABLE IF NOT EXISTS `" + table +
         "` (\n"
         "  name        VARBINARY(1024) NOT NULL,        -- the key, compared bytewise\n"
         "  owner       VARBINARY(128)  NOT NULL,        -- '' when free\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- fencing token of the last acquisition\n"
         "  hold_count  INT UNSIGNED    NOT NULL,\n"
         "  acquired_at DATETIME(6)     NOT NULL,        -- UTC_TIMESTAMP(6), the server's clock\n"
         "  expires_at  DATETIME(6)     NOT NULL,\n"
         "  renewals    BIGINT UNSIGNED NOT NULL DEFAULT 0,  -- every renew changes the row\n"
         "  doorbell    TINYINT         NOT NULL DEFAULT 0,  -- 1: the holder's session holds the key's GET_LOCK bell,\n"
         "                                                   -- 2: released by ringing it (a waiter is taking over)\n"
         "  session_id  BIGINT UNSIGNED NOT NULL DEFAULT 0,  -- the session that made the acquisition (session mode:\n"
         "                                                   -- the one holding the lock)\n"
         "  heir_owner  VARBINARY(128)  NOT NULL DEFAULT '', -- lease mode: the waiter the next release hands the key to,\n"
         "  heir_ttl_us BIGINT UNSIGNED NOT NULL DEFAULT 0,  --   the TTL it asked for,\n"
         "  heir_session BIGINT UNSIGNED NOT NULL DEFAULT 0, --   and its connection\n"
         "  readers_until DATETIME(6)   NOT NULL DEFAULT '1000-01-01', -- lease mode: readers who waited behind this\n"
         "                                                   -- token's holder go before any new writer until then\n"
         "  PRIMARY KEY (name)\n"
         ") ENGINE=InnoDB;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_seq` (\n"
         "  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,\n"
         "  v  BIGINT UNSIGNED  NOT NULL                 -- id 0: lease mode's token floor for keys whose row\n"
         "                                               -- was removed; id 1: session mode's epoch\n"
         ") ENGINE=InnoDB;\n"
         "INSERT IGNORE INTO `" +
         table + "_seq` VALUES (0, 0);\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_activity` (                             -- what clients did, for dlock serve's /metrics\n"
         "  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,   -- one row of totals\n"
         "  acquisitions BIGINT UNSIGNED NOT NULL,\n"
         "  conflicts    BIGINT UNSIGNED NOT NULL,\n"
         "  waits        BIGINT UNSIGNED NOT NULL,\n"
         "  wait_us      BIGINT UNSIGNED NOT NULL,\n"
         "  renewals     BIGINT UNSIGNED NOT NULL,\n"
         "  losses       BIGINT UNSIGNED NOT NULL\n"
         ") ENGINE=InnoDB;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_shared` (                               -- lease mode: the holders of a key held shared\n"
         "  name        VARBINARY(1024) NOT NULL,        -- (read locks, semaphore permits); the key's row\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- then names the owner ' shared'\n"
         "  owner       VARBINARY(128)  NOT NULL,\n"
         "  hold_count  INT UNSIGNED    NOT NULL,        -- 0: evicted with a lock delay\n"
         "  permits     INT UNSIGNED    NOT NULL,        -- a semaphore's; 0: no limit (readers)\n"
         "  acquired_at DATETIME(6)     NOT NULL,\n"
         "  expires_at  DATETIME(6)     NOT NULL,\n"
         "  PRIMARY KEY (name, token)\n"
         ") ENGINE=InnoDB;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_claim` (                                -- lease mode: waiting writers' claims, which refuse\n"
         "  name        VARBINARY(1024) NOT NULL PRIMARY KEY,  -- new shared holders of the key\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- the key's token when claimed, carried on by readers\n"
         "                                               -- let in past it: a writer's grant ends the claim\n"
         "  expires_at  DATETIME(6)     NOT NULL\n"
         ") ENGINE=InnoDB;\n"
         "-- Session mode: what a holder's GET_LOCK cannot hold, in memory (no durable write: it ends\n"
         "-- with the server, as the locks do). max_heap_table_size caps a memory table when it is\n"
         "-- made: this allows some 450,000 keys (about 1.2 KB each).\n"
         "SET SESSION max_heap_table_size = 1073741824;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_session` (\n"
         "  name        VARBINARY(1024) NOT NULL,        -- the key, compared bytewise\n"
         "  owner       VARBINARY(128)  NOT NULL,        -- '' when free\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- fencing token: the epoch * 2^40 + a count\n"
         "  hold_count  INT UNSIGNED    NOT NULL,\n"
         "  acquired_at DATETIME(6)     NOT NULL,        -- UTC_TIMESTAMP(6), the server's clock\n"
         "  expires_at  DATETIME(6)     NOT NULL,        -- the holder's lease (lock_delay)\n"
         "  renewals    BIGINT UNSIGNED NOT NULL DEFAULT 0,\n"
         "  session_id  BIGINT UNSIGNED NOT NULL DEFAULT 0,  -- the connection holding the lock\n"
         "  readers_until DATETIME(6)   NOT NULL DEFAULT '1000-01-01',  -- waiting readers' claim on this\n"
         "                                               -- token: no new writer until then\n"
         "  PRIMARY KEY (name) USING BTREE\n"
         ") ENGINE=MEMORY;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_holders` (                              -- the holders of a key held shared (read locks,\n"
         "  name        VARBINARY(1024) NOT NULL,        -- semaphore permits); the key's row then names\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- the owner ' shared'\n"
         "  owner       VARBINARY(128)  NOT NULL,\n"
         "  hold_count  INT UNSIGNED    NOT NULL,        -- 0: evicted with a lock delay\n"
         "  permits     INT UNSIGNED    NOT NULL,        -- a semaphore's; 0: no limit (readers)\n"
         "  acquired_at DATETIME(6)     NOT NULL,\n"
         "  expires_at  DATETIME(6)     NOT NULL,\n"
         "  session_id  BIGINT UNSIGNED NOT NULL,        -- the connection holding the holder's lock\n"
         "  PRIMARY KEY (name, token) USING BTREE\n"
         ") ENGINE=MEMORY;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_epoch` (                                -- empty after a restart: a new epoch begins\n"
         "  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,\n"
         "  v  BIGINT UNSIGNED  NOT NULL                 -- the token floor of this epoch\n"
         ") ENGINE=MEMORY;\n";
}

}  // namespace dlock::backends::mysql
