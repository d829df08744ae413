#pragma once

// What the parts of redlock:// share: its name in errors, the scripts it runs on every server,
// and the keys of one lock those scripts take.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/keys.hpp"
#include "backends/redis/lua_scripts.hpp"
#include "backends/redlock/lua_scripts.hpp"

namespace dlock::backends::redlock {

inline const std::string kName = "redlock";

// The longest random back-off of an attempt that no majority answered alike.
inline constexpr std::chrono::milliseconds kMostBackoff{10};

enum Script : std::size_t {
  kAcquire, kAcquireSet, kAdopt, kRenew, kRelease, kReleaseSet, kInspect, kForceRelease, kList, kCollect,
  kAddActivity, kSleep, kLeave
};
inline const std::vector<std::string_view> kSources = {
    lua::kAcquireLua,        redis::lua::kAcquireSetLua, lua::kAdoptLua,         redis::lua::kRenewLua,
    lua::kReleaseLua,        lua::kReleaseSetLua,        redis::lua::kInspectLua, lua::kForceReleaseLua,
    redis::lua::kListLua,    redis::lua::kCollectLua,    redis::lua::kAddActivityLua, lua::kSleepLua,
    lua::kLeaveLua};

// The keys of one lock, with the waiters' sleepers and bell (lua/bells.lua) and the readers'
// claim (redis://'s lua/holders.lua).
struct Keys {
  Keys(const std::string& ns, std::string_view key, const redis::StoreKeys& store)
      : lock(ns, key, store.held, store.known), sleepers(lock.sleepers()), bell(lock.bell()), readers(lock.readers()) {}
  std::vector<std::string_view> with_bell() const {
    auto keys = lock.all();
    keys.push_back(sleepers);
    keys.push_back(bell);
    return keys;
  }
  redis::LockKeys lock;
  std::string sleepers, bell, readers;
};

}  // namespace dlock::backends::redlock
