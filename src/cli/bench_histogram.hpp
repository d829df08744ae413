#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dlock::cli {

// Latencies in ns: exact below 2048 ns, then 1024 buckets per power of two (within 0.05% of
// the sample). Storing every sample instead would cost gigabytes at the millions of ops/s of
// local://, and the reallocation stalls would land in the very figures being measured.
class Histogram {
  static constexpr int kSubBits = 10;
  static constexpr std::uint64_t kLinear = 2u << kSubBits;
  static constexpr int kTopBits = 41;  // up to 2^41 ns, over half an hour
  static constexpr std::uint64_t kMax = (std::uint64_t{1} << kTopBits) - 1;
  static constexpr std::size_t kBuckets = kLinear + (kTopBits - kSubBits - 1) * (std::size_t{1} << kSubBits);

 public:
  void add(std::uint64_t ns) { ++counts_[index(std::min(ns, kMax))]; }
  void merge(const Histogram& other) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  }
  std::uint64_t count() const {
    std::uint64_t total = 0;
    for (const std::uint64_t c : counts_) total += c;
    return total;
  }
  // Nearest rank: the smallest sample with at least p% of the samples at or below it.
  std::optional<std::uint64_t> percentile(std::uint64_t p) const {
    const std::uint64_t total = count();
    if (total == 0) return std::nullopt;
    const std::uint64_t rank = std::max<std::uint64_t>((total * p + 99) / 100, 1);
    std::uint64_t seen = 0;
    std::size_t i = 0;
    while ((seen += counts_[i]) < rank) ++i;
    return middle(i);
  }
  // The raw buckets, to send them through a pipe.
  const void* data() const { return counts_.data(); }
  void* data() { return counts_.data(); }
  static constexpr std::size_t kBytes = kBuckets * sizeof(std::uint64_t);

 private:
  static std::size_t index(std::uint64_t ns) {
    if (ns < kLinear) return ns;
    const int shift = static_cast<int>(std::bit_width(ns)) - kSubBits - 1;
    return kLinear + static_cast<std::size_t>(shift - 1) * (std::size_t{1} << kSubBits) +
           ((ns >> shift) - (std::uint64_t{1} << kSubBits));
  }
  static std::uint64_t middle(std::size_t i) {
    if (i < kLinear) return i;
    const std::size_t j = i - kLinear;
    const int shift = static_cast<int>(j >> kSubBits) + 1;
    const std::uint64_t mantissa = (j & ((std::size_t{1} << kSubBits) - 1)) + (std::uint64_t{1} << kSubBits);
    return (mantissa << shift) + (std::uint64_t{1} << (shift - 1));
  }

  std::vector<std::uint64_t> counts_ = std::vector<std::uint64_t>(kBuckets);
};

}  // namespace dlock::cli
