#include "backends/sqlite/wake_board.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <thread>

#include "core/log.hpp"
#include "core/signal_free_thread.hpp"
#include "core/stable_hash.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Shared (not _PRIVATE) futex operations: waiters and wakers are different processes.
long futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* deadline,
           std::uint32_t bitset) noexcept {
  return ::syscall(SYS_futex, word, op, value, deadline, nullptr, bitset);
}

void wake_one(std::uint32_t* word, std::uint32_t bit) noexcept {
  futex(word, FUTEX_WAKE_BITSET, 1, nullptr, bit);
}

// FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, which is steady_clock's epoch.
timespec to_timespec(SteadyClock::time_point deadline) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
  if (ns <= 0) return timespec{0, 0};
  return timespec{static_cast<std::time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

class BoardBell final : public Bell {
 public:
  BoardBell(std::shared_ptr<WakeBoard> board, std::uint32_t* word, std::uint32_t bit)
      : board_(std::move(board)), word_(word), bit_(bit) {}

  void arm() override { seen_ = std::atomic_ref<std::uint32_t>(*word_).load(std::memory_order_acquire); }

  bool wait_until(SteadyClock::time_point deadline) override {
    consumed_ = false;
    const timespec until = to_timespec(deadline);
    for (;;) {
      if (futex(word_, FUTEX_WAIT_BITSET, seen_, &until, bit_) == 0) {
        consumed_ = true;
        return true;
      }
      switch (errno) {
        case EINTR:
          continue;
        case EAGAIN:  // the slot moved since arm(): a ring we must not miss
          return true;
        case ETIMEDOUT:
          return false;
        default:
          // The futex is unusable (a seccomp filter, say): sleep like a wake-up that never
          // comes; the core's deadline is bounded by the holder's lease.
          std::this_thread::sleep_until(deadline);
          return false;
      }
    }
  }

  void pass_on() noexcept override {
    if (!consumed_) return;
    consumed_ = false;
    wake_one(word_, bit_);
  }

  void ring_all() noexcept override {
    std::atomic_ref<std::uint32_t>(*word_).fetch_add(1, std::memory_order_release);
    futex(word_, FUTEX_WAKE_BITSET, INT_MAX, nullptr, bit_);
  }

 private:
  std::shared_ptr<WakeBoard> board_;  // keeps word_ mapped
  std::uint32_t* word_;
  std::uint32_t bit_;
  std::uint32_t seen_ = 0;
  bool consumed_ = false;  // the last wait took a real wake-up that a release meant for someone
};

[[noreturn]] void board_error(const std::string& path, const char* what, int err) {
  const char* fix = err == ENOSPC || err == EDQUOT
                        ? "free space on its file system, or choose another directory: sqlite:///path/to/locks.db"
                        : "choose a writable directory: sqlite:///path/to/locks.db";
  throw ConfigurationError("cannot " + std::string(what) + " the wake-up file " + path + " next to the database: " +
                               std::strerror(err) + " (" + fix + ")",
                           "sqlite");
}

}  // namespace

WakeBoard::Spot WakeBoard::locate(std::string_view key) noexcept {
  const std::uint64_t h = core::stable_hash(key);  // part of the on-disk format
  return Spot{static_cast<std::size_t>(h % kSlots), std::uint32_t{1} << ((h >> 16) % 32)};
}

