#include "backends/zookeeper/errors.hpp"

#include <zookeeper/zookeeper.h>

#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {

bool lost_connection(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

void check(int rc, const std::string& what, std::string_view key, Write write) {
  if (rc == ZOK) return;
  const std::string message = "ZooKeeper could not " + what + " (" + zerror(rc) + ")";
  if (write == Write::yes && lost_connection(rc)) {
    throw OutcomeUnknownError(message + ": the connection broke before the answer came", std::string(key), kName);
  }
  switch (rc) {
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZINVALIDSTATE:
    case ZCLOSING:
      throw ConnectionError(message, kName, std::string(key));
    case ZNOAUTH:
    case ZAUTHFAILED:
      throw ConfigurationError(message + ": the URL's user may not use these nodes; give it the digest credentials "
                                         "that made them (zookeeper://USER:PASSWORD@...)",
                               kName);
    default:
      throw BackendError(message, kName, std::string(key));
  }
}

}  // namespace dlock::backends::zookeeper
