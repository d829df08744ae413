// The yardstick beside dlock's zookeeper:// figures: the server's floors through the bare
// ZooKeeper C client (libzookeeper_mt, synchronous calls), with the node types and paths a
// lock recipe uses. Prints one JSON line per primitive (p50, p90 and p99 in µs):
//   - on one session, after a warm-up (the server's JIT), sampled in alternating rounds (the
//     VM's wake-up latency drifts):
//       - `exists` of a node: a round trip, no write (the `ping` workload's primitive);
//       - a lock cycle's server work: create of an EPHEMERAL_SEQUENTIAL child under a parent,
//         getChildren of the parent, delete of that child (two writes, each committed to the
//         transaction log before the reply); the three calls are also reported on their own;
//       - a several-key lock's floor beside one key's: a create and a delete of one node, and a
//         transaction (`zoo_multi`) creating a node under each of 4 parents, then one deleting
//         the 4: the writes a set of 4 keys cannot do without, in as many round trips;
//   - between two sessions in two processes, B (the holder) holding a node and A watching it
//     with an exists-watch; B holds for the workload's hold (1 ms, as `dlock bench`
//     contended) before it deletes, so the server and both clients wake from idle as in a
//     handoff under that workload:
//       - delete-to-watcher: from just before B's delete call to A's watcher firing (on A's
//         completion thread): the wake-up a handoff adds; also back to back (no hold);
//       - delete-to-watcher plus one read: the same, until a thread of A, woken by the watcher,
//         has the parent's children back (a waiter checking that it is now first);
//       - that again while B creates a node right after its delete, as a contended holder
//         queues again.
//
//   g++ -O2 -std=c++20 bench/zookeeper_yardstick.cpp -lzookeeper_mt -o yardstick
//   ./yardstick HOST PORT [ITERATIONS [HOLD_MS]]

// zookeeper.h declares the synchronous calls only under THREADED (libzookeeper_mt's API).
#ifndef THREADED
#define THREADED
#endif
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kRoot = "/dlock-yardstick";
constexpr const char* kCycleParent = "/dlock-yardstick/cycle";
constexpr const char* kHandoffParent = "/dlock-yardstick/handoff";
constexpr const char* kSetParents[] = {"/dlock-yardstick/set0", "/dlock-yardstick/set1", "/dlock-yardstick/set2",
                                       "/dlock-yardstick/set3"};

void check(int rc, const char* what) {
  if (rc != ZOK) {
    std::fprintf(stderr, "yardstick: %s: %s\n", what, zerror(rc));
    std::exit(1);
  }
}

double us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void report(const char* what, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"backend\":\"zookeeper\",\"yardstick\":\"%s\",\"n\":%zu,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f}\n",
      what, us.size(), us[us.size() / 2], us[us.size() * 90 / 100], us[us.size() * 99 / 100]);
  std::fflush(stdout);
}

// A session, connected: zookeeper_init returns at once and the session event arrives on the
// completion thread.
struct Session {
  std::mutex mu;
  std::condition_variable cv;
  bool connected = false;
  zhandle_t* zh = nullptr;

  static void on_session(zhandle_t*, int type, int state, const char*, void* context) {
    auto* self = static_cast<Session*>(context);
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
      std::lock_guard lock(self->mu);
      self->connected = true;
      self->cv.notify_all();
    } else if (type == ZOO_SESSION_EVENT && state == ZOO_EXPIRED_SESSION_STATE) {
      std::fprintf(stderr, "yardstick: session expired\n");
      std::_Exit(1);
    }
  }

  explicit Session(const std::string& hosts) {
    zh = zookeeper_init(hosts.c_str(), on_session, 10000, nullptr, this, 0);
    if (!zh) {
      std::perror("yardstick: zookeeper_init");
      std::exit(1);
    }
    // As dlock does: else the client resolves the host list each time it polls its socket.
    zoo_set_servers_resolution_delay(zh, 10'000);
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(15), [this] { return connected; })) {
      std::fprintf(stderr, "yardstick: no session with %s within 15 s\n", hosts.c_str());
      std::exit(1);
    }
  }
  ~Session() { zookeeper_close(zh); }
};

