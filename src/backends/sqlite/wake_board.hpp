#pragma once

// The sqlite:// wake-up channel: a small file of futex words shared by every process that
// opens the same database.
//
// The board is DB_PATH-wake, mapped MAP_SHARED, kSlots 32-bit counters. A key maps to one
// slot and to one bit of a futex bitset. A release bumps the slot and wakes ONE waiter whose
// bitset holds the key's bit (FUTEX_WAKE_BITSET, count 1), so a release never wakes a herd.
// Two keys that share both slot and bit can steal each other's wake-up; the loser then sleeps
// until the holder's lease runs out, which the core never sleeps past. The layout and the hash
// are an on-disk format shared by every dlock build on the host: do not change them.
//
// The file is allocated, not sparse: a page that a full file system cannot back would kill the
// process with SIGBUS at its first touch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dlock/backend.hpp"

namespace dlock::backends::sqlite {

class WakeBoard : public std::enable_shared_from_this<WakeBoard> {
 public:
  static constexpr std::size_t kSlots = 65536;
  static constexpr std::size_t kBytes = kSlots * sizeof(std::uint32_t);

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
  // A channel for one waiting call; it keeps the board mapped.
  std::unique_ptr<backend::WakeChannel> channel(std::string_view key);

 private:
  explicit WakeBoard(std::uint32_t* words) : words_(words) {}

  std::uint32_t* words_;  // kSlots words, mapped MAP_SHARED
};

}  // namespace dlock::backends::sqlite
