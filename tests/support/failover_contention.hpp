#pragma once

// Clients contending for one key while a member of the replicated store under them is killed
// (the ZooKeeper ensemble's leader, the etcd cluster's leader), judged from outside the library.
//
// Each contender acquires (waiting up to 1 s), uses a shared counter by read-sleep-write for
// ~20 ms, and releases, until the run ends; the holder that holds when the kill is asked for
// keeps using the key in 20 ms steps until the kill is done. A holder uses the key only while
// lease.held() and before lease.valid_until(). So two holders at once show as overlapping
// intervals and lost updates. Times are this process's steady clock, never the library's.
//
//   auto run = test::contend_through_failover(url, key, 4, 6s, [&] { return servers.kill_leader(); });
//   test::expect_safe_failover(run);

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "dlock/client.hpp"

namespace dlock::test {

struct FailoverRun {
  // The contenders' clients, still open: the last check finds the key free while they live.
  std::vector<Client> clients;
  // What was killed (the member number the kill returned) and a summary for failure messages.
  int killed_member = 0;
  std::string summary;
  // Whether a contender held the key when the kill was made.
  bool held_for_kill = false;
  int acquisitions = 0;
  // Rules broken, each with its first few cases shown.
  int overlaps = 0, token_regressions = 0, phantom_reentries = 0;
  std::string overlaps_shown, token_regressions_shown, phantom_reentries_shown;
  long counter = 0, increments = 0;
  // Acquisitions begun after the kill, in all and per client.
  int after_kill = 0;
  std::vector<int> after_kill_by_client;
  // What came of the lease held across the kill: kept (released normally, never reported
  // lost) or learned lost; anything else is a failure.
  bool kill_outcome_ok = false;
  std::string kill_outcome;
};

// Opens `clients` clients on `url` that contend for `key`; about 2 s in, once one of them holds
// the key, calls `kill` (which kills a member and returns its number); the contention goes on
// for `after_kill` once the kill is done.
FailoverRun contend_through_failover(const std::string& url, const std::string& key, int clients,
                                     std::chrono::seconds after_kill, const std::function<int()>& kill);

// The promises that must hold across the failover: no two holders at once, no lost update,
// tokens rising in the order the key was taken, no acquisition taken for a re-entry, at least
// ten acquisitions after the kill with every client among them, the lease across the kill
// kept or learned lost, and the key free once every contender let go (checked on `url`, the
// contenders' clients still open).
void expect_safe_failover(const FailoverRun& run, const std::string& url, const std::string& key);

}  // namespace dlock::test