void create_persistent(zhandle_t* zh, const char* path) {
  const int rc = zoo_create(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
  if (rc != ZNODEEXISTS) check(rc, path);
}

// B's node: A's exists-watch fires once, on its deletion; the watcher stamps the time and
// wakes whoever waits (the main thread, or A's reader thread).
struct Watch {
  std::mutex mu;
  std::condition_variable cv;
  bool fired = false;
  Clock::time_point fired_at;

  static void on_event(zhandle_t*, int type, int, const char*, void* context) {
    const auto now = Clock::now();
    auto* self = static_cast<Watch*>(context);
    if (type != ZOO_DELETED_EVENT) return;  // session events come to this watcher too
    std::lock_guard lock(self->mu);
    self->fired = true;
    self->fired_at = now;
    self->cv.notify_all();
  }

  void wait() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [this] { return fired; })) {
      std::fprintf(stderr, "yardstick: the watch did not fire within 10 s\n");
      std::exit(1);
    }
  }
};

// A waiter thread of session A: woken by the watcher, it reads the parent's children (the one
// read a waiter makes to see that it is first) and stamps the time that read returned.
struct Reader {
  zhandle_t* zh;
  std::mutex mu;
  std::condition_variable cv;
  Watch* watch = nullptr;  // the watch of the current sample, set by the main thread
  bool done = false, quit = false;
  Clock::time_point done_at;
  std::thread thread;

  explicit Reader(zhandle_t* a) : zh(a) {
    thread = std::thread([this] {
      for (;;) {
        Watch* w;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [this] { return watch != nullptr || quit; });
          if (quit) return;
          w = watch;
        }
        w->wait();
        String_vector children{};
        check(zoo_get_children(zh, kHandoffParent, 0, &children), "getChildren (reader)");
        const auto now = Clock::now();
        deallocate_String_vector(&children);
        std::lock_guard lock(mu);
        watch = nullptr;
        done = true;
        done_at = now;
        cv.notify_all();
      }
    });
  }
  ~Reader() {
    {
      std::lock_guard lock(mu);
      quit = true;
      cv.notify_all();
    }
    thread.join();
  }
  void arm(Watch* w) {
    std::lock_guard lock(mu);
    done = false;
    watch = w;
    cv.notify_all();
  }
  Clock::time_point wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return done; });
    return done_at;
  }
};

