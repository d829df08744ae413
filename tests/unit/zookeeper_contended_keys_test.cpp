// zookeeper://'s memory of contended keys (backends/zookeeper/sets.hpp): a set reads its queues
// first only when one of its keys was found busy lately, and the memory stays bounded. The
// second's expiry is left to the server tests: a unit test does not sleep through it.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/zookeeper/sets.hpp"

namespace dlock::backends::zookeeper {
namespace {

std::vector<backend::AcquireRequest> set_of(const std::vector<std::string>& keys) {
  std::vector<backend::AcquireRequest> requests;
  for (const auto& key : keys) requests.push_back({key, "owner", std::chrono::seconds(10)});
  return requests;
}

TEST(ContendedKeys, ASetIsContendedWhenOneOfItsKeysWasFoundBusy) {
  ContendedKeys contended;
  const std::vector<std::string> keys{"a", "b", "c"};
  EXPECT_FALSE(contended.any(set_of(keys))) << "a client that found nothing busy reads first";
  contended.saw_busy("b");
  EXPECT_TRUE(contended.any(set_of(keys)));
  EXPECT_TRUE(contended.any(set_of({"b"})));
  EXPECT_FALSE(contended.any(set_of({"a", "c"}))) << "keys never found busy count as contended";
}

TEST(ContendedKeys, MoreBusyKeysThanItKeepsAreForgotten) {
  ContendedKeys contended;
  for (std::size_t i = 0; i < ContendedKeys::kMostKeys; ++i) contended.saw_busy("key" + std::to_string(i));
  EXPECT_TRUE(contended.any(set_of({"key0"})));
  contended.saw_busy("one more");
  EXPECT_FALSE(contended.any(set_of({"key0"}))) << "the memory grew past its bound";
  EXPECT_TRUE(contended.any(set_of({"one more"})));
}

}  // namespace
}  // namespace dlock::backends::zookeeper
