#pragma once

// The holders of a key, for tests of stores that grant only exclusive holds
// (Capabilities::shared_holders false, as every store does so far): a key has at most one.

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "dlock/types.hpp"

namespace dlock::test {

// The key's one holder, or nothing when it has none; a test failure when it has several.
inline std::optional<LockInfo> sole_holder(const std::vector<LockInfo>& holders) {
  EXPECT_LE(holders.size(), 1u) << "several holders of a key on a store that grants only exclusive holds";
  if (holders.empty()) return std::nullopt;
  return holders.front();
}

}  // namespace dlock::test