// B, the holder, as in `dlock bench`: a process of its own with its own session, which makes a
// node, holds it for the workload's hold, deletes it and (as a contended holder queues again)
// may create another right after. Forked before A's session starts its threads; driven over
// pipes outside the timed span.
class Holder {
 public:
  Holder(const std::string& hosts, std::chrono::microseconds hold) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) {
      std::perror("yardstick: pipe");
      std::exit(1);
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      std::perror("yardstick: fork");
      std::exit(1);
    }
    if (pid_ == 0) {
      ::close(down[1]);
      ::close(up[0]);
      serve(hosts, hold, down[0], up[1]);
      std::_Exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    to_ = down[1];
    from_ = up[0];
  }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  ~Holder() {
    ::close(to_);  // the holder ends on end of file
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }

  // Makes B's node; its path.
  std::string create() {
    send('c');
    char path[256];
    receive(path, sizeof path);
    return path;
  }
  // B holds, then deletes its node (and with `requeue` creates another at once); when the
  // delete call began.
  Clock::time_point release(bool requeue) {
    send(requeue ? 'r' : 'd');
    std::int64_t start_ns = 0;
    receive(&start_ns, sizeof start_ns);
    return Clock::time_point(std::chrono::nanoseconds(start_ns));
  }
  // Deletes the node a requeue made.
  void tidy() {
    send('x');
    char ok;
    receive(&ok, 1);
  }

 private:
  static void serve(const std::string& hosts, std::chrono::microseconds hold, int in, int out) {
    Session b(hosts);
    char path[256] = {}, again[256] = {};
    for (char command; ::read(in, &command, 1) == 1;) {
      if (command == 'c') {
        check(zoo_create(b.zh, "/dlock-yardstick/handoff/b-", "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                         path, sizeof path),
              "create (B)");
        write_all(out, path, sizeof path);
      } else if (command == 'd' || command == 'r') {
        if (hold.count() > 0) std::this_thread::sleep_for(hold);
        const auto start = Clock::now();
        check(zoo_delete(b.zh, path, -1), "delete (B)");
        if (command == 'r') {
          check(zoo_create(b.zh, "/dlock-yardstick/handoff/b-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                           ZOO_EPHEMERAL_SEQUENTIAL, again, sizeof again),
                "create again (B)");
        }
        const std::int64_t start_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
        write_all(out, &start_ns, sizeof start_ns);
      } else if (command == 'x') {
        check(zoo_delete(b.zh, again, -1), "delete again (B)");
        write_all(out, "k", 1);
      }
    }
  }
  static void write_all(int fd, const void* data, std::size_t size) {
    if (::write(fd, data, size) != static_cast<ssize_t>(size)) std::_Exit(1);  // pipe writes this small are whole
  }
  void send(char command) const {
    if (::write(to_, &command, 1) != 1) {
      std::fprintf(stderr, "yardstick: the holder process is gone\n");
      std::exit(1);
    }
  }
  void receive(void* data, std::size_t size) const {
    auto* p = static_cast<char*>(data);
    while (size > 0) {
      const ssize_t n = ::read(from_, p, size);
      if (n <= 0) {
        std::fprintf(stderr, "yardstick: the holder process is gone\n");
        std::exit(1);
      }
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

// One handoff sample: B creates a child of the handoff parent, A sets an exists-watch on it,
// B holds it and deletes it. Returns µs from just before B's delete call to the watcher
// firing, or with a reader, to the reader's getChildren returning. With `requeue`, B creates a
// child again right after its delete, as a contended holder queues for the key again: a
// standalone server passes a read on only after the writes before it are on disk, so A's read
// may wait for that fsync.
double handoff(zhandle_t* a, Holder& b, Reader* reader, bool requeue = false) {
  const std::string path = b.create();
  Watch watch;
  Stat stat;
  check(zoo_wexists(a, path.c_str(), Watch::on_event, &watch, &stat), "exists-watch (A)");
  if (reader) reader->arm(&watch);
  const auto start = b.release(requeue);
  double sample = 0;
  if (reader) {
    sample = us_between(start, reader->wait());
  } else {
    watch.wait();
    sample = us_between(start, watch.fired_at);
  }
  if (requeue) b.tidy();
  return sample;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s HOST PORT [ITERATIONS [HOLD_MS]]\n", argv[0]);
    return 64;
  }
  const std::string hosts = std::string(argv[1]) + ":" + argv[2];
  const int n = argc > 3 ? std::atoi(argv[3]) : 20000;
  const std::chrono::milliseconds hold(argc > 4 ? std::atoi(argv[4]) : 1);
  zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
  // Before any session's threads start.
  Holder holding(hosts, hold);
  Holder back_to_back(hosts, std::chrono::microseconds(0));

  Session a(hosts);
  zhandle_t* zh = a.zh;
  create_persistent(zh, kRoot);
  create_persistent(zh, kCycleParent);
  create_persistent(zh, kHandoffParent);
  for (const char* parent : kSetParents) create_persistent(zh, parent);

  struct Primitive {
    const char* name;
    std::function<void()> op;
    std::vector<double> samples;
  };
  std::vector<double> create_us, children_us, delete_us;
  std::vector<Primitive> primitives;
  primitives.push_back({"exists",
                        [zh] {
                          Stat stat;
                          check(zoo_exists(zh, kCycleParent, 0, &stat), "exists");
                        },
                        {}});
  primitives.push_back({"create EPHEMERAL_SEQUENTIAL + getChildren + delete (cycle)",
                        [&] {
                          char path[256];
                          Stat stat;
                          String_vector children{};
                          const auto t0 = Clock::now();
                          check(zoo_create2(zh, "/dlock-yardstick/cycle/n-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                                            ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path, &stat),
                                "create");
                          const auto t1 = Clock::now();
                          check(zoo_get_children(zh, kCycleParent, 0, &children), "getChildren");
                          const auto t2 = Clock::now();
                          deallocate_String_vector(&children);
                          check(zoo_delete(zh, path, -1), "delete");
                          const auto t3 = Clock::now();
                          create_us.push_back(us_between(t0, t1));
                          children_us.push_back(us_between(t1, t2));
                          delete_us.push_back(us_between(t2, t3));
                        },
                        {}});
  primitives.push_back({"create EPHEMERAL_SEQUENTIAL + delete, 1 node (cycle)",
                        [zh] {
                          char path[256];
                          check(zoo_create(zh, "/dlock-yardstick/set0/n-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                                           ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path),
                                "create");
                          check(zoo_delete(zh, path, -1), "delete");
                        },
                        {}});
  primitives.push_back({"multi create EPHEMERAL_SEQUENTIAL under 4 parents + multi delete of the 4 (cycle)",
                        [zh] {
                          constexpr int kKeys = std::size(kSetParents);
                          char prefixes[kKeys][64], paths[kKeys][256];
                          zoo_op_t ops[kKeys];
                          zoo_op_result_t results[kKeys];
                          for (int i = 0; i < kKeys; ++i) {
                            std::snprintf(prefixes[i], sizeof prefixes[i], "%s/n-", kSetParents[i]);
                            zoo_create_op_init(&ops[i], prefixes[i], "", 0, &ZOO_OPEN_ACL_UNSAFE,
                                               ZOO_EPHEMERAL_SEQUENTIAL, paths[i], sizeof paths[i]);
                          }
                          check(zoo_multi(zh, kKeys, ops, results), "multi create");
                          for (int i = 0; i < kKeys; ++i) zoo_delete_op_init(&ops[i], paths[i], -1);
                          check(zoo_multi(zh, kKeys, ops, results), "multi delete");
                        },
                        {}});
  // Warm-up, not sampled: the server's JIT compiles its request path in the first thousands
  // of requests.
  const int warm_up = std::min(n, 2000);
  for (auto& p : primitives) {
    for (int i = 0; i < warm_up; ++i) p.op();
  }
  create_us.clear();
  children_us.clear();
  delete_us.clear();
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    for (auto& p : primitives) {
      for (int i = 0; i < n / kRounds; ++i) {
        const auto start = Clock::now();
        p.op();
        p.samples.push_back(us_between(start, Clock::now()));
      }
    }
  }
  for (auto& p : primitives) report(p.name, p.samples);
  report("  create EPHEMERAL_SEQUENTIAL (in the cycle)", create_us);
  report("  getChildren, 1 child (in the cycle)", children_us);
  report("  delete (in the cycle)", delete_us);

  // The handoff floors, in alternating rounds too: after the workload's hold, as in `dlock
  // bench`, where the server and both clients idle while the holder holds (waking from that
  // idle takes longer than from the last request), and back to back for comparison.
  const int wakes = std::max(kRounds, std::min(n, 5000));
  std::vector<double> eager_wake_us, wake_us, wake_read_us, wake_read_requeue_us;
  {
    Reader reader(zh);
    for (int i = 0; i < std::min(wakes, 500); ++i) handoff(zh, back_to_back, &reader);
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < wakes / kRounds; ++i) eager_wake_us.push_back(handoff(zh, back_to_back, nullptr));
      for (int i = 0; i < wakes / kRounds; ++i) wake_us.push_back(handoff(zh, holding, nullptr));
      for (int i = 0; i < wakes / kRounds; ++i) wake_read_us.push_back(handoff(zh, holding, &reader));
      for (int i = 0; i < wakes / kRounds; ++i) wake_read_requeue_us.push_back(handoff(zh, holding, &reader, true));
    }
  }
  const std::string after = ", after a " + std::to_string(hold.count()) + " ms hold";
  report("delete to exists-watcher (wake), back to back", eager_wake_us);
  report(("delete to exists-watcher (wake)" + after).c_str(), wake_us);
  report(("delete to exists-watcher plus one getChildren" + after).c_str(), wake_read_us);
  report(("delete to exists-watcher plus one getChildren, the holder queuing again" + after).c_str(),
         wake_read_requeue_us);

  zoo_delete(zh, kCycleParent, -1);
  zoo_delete(zh, kHandoffParent, -1);
  for (const char* parent : kSetParents) zoo_delete(zh, parent, -1);
  zoo_delete(zh, kRoot, -1);
}
