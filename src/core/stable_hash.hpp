#pragma once

#include <cstdint>
#include <string_view>

namespace dlock::core {

// A 64-bit hash that every dlock build on every host computes alike, for names shared through
// a store (wake-up slots, doorbell names): FNV-1a 64, then the murmur3 finalizer, so that all
// bits are well mixed (raw FNV-1a mixes its low bits poorly).
constexpr std::uint64_t stable_hash(std::string_view text) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace dlock::core
