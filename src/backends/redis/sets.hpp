#pragma once

// Several locks in one script call (Backend::acquire_set and release_set): the KEYS and ARGV of
// lua/acquire_set.lua, lua/release_set.lua and redlock's release_set.lua, and their answers.
// Shared by redis:// and redlock://.

#include <hiredis/hiredis.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/keys.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::redis {

// The KEYS and ARGV of one set script (lua/common.lua's set_lock): the indexes, then each
// lock's keys; ARGV's head, then each lock's values, its key first. Owns what they point to.
class SetCall {
 public:
  // acquire_set.lua's, for requests of one try-once attempt (AcquireRequest::waiting is not
  // sent: a set never places a claim). `readers_claims` as for AcquireArgs.
  static SetCall acquire(const std::string& ns, const StoreKeys& store, std::span<const backend::AcquireRequest> requests,
                         bool fair, bool readers_claims);
  // release_set.lua's; with `alive_ms`, redlock's (each lock's sleepers and bell too).
  static SetCall release(const std::string& ns, const StoreKeys& store, std::span<const backend::LeaseRef> leases,
                         std::optional<std::string_view> alive_ms = std::nullopt);

  SetCall(SetCall&&) = default;  // a deque's elements stay where they are
  SetCall(const SetCall&) = delete;
  SetCall& operator=(const SetCall&) = delete;

  const std::vector<std::string_view>& keys() const noexcept { return keys_; }
  const std::vector<std::string_view>& args() const noexcept { return args_; }

 private:
  SetCall(const std::string& ns, const StoreKeys& store, bool bells);
  void add(std::string_view key, std::vector<std::string> values);
  std::string_view own(std::string value) { return strings_.emplace_back(std::move(value)); }

  const std::string& ns_;
  const StoreKeys& store_;
  bool bells_;
  // Deques: what keys_ and args_ point to never moves.
  std::deque<LockKeys> locks_;
  std::deque<std::string> strings_;
  std::vector<std::string_view> keys_, args_;
};

// acquire_set.lua's answer: one Acquired per request, or the first refused one's index and
// Busy. Throws InvalidArgument as acquire_answer does.
backend::AcquireSetResult acquire_set_answer(std::span<const backend::AcquireRequest> requests, const redisReply* reply);

// release.lua's answer (each element of release_set.lua's): the holds left, or nothing when the
// lease was no longer ours.
std::optional<std::uint32_t> holds_left(const redisReply* reply);

}  // namespace dlock::backends::redis
