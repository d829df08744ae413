// The yardstick beside dlock's redis:// figures: the bare server primitives through hiredis,
// as dlock sends them. Prints one JSON line per primitive (p50 and p99 in µs):
//   - on one connection: a round trip (PING) and a trivial script (EVALSHA of `return 1`), the
//     floor under every acquire and release;
//   - between two connections, from the sending of an RPUSH to the return of the other's
//     blocked BLPOP: the wake-up a handoff adds to the release's round trip.
//
//   g++ -O2 -std=c++20 bench/redis_yardstick.cpp $(pkg-config --cflags --libs hiredis) -o yardstick
//   ./yardstick HOST PORT USER PASSWORD [ITERATIONS]
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

redisReply* run(redisContext* c, std::vector<std::string> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lengths.data()));
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    std::fprintf(stderr, "yardstick: %s: %s\n", args[0].c_str(), reply ? reply->str : c->errstr);
    std::exit(1);
  }
  return reply;
}

redisContext* connect(char** argv) {
  redisContext* c = redisConnect(argv[1], std::atoi(argv[2]));
  if (!c || c->err) {
    std::fprintf(stderr, "yardstick: connect: %s\n", c ? c->errstr : "out of memory");
    std::exit(1);
  }
  freeReplyObject(run(c, {"AUTH", argv[3], argv[4]}));
  return c;
}

void report(const char* what, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf("{\"backend\":\"redis\",\"yardstick\":\"%s\",\"n\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n", what,
              us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
}

double since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s HOST PORT USER PASSWORD [ITERATIONS]\n", argv[0]);
    return 64;
  }
  const int n = argc > 5 ? std::atoi(argv[5]) : 20000;
  redisContext* c = connect(argv);
  std::vector<double> samples;

  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    freeReplyObject(run(c, {"PING"}));
    samples.push_back(since(start));
  }
  report("PING", samples);

  redisReply* loaded = run(c, {"SCRIPT", "LOAD", "return 1"});
  const std::string sha(loaded->str, loaded->len);
  freeReplyObject(loaded);
  samples.clear();
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    freeReplyObject(run(c, {"EVALSHA", sha, "0"}));
    samples.push_back(since(start));
  }
  report("EVALSHA return 1", samples);

  // The waiter blocks in BLPOP; the pusher sends RPUSH once it is blocked (a sleep suffices:
  // the BLPOP is sent long before) and the waiter timestamps the wake.
  const int wakes = std::min(n, 5000);
  std::atomic<std::int64_t> sent_ns{0};
  std::vector<double> wake_us;
  std::thread waiter([&] {
    redisContext* w = connect(argv);
    for (int i = 0; i < wakes; ++i) {
      freeReplyObject(run(w, {"BLPOP", "dlock-yardstick:box", "5"}));
      const auto woke = Clock::now().time_since_epoch().count();
      wake_us.push_back(static_cast<double>(woke - sent_ns.load()) / 1000.0);
    }
    redisFree(w);
  });
  for (int i = 0; i < wakes; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    sent_ns = Clock::now().time_since_epoch().count();
    freeReplyObject(run(c, {"RPUSH", "dlock-yardstick:box", "x"}));
  }
  waiter.join();
  report("RPUSH to a blocked BLPOP (wake)", wake_us);
  redisFree(c);
}
