// The public faces of the client: Lease, Attempt and Client, over detail::ClientState.

#include <unistd.h>

#include <cstdlib>

#include "backends/registry.hpp"
#include "core/client_state.hpp"
#include "core/log.hpp"
#include "core/url.hpp"
#include "core/validate.hpp"

namespace dlock {

// ---- Lease ----

Lease::Lease(std::shared_ptr<detail::ClientState> client, std::shared_ptr<detail::LeaseState> state,
             std::uint32_t hold_count)
    : client_(std::move(client)), state_(std::move(state)), hold_count_(hold_count) {}

Lease::Lease(Lease&& other) noexcept
    : client_(std::move(other.client_)),
      state_(std::move(other.state_)),
      hold_count_(other.hold_count_),
      released_(other.released_) {
  other.released_ = true;
}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Lease old(std::move(*this));
    client_ = std::move(other.client_);
    state_ = std::move(other.state_);
    hold_count_ = other.hold_count_;
    released_ = other.released_;
    other.released_ = true;
  }
  return *this;
}

Lease::~Lease() {
  if (released_ || !state_) return;
  try {
    client_->release(*this);
  } catch (const LockLostError&) {
    // Already reported through the loss callbacks and the log.
  } catch (const std::exception& e) {
    if (!released_) {
      released_ = true;
      client_->drop_hold(state_);
    }
    core::log(LogLevel::warning, "could not release '" + state_->key + "': " + e.what() +
                                     "; it stays held until its TTL runs out");
  }
}

const std::string& Lease::key() const noexcept { return state_->key; }
const std::string& Lease::owner() const noexcept { return state_->spec.owner; }
std::uint64_t Lease::token() const noexcept { return state_->token; }
std::uint32_t Lease::hold_count() const noexcept { return hold_count_; }
std::chrono::steady_clock::time_point Lease::valid_until() const noexcept { return state_->valid_until_time(); }
std::chrono::milliseconds Lease::ttl() const noexcept { return state_->spec.ttl; }
bool Lease::lost() const noexcept { return state_ && state_->lost.load(); }
bool Lease::held() const noexcept { return state_ && !released_ && !state_->lost.load(); }
std::stop_token Lease::stop_token() const noexcept { return state_->stop.get_token(); }

void Lease::on_lost(std::function<void(const LossInfo&)> callback) {
  detail::ClientState::add_loss_callback(*state_, std::move(callback));
}

void Lease::renew(std::optional<std::chrono::milliseconds> ttl) {
  if (released_) throw std::logic_error("Lease::renew() after release()");
  client_->renew(*state_, ttl.value_or(state_->spec.ttl));
}

void Lease::release() {
  if (released_ || !state_) return;
  client_->release(*this);
}

void Lease::detach() noexcept {
  if (released_ || !state_) return;
  released_ = true;
  client_->drop_hold(state_);
}

Lease& Attempt::lease() {
  if (!lease_) throw std::logic_error("Attempt::lease() on a failed attempt: check it first");
  return *lease_;
}

// ---- Client ----

Client::Client(std::shared_ptr<detail::ClientState> state) : state_(std::move(state)) {}

Client Client::open(std::string_view url, const ClientOptions& options) {
  std::string chosen(url);
  if (chosen.empty()) {
    const char* env = std::getenv("DLOCK_URL");
    chosen = env && *env ? env : embedded_default_url();
  }
  const auto parsed = core::Url::parse(chosen);
  auto state = std::make_shared<detail::ClientState>(backends::open_backend(parsed), parsed.redacted(), options);
  state->watch();
  return Client(std::move(state));
}

Client Client::with_backend(std::shared_ptr<backend::Backend> backend, const ClientOptions& options) {
  if (!backend) throw InvalidArgument("Client::with_backend needs a backend");
  std::string url = std::string(backend->name()) + "://(custom)";
  auto state = std::make_shared<detail::ClientState>(std::move(backend), std::move(url), options);
  state->watch();
  return Client(std::move(state));
}

std::string Client::embedded_default_url() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state == '/') {
    return std::string("sqlite://") + state + "/dlock/locks.db";
  }
  if (const char* home = std::getenv("HOME"); home && *home == '/') {
    return std::string("sqlite://") + home + "/.local/state/dlock/locks.db";
  }
  return "sqlite:///var/tmp/dlock-" + std::to_string(::getuid()) + "/locks.db";
}

