// mysql:// lease mode: a lock table keyed by name, each acquire, renew and release one
// statement judged by the server's clock.

#include <mysqld_error.h>

#include "backends/mysql/common.hpp"
#include "backends/mysql/lease_shared.hpp"
#include "backends/mysql/lease_sql.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// How long a newcomer waits on a key whose row is free while a woken waiter takes it over.
constexpr std::chrono::milliseconds kHandoffRecheck{50};

// The GET_LOCK whose holder is the key's heir, next to its doorbell `bell`.
std::string heir_slot(const std::string& bell) { return bell + ":heir"; }

// A waiter's side of the heir handoff (see LeaseSql), run by its doorbell channel.
class HeirTakeover final : public Takeover {
 public:
  HeirTakeover(ModeBackend& backend, const LeaseSql& sql, std::string key)
      : backend_(backend), sql_(sql), key_(std::move(key)), bell_(backend.bell_name(key_)), slot_(heir_slot(bell_)) {}

  Outcome wait(Connection& connection, std::string_view owner, std::chrono::milliseconds ttl,
               std::chrono::microseconds wait) override {
    using std::chrono::microseconds;
    if (!heir_) {
      const auto start = std::chrono::steady_clock::now();
      const auto rows = connection.query("SELECT GET_LOCK(?, ? / 1000000)", {std::string_view(slot_), wait.count()});
      if (rows.empty() || rows[0][0] != std::optional<std::string>("1")) return {};
      heir_ = true;
      registered_ = true;
      // No handover can come before the registration that follows.
      watched_since_ = std::chrono::steady_clock::now();
      wait -= std::chrono::duration_cast<microseconds>(watched_since_ - start);
      if (wait <= microseconds(0)) return {};
    }
    connection.execute(sql_.become_heir, {owner, ttl_us(ttl), std::string_view(key_), owner, std::string_view(slot_)});
    // A key handed over is timed from the sending of the heir's last look at the row that
    // found it not yet handed over, so one wait lasts at most an eighth of the TTL.
    const auto slice = std::min(wait, std::max<microseconds>(ttl / 8, std::chrono::milliseconds(1)));
    const auto sent = std::chrono::steady_clock::now();
    const auto rows = connection.query(sql_.heir_wait, {owner, owner, std::string_view(slot_), std::string_view(bell_),
                                                        std::string_view(bell_), slice.count(), std::string_view(key_)});
    const Row& row = rows.at(0);
    Outcome outcome;
    outcome.rang = row[2] == std::optional<std::string>("1");
    if (row[0] == std::optional<std::string>("1")) {
      heir_ = false;  // the statement gave up the heir slot
      const std::uint64_t token = to_u64(row[1]);
      backend_.remember(key_, owner, connection.serial(), token);
      outcome.acquired = backend::Acquired{token, 1, watched_since_};
    } else {
      watched_since_ = sent;
    }
    return outcome;
  }

  bool waiting() const noexcept override { return heir_; }
  void session_lost() noexcept override {
    heir_ = false;
    lost_session_ = true;
  }

  void finish(Connection& connection, std::string_view owner, std::string_view sessions,
              bool acquired) noexcept override {
    const bool heir = std::exchange(heir_, false);
    try {
      if (!acquired && (registered_ || lost_session_)) {
        connection.execute(sql_.quit_heir, {std::string_view(key_), sessions});
        // The key may have been handed over after the last wait, or taken by an attempt
        // whose answer was lost with its session: nobody will use it.
        const auto rows = connection.query(sql_.handed, {std::string_view(key_), owner, sessions});
        if (!rows.empty()) backend_.release(backend::LeaseRef{key_, owner, to_u64(rows[0][0])});
      }
      if (heir) connection.query(sql_.drop_slot, {std::string_view(slot_)});
    } catch (...) {
      // The server is unreachable: the session, and its slot, end with the connection; a
      // key handed over runs out with its lease.
    }
  }

 private:
  ModeBackend& backend_;
  const LeaseSql& sql_;
  std::string key_, bell_, slot_;
  bool heir_ = false;  // this session holds the heir slot and wrote itself into the row
  bool registered_ = false;    // some session of this waiting call wrote itself into the row
  bool lost_session_ = false;  // the server ended a session of this waiting call
  std::chrono::steady_clock::time_point watched_since_;  // no handover to this heir came before
};

