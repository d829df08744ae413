#pragma once

// etcd://'s activity totals: one key beside the keys' directories, ROOT/.activity (a key's
// directory ends in '/', so it is never this key), holding the six counters; adding is a
// read-modify-write compared on the key's mod revision, made again when another client added
// first. Clients add every few seconds, so contention stays low.

#include <memory>
#include <string>

#include "backends/etcd/connection.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

class ActivityKey final : public backend::ActivityLedger {
 public:
  ActivityKey(std::shared_ptr<Connection> connection, const std::string& root)
      : connection_(std::move(connection)), key_(root + "/.activity") {}

  void add(const Activity& delta) override;
  Activity totals() override;

 private:
  const std::shared_ptr<Connection> connection_;
  const std::string key_;
};

}  // namespace dlock::backends::etcd
