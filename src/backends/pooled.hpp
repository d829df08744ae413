#pragma once

// A connection taken from a backend's pool, given back when this goes away. The pool drops a
// broken connection on its return; `Pool::give_back(std::unique_ptr<Connection>)` decides.

#include <memory>
#include <utility>

namespace dlock::backends {

template <class Pool, class Connection>
class Pooled {
 public:
  Pooled(Pool& pool, std::unique_ptr<Connection> connection) : pool_(&pool), connection_(std::move(connection)) {}
  Pooled(Pooled&& other) noexcept = default;
  Pooled& operator=(Pooled&& other) noexcept {
    if (this != &other) {
      give_back();
      pool_ = other.pool_;
      connection_ = std::move(other.connection_);
    }
    return *this;
  }
  Pooled(const Pooled&) = delete;
  Pooled& operator=(const Pooled&) = delete;
  ~Pooled() { give_back(); }

  Connection* operator->() const noexcept { return connection_.get(); }
  Connection& operator*() const noexcept { return *connection_; }

 private:
  void give_back() noexcept {
    if (connection_) pool_->give_back(std::move(connection_));
  }

  Pool* pool_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace dlock::backends
