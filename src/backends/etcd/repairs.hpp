#pragma once

// Node writes whose answer never came (a timeout, a broken connection, a leader's death): each
// may or may not have been applied. Left alone, such a node lives on under the client's lease,
// which the client keeps alive: a waiter's node would one day come first in its queue, a
// released holder's node would keep the key, and either would be taken for a hold of its owner
// (a re-entry that never was). So such a write leaves a repair behind: a transaction, guarded by
// compares, that brings the node to where its caller now believes it is and does nothing when
// it is there already. Repairs are made before this client's next acquisition looks at a queue
// (make()), and by a thread of their own until done, so a failed release frees the key soon
// after the cluster answers again, as the core promises (at the latest when its TTL runs out).

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backends/etcd/connection.hpp"

namespace dlock::backends::etcd {

class Repairs {
 public:
  explicit Repairs(std::shared_ptr<Connection> connection);
  // Stops the thread; repairs left undone are left to the lease's end.
  ~Repairs();
  Repairs(const Repairs&) = delete;
  Repairs& operator=(const Repairs&) = delete;

  // `repair` for a write about lock `key` whose answer never came.
  void add(pb::TxnRequest repair, std::string_view key);
  // Makes every repair left; throws, keeping those not made, when the cluster does not answer.
  void make();

 private:
  void run();

  const std::shared_ptr<Connection> connection_;
  std::mutex making_;  // held while repairs are made: a make() returns only when none is under way
  std::mutex mutex_;   // guards the rest; never held while waiting for an answer
  std::condition_variable wake_;
  std::vector<std::pair<pb::TxnRequest, std::string>> pending_;  // (repair, key)
  bool stop_ = false;
  std::thread thread_;  // started by the first repair
};

}  // namespace dlock::backends::etcd
