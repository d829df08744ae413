#pragma once

// zookeeper://'s activity totals: one persistent node beside the keys, ROOT/.activity (no key's
// node name starts with a dot), holding the six counters; adding is a versioned
// read-modify-write, made again when another client added first. Clients add every few
// seconds, so contention stays low.

#include <functional>
#include <memory>
#include <string>

#include "backends/zookeeper/session.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::zookeeper {

class ActivityNode final : public backend::ActivityLedger {
 public:
  // `session`: the backend's live session; `root`: the URL's path.
  ActivityNode(std::function<std::shared_ptr<Session>()> session, std::string root)
      : session_(std::move(session)), root_(std::move(root)), path_(root_ + "/.activity") {}

  void add(const Activity& delta) override;
  Activity totals() override;

 private:
  const std::function<std::shared_ptr<Session>()> session_;
  const std::string root_;
  const std::string path_;
};

}  // namespace dlock::backends::zookeeper
