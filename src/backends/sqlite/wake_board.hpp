#pragma once

// The sqlite:// wake-up channel and eviction notices: a small file of futex words shared by
// every process that opens the same database.
//
// The board is DB_PATH-wake, mapped MAP_SHARED: kSlots 32-bit counters, then one page whose
// first word counts force-releases. A key maps to one slot and to one bit of a futex bitset. A
// release bumps the slot and wakes ONE waiter whose bitset holds the key's bit
// (FUTEX_WAKE_BITSET, count 1), so a release never wakes a herd. Two keys that share both slot
// and bit can steal each other's wake-up; the loser then sleeps until the holder's lease runs
// out, which the core never sleeps past. The layout and the hash are an on-disk format shared
// by every dlock build on the host: do not change them (builds before the eviction page map
// the slots only, and never count force-releases).
//
// The file is allocated, not sparse: a page that a full file system cannot back would kill the
// process with SIGBUS at its first touch.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/bell_waiter.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::sqlite {

class WakeBoard : public std::enable_shared_from_this<WakeBoard> {
 public:
  static constexpr std::size_t kSlots = 65536;
  static constexpr std::size_t kSlotBytes = kSlots * sizeof(std::uint32_t);
  static constexpr std::size_t kBytes = kSlotBytes + 4096;  // the slots, then the eviction page

  // Where a key's wake-ups live.
  struct Spot {
    std::size_t slot = 0;
    std::uint32_t bit = 0;
  };
  static Spot locate(std::string_view key) noexcept;

  // Opens (or creates, with `create_mode`) the board file, allocates it and maps it. Throws
  // ConfigurationError naming the file and the cause (a full file system, say) when it cannot.
  static std::shared_ptr<WakeBoard> open(const std::string& path, unsigned create_mode);
  ~WakeBoard();
  WakeBoard(const WakeBoard&) = delete;
  WakeBoard& operator=(const WakeBoard&) = delete;

  // Wakes one waiter on `key` (after the store has committed the release).
  void ring(std::string_view key) noexcept;
  // The bell of one waiting call; it keeps the board mapped.
  std::unique_ptr<Bell> bell(std::string_view key);

  // The eviction word: its low 16 bits count force-releases (announce_eviction), its high 16
  // bits change when a watcher stops (release_watchers). Watchers sleep on the whole word.
  static constexpr std::uint32_t kEvictionMask = 0xffff;
  std::uint32_t eviction_word() const noexcept;
  // Wakes every watcher of the file (after the store has committed the force-release).
  void announce_eviction() noexcept;
  // Wakes every watcher with a change that is no eviction, so that a watcher told to stop
  // wakes even when it was about to sleep; the others sleep again.
  void release_watchers() noexcept;
  // Sleeps until the eviction word differs from `seen`, a wake-up, or spuriously. False when
  // futexes cannot be used here (a seccomp filter, say): no wake-up will ever come.
  bool wait_for_eviction(std::uint32_t seen) const noexcept;

 private:
  explicit WakeBoard(std::uint32_t* words) : words_(words) {}

  std::uint32_t* eviction() const noexcept { return words_ + kSlots; }

  std::uint32_t* words_;  // kBytes, mapped MAP_SHARED
};

// Backend::watch for sqlite://: a thread that sleeps on the board's eviction word and,
// each time a force-release on the file is announced (by any process), reads which keys were
// force-released and passes each to `evicted`, outside every other call of the backend.
class EvictionWatch {
 public:
  // The keys force-released after sequence number `after`, in order, and the last sequence
  // number read (`after` when none).
  struct Evictions {
    std::vector<std::string> keys;
    std::int64_t last = 0;
  };
  using Read = std::function<Evictions(std::int64_t after)>;

  // Starts the thread: every eviction announced from now on is read. Throws std::system_error
  // when no thread can be started.
  EvictionWatch(std::shared_ptr<WakeBoard> board, Read read, std::function<void(std::string_view)> evicted);
  // Stops and joins the thread: `evicted` is not called after this returns.
  ~EvictionWatch();
  EvictionWatch(const EvictionWatch&) = delete;
  EvictionWatch& operator=(const EvictionWatch&) = delete;

 private:
  void run(std::uint32_t seen);

  std::shared_ptr<WakeBoard> board_;
  Read read_;
  std::function<void(std::string_view)> evicted_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace dlock::backends::sqlite
