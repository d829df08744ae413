#pragma once

// postgres://'s activity totals: one row in TABLE_activity, to which each client adds its
// counters every few seconds in one upsert.

#include "backends/postgres/store.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::postgres {

class ActivityTable final : public backend::ActivityLedger {
 public:
  explicit ActivityTable(Store& store);

  void add(const Activity& delta) override;
  Activity totals() override;

 private:
  Store& store_;
  const std::string add_;
  const std::string totals_;
};

}  // namespace dlock::backends::postgres
