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

// The key's directory has no node. Over a range, etcd compares every key in it, and a range with
// none as one key not there.
void compare_empty(pb::TxnRequest& txn, const std::string& dir) {
  auto* empty = txn.add_compare();
  empty->set_key(dir);
  empty->set_range_end(prefix_end(dir));
  empty->set_target(pb::Compare::CREATE);
  empty->set_result(pb::Compare::EQUAL);
  empty->set_create_revision(0);
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

void compare_value(pb::TxnRequest& txn, const std::string& node, const std::string& value) {
  auto* same = txn.add_compare();
  same->set_key(node);
  same->set_target(pb::Compare::VALUE);
  same->set_result(pb::Compare::EQUAL);
  same->set_value(value);
}

void put(pb::TxnRequest& txn, const std::string& node, const std::string& value, std::int64_t lease) {
  auto* request = txn.add_success()->mutable_request_put();
  request->set_key(node);
  request->set_value(value);
  if (lease != 0) {
    request->set_lease(lease);
  } else {
    request->set_ignore_lease(true);
  }
}

void remove(pb::TxnRequest& txn, const std::string& node) {
  txn.add_success()->mutable_request_delete_range()->set_key(node);
}

// Sends `txn`; when no answer comes, leaves `make_repair()` in `repairs`.
template <class MakeRepair>
pb::TxnResponse write(Connection& c, Repairs* repairs, const pb::TxnRequest& txn, const std::string& what,
                      std::string_view key, MakeRepair&& make_repair) {
  try {
    return c.txn(txn, what, key);
  } catch (const LeaseGone&) {
    throw;  // refused whole: nothing was written
  } catch (const Error&) {
    if (repairs) repairs->add(make_repair(), key);
    throw;
  }
}

// Sends `txn`, guarded by compares, and again later when no answer comes.
pb::TxnResponse write_or_redo(Connection& c, Repairs* repairs, const pb::TxnRequest& txn,
                              const std::string& what, std::string_view key) {
  return write(c, repairs, txn, what, key, [&] { return txn; });
}

// The repair of a fresh node's put: it goes if it still holds what was put (a node whose
// answer never came is nobody's hold).
pb::TxnRequest remove_if_holding(const std::string& node, const std::string& value) {
  pb::TxnRequest repair;
  compare_value(repair, node, value);
  remove(repair, node);
  return repair;
}

// `request` answered by the member this client talks to (serializable), or linearizably when
// that member has not applied `revision` yet: a snapshot at or after `revision` either way.
pb::RangeResponse range_since(Connection& c, pb::RangeRequest request, std::int64_t revision,
                              std::string_view key) {
  request.set_serializable(true);
  auto range = c.range(request, "read the queue", key);
  if (range.header().revision() >= revision) return range;
  request.set_serializable(false);
  return c.range(request, "read the queue", key);
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

Queue read_queue_ahead(Connection& c, const std::string& root, std::string_view key, std::int64_t created) {
  const auto range = range_since(c, queue_request(key_dir(root, key), 0, created), created, key);
  return queue_of(range, range.header().revision());
}

Take take_if_free(Connection& c, Repairs* repairs, const std::string& root, std::string_view key,
                  const std::string& node, const NodeValue& value, std::int64_t lease) {
  const std::string dir = key_dir(root, key);
  pb::TxnRequest txn;
  compare_empty(txn, dir);
  const std::string put_value = to_value(value);
  put(txn, node, put_value, lease);
  *txn.add_failure()->mutable_request_range() = queue_request(dir, 0, 0);
  const auto response =
      write(c, repairs, txn, "acquire", key, [&] { return remove_if_holding(node, put_value); });
  if (response.succeeded()) return {response.header().revision(), {}};
  return {std::nullopt, queue_of(response.responses(0).response_range(), response.header().revision())};
}

TakeSet take_set_if_free(Connection& c, Repairs* repairs, const std::string& root,
                         const std::vector<std::string>& keys, const std::vector<std::string>& nodes,
                         const NodeValue& value, std::int64_t lease) {
  pb::TxnRequest txn;
  pb::TxnRequest repair;
  const std::string put_value = to_value(value);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string dir = key_dir(root, keys[i]);
    compare_empty(txn, dir);
    put(txn, nodes[i], put_value, lease);
    *txn.add_failure()->mutable_request_range() = queue_request(dir, 0, 0);
    // Put together, the nodes are all there or none is.
    compare_value(repair, nodes[i], put_value);
    remove(repair, nodes[i]);
  }
  const auto response = write(c, repairs, txn, "acquire", keys.front(), [&] { return repair; });
  TakeSet take;
  if (response.succeeded()) {
    take.taken = response.header().revision();
    return take;
  }
  for (const auto& answer : response.responses()) {
    take.queues.push_back(queue_of(answer.response_range(), response.header().revision()));
  }
  return take;
}

Queue join_queue(Connection& c, Repairs* repairs, const std::string& root, std::string_view key,
                 const std::string& node, const NodeValue& value, std::int64_t lease) {
  pb::TxnRequest txn;
  compare_created(txn, node, 0);
  const std::string put_value = to_value(value);
  put(txn, node, put_value, lease);
  *txn.add_success()->mutable_request_range() = queue_request(key_dir(root, key), 0, 0);
  const auto response =
      write(c, repairs, txn, "join the queue", key, [&] { return remove_if_holding(node, put_value); });
  if (!response.succeeded()) {
    throw BackendError("etcd already had the fresh queue node " + node, kName, std::string(key));
  }
  return queue_of(response.responses(1).response_range(), response.header().revision());
}

std::optional<std::int64_t> rewrite(Connection& c, Repairs* repairs, Unanswered unanswered,
                                    const pb::KeyValue& node, const NodeValue& value, std::string_view key,
                                    const std::string& drop) {
  pb::TxnRequest txn;
  compare_unchanged(txn, node);
  const std::string written = to_value(value);
  put(txn, node.key(), written, 0);
  if (!drop.empty()) remove(txn, drop);
  const auto response = write(c, repairs, txn, "update a holder", key, [&] {
    if (unanswered == Unanswered::redo) return txn;
    pb::TxnRequest undo;
    compare_created(undo, node.key(), node.create_revision());
    compare_value(undo, node.key(), written);
    put(undo, node.key(), node.value(), 0);
    return undo;
  });
  if (!response.succeeded()) return std::nullopt;
  return response.header().revision();
}

bool remove_node(Connection& c, Repairs* repairs, const std::string& node, std::int64_t created,
                 std::string_view key) {
  pb::TxnRequest txn;
  compare_created(txn, node, created);
  remove(txn, node);
  return write_or_redo(c, repairs, txn, "remove a node", key).succeeded();
}

bool remove_unchanged(Connection& c, Repairs* repairs, const pb::KeyValue& node, std::string_view key) {
  pb::TxnRequest txn;
  compare_unchanged(txn, node);
  remove(txn, node.key());
  return write_or_redo(c, repairs, txn, "release", key).succeeded();
}

bool mark_evicted(Connection& c, const pb::KeyValue& node, const NodeValue& value, std::string_view key) {
  pb::TxnRequest txn;
  compare_created(txn, node.key(), node.create_revision());
  put(txn, node.key(), to_value(value), 0);
  return c.txn(txn, "force-release", key).succeeded();
}

std::optional<pb::KeyValue> read_created(Connection& c, const std::string& root, std::string_view key,
                                         std::int64_t created, std::int64_t* revision) {
  auto request = queue_request(key_dir(root, key), 1, created);
  request.set_sort_order(pb::RangeRequest::DESCEND);
  const auto range = c.range(request, "read a holder", key);
  if (revision) *revision = range.header().revision();
  if (range.kvs_size() == 0 || range.kvs(0).create_revision() != created) return std::nullopt;
  return range.kvs(0);
}

std::optional<std::int64_t> first_in_line(Connection& c, const std::string& root, std::string_view key,
                                          std::int64_t created) {
  // Not count_only: etcd counts a range before it filters by revision.
  auto request = queue_request(key_dir(root, key), 1, created - 1);
  request.set_keys_only(true);
  const auto range = range_since(c, request, created, key);
  if (range.kvs_size() != 0) return std::nullopt;
  return range.header().revision();
}

bool node_there(Connection& c, const std::string& node, std::string_view key, std::int64_t revision) {
  pb::RangeRequest request;
  request.set_key(node);
  request.set_count_only(true);
  return range_since(c, request, revision, key).count() > 0;
}

bool remove_all_unchanged(Connection& c, Repairs* repairs, const std::vector<pb::KeyValue>& nodes,
                          std::string_view key) {
  pb::TxnRequest txn;
  for (const auto& node : nodes) {
    compare_unchanged(txn, node);
    remove(txn, node.key());
  }
  return write_or_redo(c, repairs, txn, "release", key).succeeded();
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
