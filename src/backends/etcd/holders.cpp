#include "backends/etcd/holders.hpp"

#include <algorithm>
#include <string>

#include "backends/etcd/errors.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {

Line line_of(std::string_view key, std::vector<etcdserverpb::KeyValue> nodes, std::size_t count) {
  Line line;
  line.values.reserve(nodes.size());
  for (const auto& node : nodes) {
    auto value = from_value(node.value());
    if (!value) {
      throw BackendError(
          "a node of '" + std::string(key) + "' (" + node.key() +
              ") is not dlock's: remove it, or give dlock a prefix of its own (etcd://HOST:PORT/PREFIX)",
          kName, std::string(key));
    }
    line.values.push_back(std::move(*value));
  }
  line.nodes = std::move(nodes);
  line.count = std::max(count, line.nodes.size());
  return line;
}

bool holds(const Line& line, std::size_t i) {
  const NodeValue& node = line.values[i];
  if (node.mode == LockMode::exclusive) return i == 0;
  for (std::size_t j = 0; j < i; ++j) {
    if (line.values[j].mode == LockMode::exclusive) return false;
  }
  return line.values.front().permits == node.permits && (node.permits == 0 || i < node.permits);
}

std::vector<std::size_t> awaited(const Line& line, std::size_t i) {
  if (i == 0) return {};
  const NodeValue& node = line.values[i];
  if (node.mode == LockMode::exclusive) return {i - 1};
  for (std::size_t j = i; j-- > 0;) {
    if (line.values[j].mode == LockMode::exclusive) return {j};
  }
  std::vector<std::size_t> nodes;
  for (std::size_t j = i - std::min<std::size_t>(node.permits, i); j < i; ++j) nodes.push_back(j);
  return nodes;
}

std::optional<std::size_t> own_hold(const Line& line, std::size_t before,
                                    const backend::AcquireRequest& request) {
  for (std::size_t j = 0; j < before; ++j) {
    const NodeValue& node = line.values[j];
    if (node.owner == request.owner && !node.evicted && holds(line, j) &&
        (request.mode == LockMode::shared || node.mode == LockMode::exclusive)) {
      return j;
    }
  }
  return std::nullopt;
}

void check_permits(const Line& line, std::size_t i, const backend::AcquireRequest& request) {
  if (request.mode != LockMode::shared) return;
  for (std::size_t j = 0; j < i; ++j) {
    const NodeValue& node = line.values[j];
    if (node.mode != LockMode::shared) continue;
    if (node.permits == request.permits) return;
    throw backend::permits_disagree(request.key, node.permits, request.permits,
                                    holds(line, j) ? "held" : "waited for");
  }
}

backend::Busy busy(std::string_view key, const Line& line, std::size_t before) {
  std::vector<std::size_t> holding;
  for (std::size_t j = 0; j < before; ++j) {
    if (holds(line, j)) holding.push_back(j);
  }
  backend::Busy answer;
  // A holder's node goes when it releases or its lease ends, and a watch fires; the core's
  // bound on the wait is only a fallback.
  answer.retry_within = std::chrono::milliseconds(1000);
  for (const std::size_t j : holding) {
    answer.holders.push_back(to_info(key, line.nodes[j], line.values[j], line.count - holding.size()));
    answer.retry_within = std::max(answer.retry_within, line.values[j].ttl);
  }
  return answer;
}

}  // namespace dlock::backends::etcd