class LeaseBackend final : public ModeBackend {
 public:
  explicit LeaseBackend(Settings settings)
      : ModeBackend(std::move(settings)), sql_(settings_.table), shared_(*this, settings_.table) {
    auto connection = take();
    ensure_lock_table(*connection);
  }

  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .holds_outlive_the_client = true,
            .records_acquisition_time = true,
            .shared_holders = true};
  }

  backend::AcquireResult attempt(const backend::AcquireRequest& request, DoorbellChannel* through) override {
    Attempt attempt = attempt_for(request, through, false);
    DoorbellChannel* channel = attempt.channel;
    if (!channel) return attempt_on(*attempt.connection, request, nullptr);
    if (auto taken = channel->claim()) return *taken;
    try {
      return attempt_on(channel->connection(), request, channel);
    } catch (const Error&) {
      if (!channel->connection().broken()) throw;
    }
    // The server ended the waiter's session (KILL, restart) before the answer came, and the
    // attempt may have taken the key: it is made again on a new session, which takes such an
    // acquisition as this call's (see LeaseSql). A waiter so outlives a KILL, as in its waits.
    channel->reconnect();
    return attempt_on(channel->connection(), request, channel);
  }

  // A shared waiter is never the heir, to whom a release hands the key exclusively.
  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    if (request.mode == LockMode::shared) return std::make_unique<DoorbellChannel>(*this, request);
    return std::make_unique<DoorbellChannel>(*this, request,
                                             std::make_unique<HeirTakeover>(*this, sql_, std::string(request.key)));
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    auto connection = take();
    if (remembered_shared(lease.key, lease.owner, lease.token)) return shared_.renew(*connection, lease, ttl);
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew,
                                 {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    return outcome.affected == 1 || shared_.renew(*connection, lease, ttl);
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    const std::string slot = heir_slot(bell);
    auto connection = take_for(lease.key, lease.owner, lease.token);
    const bool on_holder = remembered(lease.key, lease.owner, lease.token) == connection->serial();
    const auto token = static_cast<std::int64_t>(lease.token);
    // A shared hold this client took skips the exclusive statements, which would find it not theirs.
    const bool known_shared = remembered_shared(lease.key, lease.owner, lease.token);
    if (!known_shared && with_retries(lease.key, [&] {
          return connection->execute(sql_.free, {bell, lease.key, lease.owner, token});
        }).affected == 1) {
      forget(lease.key, lease.owner, lease.token);
      return 0u;
    }
    const auto outcome = known_shared ? Outcome{} : with_retries(lease.key, [&] {
      return connection->execute(sql_.release,
                                 {slot, bell, bell, lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    const bool evicted = outcome.affected == 1 && outcome.insert_id == kEvictedRelease;
    if (outcome.affected == 1 && outcome.insert_id > 0 && !evicted) return static_cast<std::uint32_t>(outcome.insert_id);
    if (outcome.affected != 1) {
      if (const auto shared = shared_.release(*connection, lease); shared.found) {
        if (shared.left.value_or(0) == 0) forget(lease.key, lease.owner, lease.token);
        return shared.left;
      }
    }
    forget(lease.key, lease.owner, lease.token);
    if (evicted) return std::nullopt;  // freed, and rang, as its last release
    if (outcome.affected == 1) return 0u;
    // Lost: a doorbell, or a shared holder's lock, its session still holds for it would keep
    // waiters asleep (any other connection's doorbell is a newer acquisition's, and so is this
    // one's when it keeps the key's bell for another exclusive lock).
    if (on_holder) {
      if (!keeps_doorbell(lease.key, *connection)) {
        with_retries(lease.key, [&] { return connection->query(sql_.drop_bell, {bell, bell}); });
      }
      shared_.drop_holder_lock(*connection, lease);
    }
    return std::nullopt;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    auto connection = take();
    auto holders = inspect_on(*connection, key, sql_.inspect);
    return holders.empty() ? shared_.holders(*connection, key) : holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return list_page(prefix, after, limit, shared_.list_bounded(), shared_.list_open(), {}, 6);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    if (auto shared = shared_.force_release(*take(), key, eviction, token)) return *shared;
    return evict(key, token, sql_.inspect, eviction == Eviction::delayed ? sql_.evict : sql_.force_release);
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] {
      // The floor is locked first, as every acquire's read of it is, so the two never
      // deadlock; a key deleted here starts again above the floor.
      return in_transaction(*connection, [&] {
        connection->query(sql_.lock_floor, {});
        const auto cutoff = connection->query(sql_.idle_cutoff, {});
        const std::string at = cutoff.at(0).at(0).value_or("");
        connection->execute(sql_.raise_floor, {std::string_view(at)});
        shared_.remove_idle(*connection, at);
        return static_cast<std::size_t>(connection->execute(sql_.delete_idle, {std::string_view(at)}).affected);
      });
    });
  }

 private:
  // One attempt on `connection`: through a waiting call's `channel`, or not.
  backend::AcquireResult attempt_on(Connection& connection, const backend::AcquireRequest& request,
                                    DoorbellChannel* channel) {
    if (request.mode == LockMode::shared) {
      auto result = shared_.acquire(connection, request);
      // The holder's lock stays with this connection's session (lease_shared.hpp).
      if (const auto* acquired = std::get_if<backend::Acquired>(&result); acquired && acquired->hold_count == 1) {
        remember(request.key, request.owner, connection.serial(), acquired->token, LockMode::shared);
      }
      return result;
    }
    const std::string bell = bell_name(request.key);
    const std::string_view sessions = channel ? channel->sessions() : std::string_view();
    const std::int64_t ttl = ttl_us(request.ttl);
    const std::int64_t kept = keeps_doorbell(request.key, connection) ? 1 : 0;
    const auto conflict = [&] {
      return with_retries(request.key, [&] { return connection.query(sql_.conflict, {kept, bell, bell, request.key}); });
    };
    if (!channel) {
      const auto taken = with_retries(request.key, [&] {
        return connection.execute(sql_.take, {bell, bell, request.owner, ttl, request.key, bell, bell});
      });
      if (taken.affected == 1) {
        remember(request.key, request.owner, connection.serial(), taken.insert_id);
        return backend::Acquired{taken.insert_id, 1};
      }
      // Not taken: held by another owner, the usual reason, answers now; anything else
      // (no row, a re-entry, a takeover under way) goes to `acquire`.
      const auto rows = conflict();
      if (!rows.empty()) {
        LockInfo holder = info(std::string(request.key), rows[0], 0);
        if (!holder.owner.empty() && holder.owner != request.owner && holder.ttl_left.count() > 0) {
          return refused(connection, request, std::move(holder));
        }
      }
    }
    const auto outcome = with_retries(request.key, [&] {
      return connection.execute(sql_.acquire,
                                {request.key, request.owner, ttl, bell, bell, sessions, sessions, sessions, sessions,
                                 sessions, sessions, sessions});
    });
    if (auto acquired = settle(outcome, connection, request.key, request.owner)) {
      if (channel) {
        channel->bell_settled();
        channel->acquired();
      }
      return *acquired;
    }
    // Unchanged: someone else holds it. Report who, and give back a doorbell taken for nothing.
    const auto rows = conflict();
    if (channel) channel->bell_settled();
    if (rows.empty()) throw BackendError("acquire of '" + std::string(request.key) + "' found no row", kName);
    const Row& row = rows[0];
    LockInfo holder = info(std::string(request.key), row, 0);
    // Free (or its lease ran out), but a woken waiter holds the doorbell and is taking it over
    // right now, or readers claimed it.
    if (holder.owner.empty() || holder.ttl_left.count() <= 0) return backend::Busy{{}, kHandoffRecheck};
    return refused(connection, request, std::move(holder));
  }

  // An exclusive request refused by the key's holder: a waiting writer looks again within half
  // a writer's claim, which it places when shared holders refused it.
  backend::Busy refused(Connection& connection, const backend::AcquireRequest& request, LockInfo holder) {
    if (holder.owner == kSharedOwner) return shared_.writer_refused(connection, request, holder.token);
    auto left = holder.ttl_left;
    if (request.waiting) left = std::min<std::chrono::milliseconds>(left, backend::kWriterClaim / 2);
    return backend::Busy{{std::move(holder)}, left};
  }

  // The acquisition an acquire statement made, if any, read from its affected rows.
  std::optional<backend::Acquired> settle(const Outcome& outcome, Connection& connection, std::string_view key,
                                          std::string_view owner) {
    if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
      // A fresh row (its token is the floor plus one), a takeover (the token plus one), or a
      // claim of the waiting call's own acquisition (its token).
      remember(key, owner, connection.serial(), outcome.insert_id);
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected != 2) return std::nullopt;
    // A re-entry: it answers insert id 0 and is read back.
    const auto rows = with_retries(key, [&] { return connection.query(sql_.reentered, {key, owner}); });
    if (rows.empty()) throw BackendError("a re-entry of '" + std::string(key) + "' left no row", kName);
    return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
  }

  LeaseSql sql_;
  LeaseShared shared_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings) {
  return std::make_shared<LeaseBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
