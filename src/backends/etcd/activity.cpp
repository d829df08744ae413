#include "backends/etcd/activity.hpp"

#include "backends/activity_text.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {

void ActivityKey::add(const Activity& delta) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    pb::RangeRequest read;
    read.set_key(key_);
    const auto range = connection_->range(read, "read the activity totals", {});
    Activity total = range.kvs_size() == 0 ? Activity{} : parse_activity(range.kvs(0).value());
    total += delta;
    pb::TxnRequest txn;
    auto* unchanged = txn.add_compare();
    unchanged->set_key(key_);
    unchanged->set_target(pb::Compare::MOD);
    unchanged->set_result(pb::Compare::EQUAL);
    unchanged->set_mod_revision(range.kvs_size() == 0 ? 0 : range.kvs(0).mod_revision());
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(key_);
    put->set_value(activity_text(total));
    if (connection_->txn(txn, "add to the activity totals", {}).succeeded()) return;
  }
  throw BackendError("the activity totals kept changing while this client added to them", kName, {}, true);
}

Activity ActivityKey::totals() {
  pb::RangeRequest read;
  read.set_key(key_);
  const auto range = connection_->range(read, "read the activity totals", {});
  return range.kvs_size() == 0 ? Activity{} : parse_activity(range.kvs(0).value());
}

}  // namespace dlock::backends::etcd
