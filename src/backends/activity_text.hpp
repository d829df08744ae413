#pragma once

// The activity totals (dlock::Activity) as the text a store without columns keeps them in
// (zookeeper://'s node, etcd://'s key): the six counters, space-separated, in Activity's order.

#include <sstream>
#include <string>

#include "dlock/types.hpp"

namespace dlock::backends {

inline std::string activity_text(const Activity& a) {
  return std::to_string(a.acquisitions) + " " + std::to_string(a.conflicts) + " " + std::to_string(a.waits) +
         " " + std::to_string(a.wait_us) + " " + std::to_string(a.renewals) + " " + std::to_string(a.losses);
}

// Zero for text that is not such totals.
inline Activity parse_activity(const std::string& text) {
  Activity a;
  std::istringstream in(text);
  in >> a.acquisitions >> a.conflicts >> a.waits >> a.wait_us >> a.renewals >> a.losses;
  return in ? a : Activity{};
}

}  // namespace dlock::backends
