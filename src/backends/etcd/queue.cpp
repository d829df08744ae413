#include "backends/etcd/queue.hpp"

#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

pb::RangeRequest queue_request(const std::string& dir, std::int64_t limit, std::int64_t max_create) {
  pb::RangeRequest request;
  request.set_key(dir);
  request.set_range_end(prefix_end(dir));
  request.set_sort_target(pb::RangeRequest::CREATE);
  request.set_sort_order(pb::RangeRequest::ASCEND);
  request.set_limit(limit);
  request.set_max_create_revision(max_create);
  return request;
}

void compare_created(pb::TxnRequest& txn, const std::string& node, std::int64_t created) {
  auto* same = txn.add_compare();
  same->set_key(node);
  same->set_target(pb::Compare::CREATE);
  same->set_result(pb::Compare::EQUAL);
  same->set_create_revision(created);
}

// The node is still as read: same create and mod revisions.
void compare_unchanged(pb::TxnRequest& txn, const pb::KeyValue& node) {
  compare_created(txn, node.key(), node.create_revision());
  auto* unchanged = txn.add_compare();
  unchanged->set_key(node.key());
  unchanged->set_target(pb::Compare::MOD);
  unchanged->set_result(pb::Compare::EQUAL);
  unchanged->set_mod_revision(node.mod_revision());
}

void put(pb::TxnRequest& txn, const std::string& node, const NodeValue& value, std::int64_t lease) {
  auto* request = txn.add_success()->mutable_request_put();
  request->set_key(node);
  request->set_value(to_value(value));
  if (lease != 0) {
    request->set_lease(lease);
  } else {
    request->set_ignore_lease(true);
  }
}

Queue queue_of(const pb::RangeResponse& range, std::int64_t revision) {
  Queue queue;
  queue.nodes.assign(range.kvs().begin(), range.kvs().end());
  queue.count = range.count();
  queue.revision = revision;
  return queue;
}

}  // namespace

Queue read_queue(Connection& c, const std::string& root, std::string_view key, std::int64_t limit,
                 std::int64_t max_create) {
  const auto range = c.range(queue_request(key_dir(root, key), limit, max_create), "read the queue", key);
  return queue_of(range, range.header().revision());
}

Take take_if_free(Connection& c, const std::string& root, std::string_view key, const std::string& node,
                  const NodeValue& value, std::int64_t lease) {
  const std::string dir = key_dir(root, key);
  pb::TxnRequest txn;
  // Over a range, etcd compares every key in it, and a range with none as one key not there.
  auto* empty = txn.add_compare();
  empty->set_key(dir);
  empty->set_range_end(prefix_end(dir));
  empty->set_target(pb::Compare::CREATE);
  empty->set_result(pb::Compare::EQUAL);
  empty->set_create_revision(0);
  put(txn, node, value, lease);
  *txn.add_failure()->mutable_request_range() = queue_request(dir, 1, 0);
  const auto response = c.txn(txn, "acquire", key);
  if (response.succeeded()) return {response.header().revision(), {}};
  return {std::nullopt, queue_of(response.responses(0).response_range(), response.header().revision())};
}

Queue join_queue(Connection& c, const std::string& root, std::string_view key, const std::string& node,
                 const NodeValue& value, std::int64_t lease) {
  pb::TxnRequest txn;
  compare_created(txn, node, 0);
  put(txn, node, value, lease);
  *txn.add_success()->mutable_request_range() = queue_request(key_dir(root, key), 0, 0);
  const auto response = c.txn(txn, "join the queue", key);
  if (!response.succeeded()) {
    throw BackendError("etcd already had the fresh queue node " + node, kName, std::string(key));
  }
  return queue_of(response.responses(1).response_range(), response.header().revision());
}

std::optional<std::int64_t> rewrite(Connection& c, const pb::KeyValue& node, const NodeValue& value,
                                    std::string_view key, const std::string& drop) {
  pb::TxnRequest txn;
  compare_unchanged(txn, node);
  put(txn, node.key(), value, 0);
  if (!drop.empty()) txn.add_success()->mutable_request_delete_range()->set_key(drop);
  const auto response = c.txn(txn, "update a holder", key);
  if (!response.succeeded()) return std::nullopt;
  return response.header().revision();
}

void remove_any(Connection& c, const std::string& node, std::string_view key) {
  pb::TxnRequest txn;
  txn.add_success()->mutable_request_delete_range()->set_key(node);
  c.txn(txn, "remove a node", key);
}

bool remove_node(Connection& c, const std::string& node, std::int64_t created, std::string_view key) {
  pb::TxnRequest txn;
  compare_created(txn, node, created);
  txn.add_success()->mutable_request_delete_range()->set_key(node);
  return c.txn(txn, "remove a node", key).succeeded();
}

bool remove_unchanged(Connection& c, const pb::KeyValue& node, std::string_view key) {
  pb::TxnRequest txn;
  compare_unchanged(txn, node);
  txn.add_success()->mutable_request_delete_range()->set_key(node.key());
  return c.txn(txn, "release", key).succeeded();
}

std::optional<pb::KeyValue> read_node(Connection& c, const std::string& node, std::string_view key,
                                      std::int64_t* revision) {
  pb::RangeRequest request;
  request.set_key(node);
  const auto range = c.range(request, "read a holder", key);
  if (revision) *revision = range.header().revision();
  if (range.kvs_size() == 0) return std::nullopt;
  return range.kvs(0);
}

}  // namespace dlock::backends::etcd
