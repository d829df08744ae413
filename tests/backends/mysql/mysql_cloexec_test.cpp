// Descriptors mysql:// opens must not outlive an exec: a command `dlock run` starts (or any
// child a program using the library execs) would otherwise inherit an authenticated database
// session, and in session mode a daemonized grandchild would keep the server session, and so
// the lock, alive after dlock was killed.
//
// Needs DLOCK_MYSQL_URL (scripts/servers/mariadb.sh writes it); skips without it.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "dlock/client.hpp"
#include "support/mysql_rows.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::env;
using test::with_option;

// What each open descriptor of this process points at ("socket:[…]", "pipe:[…]", a path).
std::map<int, std::string> open_fds() {
  std::map<int, std::string> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == own) continue;
    char target[256] = {};
    const auto n = ::readlinkat(own, entry->d_name, target, sizeof target - 1);
    fds[fd] = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?";
  }
  ::closedir(dir);
  return fds;
}

// Takes and re-enters a lock and makes a waiter (a doorbell connection of its own) give up on
// it; the lock stays held, on its connection, while the caller looks at the descriptors.
Lease use(Client& client, Client& waiter, const std::string& key) {
  Lease held = client.acquire(key, {.ttl = 30s});
  client.acquire(key, {.ttl = 30s}).release();
  EXPECT_FALSE(waiter.try_acquire_for(key, 300ms, {.ttl = 30s}));
  EXPECT_FALSE(client.inspect(key).empty());
  return held;
}

TEST(MysqlCloseOnExec, BackendSocketsAreCloseOnExec) {
  const auto url = env("DLOCK_MYSQL_URL");
  if (!url) GTEST_SKIP() << "DLOCK_MYSQL_URL is not set: start a server with scripts/servers/mariadb.sh";
  const std::string table = "cloexec_" + std::to_string(::getpid()) + "_" + test::random_hex(8);
  const std::string row_url = with_option(with_option(*url, "mode=row"), "table=" + table);
  test::create_row_table(*url, table);
  test::insert_row(*url, table, "k");

  const auto before = open_fds();
  {
    const std::string lease_url = with_option(*url, "table=" + table + "_lease");
    const std::string session_url = with_option(with_option(*url, "table=" + table + "_session"), "mode=session");
    Client lease = Client::open(lease_url), lease_waiter = Client::open(lease_url);
    Client session = Client::open(session_url), session_waiter = Client::open(session_url);
    Client row = Client::open(row_url), row_waiter = Client::open(row_url);
    Lease held[] = {use(lease, lease_waiter, "k"), use(session, session_waiter, "k"), use(row, row_waiter, "k")};

    int checked = 0;
    for (const auto& [fd, target] : open_fds()) {
      if (before.count(fd) && before.at(fd) == target) continue;
      if (target.rfind("socket:", 0) != 0 && target.rfind("pipe:", 0) != 0) continue;
      ++checked;
      const int flags = ::fcntl(fd, F_GETFD);
      EXPECT_TRUE(flags >= 0 && (flags & FD_CLOEXEC)) << "fd " << fd << " (" << target << ") is inherited by exec";
    }
    EXPECT_GE(checked, 6) << "the clients opened fewer sockets than expected: is the test looking at the right thing?";
    for (Lease& lock : held) lock.release();
  }
  test::drop_tables(*url, {table});
  for (const char* mode : {"_lease", "_session"}) {
    const std::string lock_table = table + mode;
    test::drop_tables(*url, {lock_table, lock_table + "_seq", lock_table + "_activity", lock_table + "_session",
                             lock_table + "_epoch"});
  }
}

}  // namespace
}  // namespace dlock
