#include "backends/zookeeper/activity.hpp"

#include "backends/activity_text.hpp"
#include "backends/zookeeper/errors.hpp"
#include "backends/zookeeper/nodes.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {

void ActivityNode::add(const Activity& delta) {
  auto s = session_();
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto reply = s->get(path_);
    if (reply.rc() == ZNONODE) {
      make_root(*s, root_, {});
      const int rc = s->create(path_, activity_text(Activity{}), 0).rc();
      if (rc != ZOK && rc != ZNODEEXISTS) check(rc, "create the activity totals", {}, Write::yes);
      continue;
    }
    check(reply.rc(), "read the activity totals", {});
    Activity total = parse_activity(reply.value().data);
    total += delta;
    const int rc = s->set(path_, activity_text(total), reply.value().stat.version).rc();
    if (rc == ZOK) return;
    if (rc != ZBADVERSION && rc != ZNONODE) check(rc, "add to the activity totals", {}, Write::yes);
  }
  throw BackendError("the activity totals kept changing while this client added to them", kName, {}, true);
}

Activity ActivityNode::totals() {
  auto reply = session_()->get(path_);
  if (reply.rc() == ZNONODE) return {};
  check(reply.rc(), "read the activity totals", {});
  return parse_activity(reply.value().data);
}

}  // namespace dlock::backends::zookeeper
