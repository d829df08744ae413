#pragma once

// redlock://'s activity totals: the sum over its servers of each one's activity hash (the
// same hash redis:// keeps), each delta added on one server that answers.

#include <chrono>
#include <string>

#include "backends/redlock/servers.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::redlock {

class ActivityTotals final : public backend::ActivityLedger {
 public:
  // `key`: the activity hash's key; `timeout`: how long totals() waits for the servers.
  ActivityTotals(Servers& servers, std::string key, std::chrono::milliseconds timeout)
      : servers_(servers), key_(std::move(key)), timeout_(timeout) {}

  void add(const Activity& delta) override;
  Activity totals() override;

 private:
  Servers& servers_;
  const std::string key_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace dlock::backends::redlock
