#include "backends/registry.hpp"

#include "backends/local/local_backend.hpp"
#include "dlock/errors.hpp"
#if DLOCK_WITH_SQLITE
#include "backends/sqlite/sqlite_backend.hpp"
#endif
#if DLOCK_WITH_MYSQL
#include "backends/mysql/mysql_backend.hpp"
#endif
#if DLOCK_WITH_REDIS
#include "backends/redis/redis_backend.hpp"
#include "backends/redlock/redlock_backend.hpp"
#endif
#if DLOCK_WITH_ZOOKEEPER
#include "backends/zookeeper/zookeeper_backend.hpp"
#endif
#if DLOCK_WITH_POSTGRES
#include "backends/postgres/postgres_backend.hpp"
#endif
#if DLOCK_WITH_ETCD
#include "backends/etcd/etcd_backend.hpp"
#endif

namespace dlock::backends {

std::shared_ptr<backend::Backend> open_backend(const core::Url& url) {
  if (url.scheme == "local") return make_local_backend(url);
#if DLOCK_WITH_SQLITE
  if (url.scheme == "sqlite") return make_sqlite_backend(url);
#endif
#if DLOCK_WITH_MYSQL
  if (url.scheme == "mysql" || url.scheme == "mariadb") return make_mysql_backend(url);
#endif
#if DLOCK_WITH_REDIS
  // rediss:// too, to be refused with the reason (no TLS in hiredis 0.14).
  if (url.scheme == "redis" || url.scheme == "rediss") return make_redis_backend(url);
  if (url.scheme == "redlock") return make_redlock_backend(url);
#endif
#if DLOCK_WITH_ZOOKEEPER
  if (url.scheme == "zookeeper") return make_zookeeper_backend(url);
#endif
#if DLOCK_WITH_POSTGRES
  if (url.scheme == "postgres" || url.scheme == "postgresql") return make_postgres_backend(url);
#endif
#if DLOCK_WITH_ETCD
  if (url.scheme == "etcd") return make_etcd_backend(url);
#endif
  std::string built_in = "local://";
#if DLOCK_WITH_SQLITE
  built_in += ", sqlite://PATH";
#endif
#if DLOCK_WITH_MYSQL
  built_in += ", mysql://USER:PASSWORD@HOST:PORT/DATABASE";
#endif
#if DLOCK_WITH_REDIS
  built_in += ", redis://[USER:PASSWORD@]HOST:PORT/DB, redlock://HOST1:PORT,HOST2:PORT,HOST3:PORT";
#endif
#if DLOCK_WITH_ZOOKEEPER
  built_in += ", zookeeper://HOST:PORT[,HOST:PORT...]/PATH";
#endif
#if DLOCK_WITH_POSTGRES
  built_in += ", postgres://USER:PASSWORD@HOST:PORT/DATABASE";
#endif
#if DLOCK_WITH_ETCD
  built_in += ", etcd://HOST:PORT[,HOST:PORT...]/PREFIX";
#endif
  throw ConfigurationError("unknown backend '" + url.scheme + "://' in URL " + url.redacted() +
                           " (this build supports: " + built_in + ")");
}

}  // namespace dlock::backends
