// zookeeper://'s queue rules (backends/zookeeper/nodes.hpp): which nodes hold, and which nodes a
// waiting node awaits. The rule that matters most is checked over every small queue: a waiter
// that would hold once some nodes before it go always awaits (watches) one of them, so no
// release leaves a waiter asleep.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/zookeeper/nodes.hpp"

namespace dlock::backends::zookeeper {
namespace {

// A queue from modes: "x" exclusive, "s0" a reader, "s2" a semaphore of 2 permits, ...
std::vector<Child> queue(const std::vector<std::string>& modes) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const std::string sequence = std::to_string(1000000000 + i);
    names.push_back(std::string(16, 'a') + "-" + std::string(16, 'b') + "-" + modes[i] + "-" + sequence);
  }
  return queue_of(names);
}

std::vector<bool> holding(const std::vector<Child>& q) {
  std::vector<bool> out;
  for (std::size_t i = 0; i < q.size(); ++i) out.push_back(holds(q, i));
  return out;
}

TEST(ZooKeeperQueue, NamesCarryModeAndPermits) {
  const auto tag = owner_tag("alice");
  const auto q =
      queue_of({node_prefix(tag, attempt_tag(), LockMode::shared, 3) + "0000000002",
                node_prefix(tag, attempt_tag(), LockMode::exclusive, 0) + "0000000001", "not-dlocks",
                std::string(16, 'a') + "-" + std::string(16, 'b') + "-y-0000000003"});
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].mode, LockMode::exclusive);
  EXPECT_EQ(q[0].sequence, 1u);
  EXPECT_EQ(q[1].mode, LockMode::shared);
  EXPECT_EQ(q[1].permits, 3u);
  EXPECT_EQ(q[1].tag, tag);
}

TEST(ZooKeeperQueue, DataCarriesModeAndPermits) {
  const NodeData data{"bob", 2, std::chrono::milliseconds(2000), true, LockMode::shared, 5};
  const auto back = from_data(to_data(data));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->owner, "bob");
  EXPECT_EQ(back->holds, 2u);
  EXPECT_TRUE(back->evicted);
  EXPECT_EQ(back->mode, LockMode::shared);
  EXPECT_EQ(back->permits, 5u);
}

TEST(ZooKeeperQueue, WhoHolds) {
  EXPECT_EQ(holding(queue({"x", "s0", "x"})), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(holding(queue({"s0", "s0", "x", "s0"})), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(holding(queue({"s2", "s2", "s2", "x"})), (std::vector<bool>{true, true, false, false}));
  // Other permits than the first shared node's: never a holder, though it takes a place.
  EXPECT_EQ(holding(queue({"s2", "s3", "s2"})), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(first_shared(queue({"x", "s3", "s2"}), 2), 1u);
  EXPECT_FALSE(first_shared(queue({"x", "s3"}), 1));
}

TEST(ZooKeeperQueue, WhatAWaiterAwaits) {
  EXPECT_EQ(awaited(queue({"s0", "s0", "s0", "x"}), 3), (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(awaited(queue({"x", "s0", "x", "s0", "s0"}), 4), (std::vector<std::size_t>{2}));
  EXPECT_EQ(awaited(queue({"s3", "s3", "s3", "s3", "s3"}), 4), (std::vector<std::size_t>{1, 2, 3}));
}

// Every queue of up to 5 nodes of these kinds, every waiting node in it and every set of
// nodes before it that may go: if the waiter holds once they are gone, one of them was awaited.
TEST(ZooKeeperQueue, NoReleaseLeavesAWaiterThatCouldHoldAsleep) {
  const std::vector<std::string> kinds = {"x", "s0", "s1", "s2", "s3"};
  int checked = 0;
  for (std::size_t length = 2; length <= 5; ++length) {
    std::vector<std::size_t> pick(length, 0);
    for (bool more = true; more;) {
      std::vector<std::string> modes;
      for (const auto k : pick) modes.push_back(kinds[k]);
      const auto q = queue(modes);
      for (std::size_t i = 1; i < q.size(); ++i) {
        if (holds(q, i)) continue;
        const auto first = first_shared(q, i);
        if (q[i].mode == LockMode::shared && first && q[*first].permits != q[i].permits) continue;  // refused
        const auto awaits = awaited(q, i);
        for (unsigned gone = 1; gone < (1u << i); ++gone) {
          std::vector<Child> left;
          bool awaited_gone = false;
          for (std::size_t j = 0; j < i; ++j) {
            const bool goes = (gone >> j) & 1u;
            if (!goes) left.push_back(q[j]);
            if (goes && std::find(awaits.begin(), awaits.end(), j) != awaits.end()) awaited_gone = true;
          }
          left.push_back(q[i]);
          if (awaited_gone) continue;
          ++checked;
          EXPECT_FALSE(holds(left, left.size() - 1))
              << "node " << i << " of a queue of " << q.size() << " holds once nodes it does not await go";
        }
      }
      std::size_t at = 0;
      while (at < length && ++pick[at] == kinds.size()) pick[at++] = 0;
      more = at < length;
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace dlock::backends::zookeeper
