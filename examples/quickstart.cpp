#include <dlock/dlock.hpp>

#include <cstdio>
#include <mutex>

int main() {
  auto client = dlock::Client::open();     // $DLOCK_URL, else the embedded default
  auto order = client.mutex("orders/42");  // 30 s lease, renewed in the background
  std::unique_lock guard(order);           // blocks; waiters are woken, not polling
  std::printf("holding orders/42 with fencing token %llu\n",
              static_cast<unsigned long long>(order.lease()->token()));
  // Work here; stop early if order.lease()->stop_token() fires (lost, or about to expire).
}  // released here
