// Beyond one mutex: readers beside readers and writers alone (a read-write lock), at most N
// holders of a name (a semaphore), and two keys taken as one lock. Threads stand in for the
// processes and hosts that would share them in production; every hold is the store's.
#include <dlock/dlock.hpp>

#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

int main() {
  auto client = dlock::Client::open();  // $DLOCK_URL, else the embedded default

  // Readers share the catalog; its rebuild waits for them and keeps new readers out meanwhile.
  auto catalog = client.shared_mutex("catalog");
  std::vector<std::jthread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&catalog] {
      std::shared_lock reading(catalog);
      std::printf("reading the catalog (token %llu)\n",
                  static_cast<unsigned long long>(catalog.shared_lease()->token()));
    });
  }
  readers.clear();  // joins them
  {
    std::unique_lock writing(catalog);
    // Above every token a reader or writer had before: a store that keeps the highest token it
    // has seen refuses a late write from any of them.
    std::printf("rebuilding the catalog (token %llu)\n",
                static_cast<unsigned long long>(catalog.lease()->token()));
  }

  // At most two exports at once, each permit with its own lease and token.
  std::vector<std::jthread> exporters;
  for (int i = 0; i < 4; ++i) {
    exporters.emplace_back([&client, i] {
      auto exports = client.semaphore("exports", 2);  // every client must name the same count
      std::unique_lock permit(exports);
      std::printf("export %d under permit token %llu\n", i,
                  static_cast<unsigned long long>(exports.lease()->token()));
    });
  }
  exporters.clear();

  // A transfer locks both accounts, in one order whatever order they are named in, so two
  // transfers in opposite directions never deadlock; each key has its own token.
  auto accounts = client.multi_mutex({"account/7", "account/3"});
  std::unique_lock both(accounts);
  std::printf("moving money from account/7 (token %llu) to account/3 (token %llu)\n",
              static_cast<unsigned long long>(accounts.lease()->token("account/7")),
              static_cast<unsigned long long>(accounts.lease()->token("account/3")));
}