std::shared_ptr<WakeBoard> WakeBoard::open(const std::string& path, unsigned create_mode) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, create_mode);
  if (fd < 0) board_error(path, "open", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};  // the mapping outlives the descriptor
  struct stat st {};
  if (::fstat(fd, &st) != 0) board_error(path, "inspect", errno);
  if (!S_ISREG(st.st_mode)) board_error(path, "use", EINVAL);
  // Like SQLite's -wal and -shm files: whoever may use the database may use the board,
  // whatever this process's umask. Best effort: another user's fresh file stays as it is.
  if (st.st_size == 0 && (st.st_mode & 07777) != create_mode) (void)::fchmod(fd, create_mode);
  // Short, or sparse (as earlier builds made it with ftruncate): allocate every page now, so a
  // full file system is an error here rather than SIGBUS at the first touch of a page.
  // Allocating concurrently is harmless; the board never shrinks.
  if (st.st_size < static_cast<off_t>(kBytes) || st.st_blocks * 512 < static_cast<blkcnt_t>(kBytes)) {
    int err = 0;
    while ((err = ::posix_fallocate(fd, 0, static_cast<off_t>(kBytes))) == EINTR) {
    }
    if (err != 0) board_error(path, "allocate", err);
  }
  void* mapped = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) board_error(path, "map", errno);
  return std::shared_ptr<WakeBoard>(new WakeBoard(static_cast<std::uint32_t*>(mapped)));
}

WakeBoard::~WakeBoard() { ::munmap(words_, kBytes); }

void WakeBoard::ring(std::string_view key) noexcept {
  const Spot spot = locate(key);
  std::uint32_t* word = words_ + spot.slot;
  std::atomic_ref<std::uint32_t>(*word).fetch_add(1, std::memory_order_release);
  wake_one(word, spot.bit);
}

std::unique_ptr<Bell> WakeBoard::bell(std::string_view key) {
  const Spot spot = locate(key);
  return std::make_unique<BoardBell>(shared_from_this(), words_ + spot.slot, spot.bit);
}

std::uint32_t WakeBoard::eviction_word() const noexcept {
  return std::atomic_ref<std::uint32_t>(*eviction()).load(std::memory_order_acquire);
}

void WakeBoard::announce_eviction() noexcept {
  // Only the low half counts: a count that wraps carries into the high half, which is harmless.
  std::atomic_ref<std::uint32_t>(*eviction()).fetch_add(1, std::memory_order_release);
  futex(eviction(), FUTEX_WAKE_BITSET, INT_MAX, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void WakeBoard::release_watchers() noexcept {
  std::atomic_ref<std::uint32_t>(*eviction()).fetch_add(kEvictionMask + 1, std::memory_order_release);
  futex(eviction(), FUTEX_WAKE_BITSET, INT_MAX, nullptr, FUTEX_BITSET_MATCH_ANY);
}

bool WakeBoard::wait_for_eviction(std::uint32_t seen) const noexcept {
  if (futex(eviction(), FUTEX_WAIT_BITSET, seen, nullptr, FUTEX_BITSET_MATCH_ANY) == 0) return true;
  return errno == EAGAIN || errno == EINTR;
}

EvictionWatch::EvictionWatch(std::shared_ptr<WakeBoard> board, Read read, std::function<void(std::string_view)> evicted)
    : board_(std::move(board)), read_(std::move(read)), evicted_(std::move(evicted)) {
  // Read here, not in the thread: an eviction announced before the thread runs still wakes it.
  thread_ = core::signal_free_thread([this, seen = board_->eviction_word()] { run(seen); });
}

EvictionWatch::~EvictionWatch() {
  stop_.store(true);
  board_->release_watchers();  // changes the word, so the thread cannot sleep through it
  thread_.join();
}

void EvictionWatch::run(std::uint32_t seen) {
  std::int64_t after = 0;  // the last eviction read; the first read starts at the watch's start
  for (;;) {
    if (!board_->wait_for_eviction(seen)) return;  // no futex: holders learn at their renewal
    const std::uint32_t word = board_->eviction_word();
    if (stop_.load()) return;
    const bool evicted = ((word ^ seen) & WakeBoard::kEvictionMask) != 0;
    seen = word;
    if (!evicted) continue;  // a watcher stopped, or a spurious wake-up
    try {
      Evictions found = read_(after);
      after = found.last;
      for (const auto& key : found.keys) evicted_(key);
    } catch (const std::exception& e) {
      core::log(LogLevel::debug, std::string("sqlite:// could not read the force-releases: ") + e.what() +
                                     "; their holders learn at their next renewal");
    }
  }
}

}  // namespace dlock::backends::sqlite
