// The yardstick beside dlock's redis:// figures: the bare server primitives through hiredis,
// as dlock sends them. Prints one JSON line per primitive (p50 and p99 in µs):
//   - on one connection: a round trip (PING), a trivial script (EVALSHA of `return 1`), the
//     floor under every acquire and release, and with LUA_DIR (src/backends/redis/lua) three
//     uncontended cycles (an EVALSHA to acquire, then one to release, with the keys and
//     arguments dlock sends):
//       - empty scripts: the floor of any cycle made of two scripts;
//       - a lean lock: one hash per key, one read and one write per script, no reentrancy,
//         queue or index: about the least server work a fenced lease can take;
//       - dlock's own scripts: the floor under `dlock bench --workload uncontended`; what the
//         client adds is the difference.
//     All are sampled in alternating rounds, as the VM's wake-up latency drifts;
//   - between two connections, from the sending of an RPUSH to the return of the other's
//     blocked BLPOP: the wake-up a handoff adds to the release's round trip.
//
//   g++ -O2 -std=c++20 bench/redis_yardstick.cpp $(pkg-config --cflags --libs hiredis) -o yardstick
//   ./yardstick HOST PORT USER PASSWORD [ITERATIONS [LUA_DIR]]
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
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
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lengths.data()));
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
  std::printf("{\"backend\":\"redis\",\"yardstick\":\"%s\",\"n\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
              what, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
}

double since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// A script as dlock sends it: common.lua prepended (cmake/embed_lua.cmake).
std::string script(const std::string& dir, const std::string& name) {
  std::stringstream text;
  for (const auto& file : {dir + "/common.lua", dir + "/" + name + ".lua"}) {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "yardstick: cannot read %s\n", file.c_str());
      std::exit(1);
    }
    text << in.rdbuf() << '\n';
  }
  return text.str();
}

std::string load(redisContext* c, const std::string& source) {
  redisReply* loaded = run(c, {"SCRIPT", "LOAD", source});
  std::string sha(loaded->str, loaded->len);
  freeReplyObject(loaded);
  return sha;
}

// The lean lock of the yardstick: the hash KEYS[1] holds the owner (o), token (t), expiry by
// the server's clock (e) and the last token (s), which outlives the lease.
constexpr const char* kLeanAcquire = R"(
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 'o', 't', 'e', 's')
if v[1] and tonumber(v[3]) > now_ms then return {0, v[1], v[2]} end
local token = (tonumber(v[4]) or 0) + 1
redis.call('HSET', KEYS[1], 's', token, 'o', ARGV[2], 't', token, 'e', now_ms + tonumber(ARGV[3]))
return {1, token, 1})";
constexpr const char* kLeanRelease = R"(
local v = redis.call('HMGET', KEYS[1], 'o', 't')
if v[1] ~= ARGV[2] or v[2] ~= ARGV[3] then return -1 end
redis.call('HDEL', KEYS[1], 'o', 't', 'e')
return 0)";

// One uncontended cycle, with the keys and arguments RedisBackend sends, in a namespace of its
// own; `lock` names the cycle's lock key.
void cycle(redisContext* c, const std::string& lock, const std::string& acquire, const std::string& release) {
  const std::vector<std::string> keys{lock,         lock + ":seq",          lock + ":q",
                                      lock + ":qi", "dlock-yardstick:held", "dlock-yardstick:keys"};
  std::vector<std::string> command{"EVALSHA", acquire, "6"};
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), {"cycle", "yardstick", "30000", "0", "", "3000"});
  redisReply* got = run(c, command);
  const redisReply* t = got->element[1];
  const std::string token = t->type == REDIS_REPLY_INTEGER ? std::to_string(t->integer) : std::string(t->str, t->len);
  freeReplyObject(got);
  command = {"EVALSHA", release, "6"};
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), {"cycle", "yardstick", token});
  freeReplyObject(run(c, command));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s HOST PORT USER PASSWORD [ITERATIONS [LUA_DIR]]\n", argv[0]);
    return 64;
  }
  const int n = argc > 5 ? std::atoi(argv[5]) : 20000;
  redisContext* c = connect(argv);

  struct Primitive {
    const char* name;
    std::function<void()> op;
    std::vector<double> samples;
  };
  std::vector<Primitive> primitives;
  primitives.push_back({"PING", [c] { freeReplyObject(run(c, {"PING"})); }, {}});
  const std::string trivial = load(c, "return 1");
  primitives.push_back({"EVALSHA return 1",
                        [c, &trivial] {
                          freeReplyObject(run(c, {"EVALSHA", trivial, "0"}));
                        },
                        {}});
  std::string acquire, release, empty_acquire, empty_release, lean_acquire, lean_release;
  if (argc > 6) {
    empty_acquire = load(c, "return {1, 1, 1}");
    empty_release = load(c, "return 0");
    lean_acquire = load(c, kLeanAcquire);
    lean_release = load(c, kLeanRelease);
    acquire = load(c, script(argv[6], "acquire"));
    release = load(c, script(argv[6], "release"));
    primitives.push_back({"EVALSHA cycle of empty scripts (dlock's keys and args)",
                          [&] { cycle(c, "dlock-yardstick:{empty}", empty_acquire, empty_release); },
                          {}});
    primitives.push_back({"EVALSHA cycle of a lean lock (one read, one write each)",
                          [&] { cycle(c, "dlock-yardstick:{lean}", lean_acquire, lean_release); },
                          {}});
    primitives.push_back({"EVALSHA acquire + release (dlock's scripts)",
                          [&] { cycle(c, "dlock-yardstick:{cycle}", acquire, release); },
                          {}});
  }
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    for (auto& p : primitives) {
      for (int i = 0; i < n / kRounds; ++i) {
        const auto start = Clock::now();
        p.op();
        p.samples.push_back(since(start));
      }
    }
  }
  for (auto& p : primitives) report(p.name, p.samples);
  if (argc > 6) {
    freeReplyObject(
        run(c, {"DEL", "dlock-yardstick:{cycle}:seq", "dlock-yardstick:{lean}", "dlock-yardstick:held",
                "dlock-yardstick:keys"}));
  }

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