Mutex Client::mutex(std::string key, LockOptions options) const {
  state_->resolve(key, options);  // fail on bad input here, not at the first lock()
  auto mutex_state = std::make_shared<detail::MutexState>();
  mutex_state->client = state_;
  mutex_state->key = std::move(key);
  mutex_state->options = std::move(options);
  return Mutex(std::move(mutex_state));
}

SharedMutex Client::shared_mutex(std::string key, LockOptions options) const {
  options.mode = LockMode::exclusive;
  options.permits = 0;
  LockOptions shared = options;
  shared.mode = LockMode::shared;
  Mutex exclusive = mutex(key, std::move(options));
  return SharedMutex(std::move(exclusive), mutex(std::move(key), std::move(shared)));
}

Semaphore Client::semaphore(std::string name, std::uint32_t permits, LockOptions options) const {
  if (permits == 0) {
    throw InvalidArgument("a semaphore needs at least 1 permit", name);
  }
  options.mode = LockMode::shared;
  options.permits = permits;
  return Semaphore(mutex(std::move(name), std::move(options)), permits);
}

Lease Client::acquire(std::string_view key, const LockOptions& options) const {
  auto attempt = state_->acquire_until(key, options, std::chrono::steady_clock::time_point::max());
  return std::move(attempt.lease());
}

Attempt Client::try_acquire(std::string_view key, const LockOptions& options) const {
  return state_->acquire_until(key, options, std::chrono::steady_clock::now());
}

Attempt Client::try_acquire_for(std::string_view key, std::chrono::steady_clock::duration timeout,
                                const LockOptions& options) const {
  return state_->acquire_until(key, options, detail::deadline_after(timeout));
}

Attempt Client::try_acquire_until(std::string_view key, std::chrono::steady_clock::time_point deadline,
                                  const LockOptions& options) const {
  return state_->acquire_until(key, options, deadline);
}

std::uint32_t Client::release(std::string_view key, std::string_view owner, std::uint64_t token) const {
  core::validate_key(key, state_->backend->max_key_bytes());
  core::validate_owner(owner);
  const auto left = state_->backend->release({key, owner, token});
  if (!left) {
    throw LockLostError(std::string("'").append(key) + "' is not held by owner " + std::string(owner) + " with token " +
                            std::to_string(token) +
                            " (it expired, was force-released or was taken over; a force-released key kept closed "
                            "for this holder is open now)",
                        std::string(key), std::string(state_->backend->name()));
  }
  return *left;
}

std::vector<LockInfo> Client::inspect(std::string_view key) const {
  core::validate_key(key, state_->backend->max_key_bytes());
  return state_->backend->inspect(key);
}

ListPage Client::list(std::string_view prefix, std::string_view after, std::size_t limit) const {
  if (limit == 0) throw InvalidArgument("list limit must be at least 1");
  return state_->backend->list(prefix, after, limit);
}

std::vector<LockInfo> Client::force_release(std::string_view key, Eviction eviction,
                                            std::optional<std::uint64_t> token) const {
  core::validate_key(key, state_->backend->max_key_bytes());
  auto released = state_->backend->force_release(key, eviction, token);
  for (const LockInfo& holder : released) {
    core::log(LogLevel::info, "force-released '" + std::string(key) + "', " + detail::describe(holder));
  }
  return released;
}

std::size_t Client::collect_idle() const { return state_->backend->collect_idle(); }

Activity Client::activity() const { return state_->activity.totals(); }

std::optional<Activity> Client::store_activity() const {
  auto* ledger = state_->backend->activity();
  return ledger ? std::optional<Activity>(ledger->totals()) : std::nullopt;
}

void Client::flush_activity() const { state_->activity.flush(*state_->backend); }

std::chrono::nanoseconds Client::ping() const {
  const auto start = std::chrono::steady_clock::now();
  state_->backend->ping();
  return std::chrono::steady_clock::now() - start;
}

const std::string& Client::id() const noexcept { return state_->id; }
const std::string& Client::url() const noexcept { return state_->url; }
std::string_view Client::backend_name() const noexcept { return state_->backend->name(); }
backend::Capabilities Client::capabilities() const noexcept { return state_->backend->capabilities(); }
std::string Client::default_owner() const { return state_->default_owner(); }

}  // namespace dlock
