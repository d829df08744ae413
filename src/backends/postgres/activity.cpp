#include "backends/postgres/activity.hpp"

namespace dlock::backends::postgres {

ActivityTable::ActivityTable(Store& store)
    : store_(store),
      add_("INSERT INTO \"" + store.settings().table +
           "_activity\" AS a (id, acquisitions, conflicts, waits, wait_us, renewals, losses) "
           "VALUES (1, $1::bigint, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint) "
           "ON CONFLICT (id) DO UPDATE SET acquisitions = a.acquisitions + EXCLUDED.acquisitions, "
           "conflicts = a.conflicts + EXCLUDED.conflicts, waits = a.waits + EXCLUDED.waits, "
           "wait_us = a.wait_us + EXCLUDED.wait_us, renewals = a.renewals + EXCLUDED.renewals, "
           "losses = a.losses + EXCLUDED.losses"),
      totals_("SELECT acquisitions, conflicts, waits, wait_us, renewals, losses FROM \"" + store.settings().table +
              "_activity\"") {}

void ActivityTable::add(const Activity& delta) {
  const auto text = [](std::uint64_t n) { return std::to_string(n); };
  store_.query({}, add_,
               {text(delta.acquisitions), text(delta.conflicts), text(delta.waits), text(delta.wait_us),
                text(delta.renewals), text(delta.losses)});
}

Activity ActivityTable::totals() {
  Activity totals;
  for (const auto& row : store_.query({}, totals_, {})) {
    totals.acquisitions = to_u64(row[0]);
    totals.conflicts = to_u64(row[1]);
    totals.waits = to_u64(row[2]);
    totals.wait_us = to_u64(row[3]);
    totals.renewals = to_u64(row[4]);
    totals.losses = to_u64(row[5]);
  }
  return totals;
}

}  // namespace dlock::backends::postgres
