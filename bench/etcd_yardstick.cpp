// The yardstick for etcd (issue 19): the bare server primitives a lock on etcd is built from
// (the recipe of etcd's own concurrency.Mutex, with release compared on the create revision),
// through gRPC's synchronous stubs and the proto of the coming backend
// (src/backends/etcd/proto/rpc.proto). Prints one JSON line per primitive:
//   - on one connection, after a warm-up, sampled in alternating rounds (the VM's wake-up
//     latency drifts):
//       - a Range of one key, linearizable (etcd's default: a read index from the leader
//         before the answer) and serializable (the member's own state), no write;
//       - a Put of one key: one durable write (the raft log fsynced before the answer);
//       - a lock cycle's server work: a Txn that puts the waiter's key under a lease if it does
//         not exist (compare create_revision = 0) and ranges over the lock's prefix for the
//         first created key (the holder), then a Txn that deletes the key if its create
//         revision is still the one put (a release that cannot touch a newer holder); the two
//         Txns are also reported on their own;
//       - a LeaseGrant and a LeaseRevoke (a session's start and end, two writes);
//   - between two clients on two connections, a Watch stream on the second client watching
//     one key: from the sending of a DeleteRange on the first to the second's stream reading
//     the DELETE event (the wake-up a handoff adds), and to that client's Range of the key
//     answering after the event (a waiter's one read to see that it is first), and the same
//     with the delete sent after 1 ms of idle, as the contended workload's holder sends its
//     release (a VM's idle vCPUs wake slowly). The key's Put before each delete is not timed;
//     its PUT event is read before the delete is sent.
//
//   protoc -I src/backends/etcd/proto --cpp_out=OUT --grpc_out=OUT
//       --plugin=protoc-gen-grpc=$(command -v grpc_cpp_plugin) rpc.proto
//   g++ -O2 -std=c++20 -IOUT bench/etcd_yardstick.cpp OUT/rpc.pb.cc OUT/rpc.grpc.pb.cc
//       $(pkg-config --cflags --libs grpc++ protobuf) -o yardstick
//   ./yardstick HOST:PORT [ITERATIONS]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpc.grpc.pb.h"

namespace {

namespace pb = etcdserverpb;
using Clock = std::chrono::steady_clock;

constexpr const char* kRangeKey = "dlock-yardstick/range";
constexpr const char* kPutKey = "dlock-yardstick/put";
constexpr const char* kCyclePrefix = "dlock-yardstick/cycle/";
constexpr const char* kCyclePrefixEnd = "dlock-yardstick/cycle0";  // '/' + 1: the prefix's range end
constexpr const char* kWatchedKey = "dlock-yardstick/watched";

void check(const grpc::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "yardstick: %s: %s (gRPC code %d)\n", what, status.error_message().c_str(),
                 static_cast<int>(status.error_code()));
    std::exit(1);
  }
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "yardstick: %s\n", what);
  std::exit(1);
}

double us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void report(const char* name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"impl\":\"bare\",\"backend\":\"etcd\",\"primitive\":\"%s\",\"ops\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
      name, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
  std::fflush(stdout);
}

// A client of its own: a channel that shares no TCP connection with another (gRPC would
// otherwise reuse one subchannel for channels with equal arguments), connected before use.
std::shared_ptr<grpc::Channel> connect(const std::string& target, int client) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("dlock.yardstick.client", client);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
    fail("no connection within 10 s");
  return channel;
}

struct Client {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;

  Client(const std::string& target, int id)
      : channel(connect(target, id)), kv(pb::KV::NewStub(channel)), lease(pb::Lease::NewStub(channel)) {}

  pb::RangeResponse range(const std::string& key, bool serializable = false) {
    pb::RangeRequest request;
    request.set_key(key);
    request.set_serializable(serializable);
    pb::RangeResponse response;
    grpc::ClientContext context;
    check(kv->Range(&context, request, &response), "Range");
    return response;
  }
  std::int64_t put(const std::string& key, std::int64_t lease_id = 0) {
    pb::PutRequest request;
    request.set_key(key);
    request.set_value("x");
    request.set_lease(lease_id);
    pb::PutResponse response;
    grpc::ClientContext context;
    check(kv->Put(&context, request, &response), "Put");
    return response.header().revision();
  }
  void remove(const std::string& key) {
    pb::DeleteRangeRequest request;
    request.set_key(key);
    pb::DeleteRangeResponse response;
    grpc::ClientContext context;
    check(kv->DeleteRange(&context, request, &response), "DeleteRange");
    if (response.deleted() != 1) fail("DeleteRange deleted no key");
  }
  pb::TxnResponse txn(const pb::TxnRequest& request) {
    pb::TxnResponse response;
    grpc::ClientContext context;
    check(kv->Txn(&context, request, &response), "Txn");
    return response;
  }
  std::int64_t grant(std::int64_t ttl_s) {
    pb::LeaseGrantRequest request;
    request.set_ttl(ttl_s);
    pb::LeaseGrantResponse response;
    grpc::ClientContext context;
    check(lease->LeaseGrant(&context, request, &response), "LeaseGrant");
    if (!response.error().empty()) fail(response.error().c_str());
    return response.id();
  }
  void revoke(std::int64_t id) {
    pb::LeaseRevokeRequest request;
    request.set_id(id);
    pb::LeaseRevokeResponse response;
    grpc::ClientContext context;
    check(lease->LeaseRevoke(&context, request, &response), "LeaseRevoke");
  }
};

// The acquire of etcd's concurrency.Mutex: put `key` under `lease` unless it exists, and read
// the prefix's first created key. The create revision of `key` (the txn's revision).
std::int64_t take(Client& client, const std::string& key, std::int64_t lease) {
  pb::TxnRequest request;
  auto* absent = request.add_compare();
  absent->set_key(key);
  absent->set_target(pb::Compare::CREATE);
  absent->set_result(pb::Compare::EQUAL);
  absent->set_create_revision(0);
  auto* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value("");
  put->set_lease(lease);
  auto* first = request.add_success()->mutable_request_range();
  first->set_key(kCyclePrefix);
  first->set_range_end(kCyclePrefixEnd);
  first->set_sort_target(pb::RangeRequest::CREATE);
  first->set_sort_order(pb::RangeRequest::ASCEND);
  first->set_limit(1);
  const auto response = client.txn(request);
  if (!response.succeeded()) fail("the cycle's key existed");
  const auto& holder = response.responses(1).response_range();
  if (holder.kvs_size() != 1 || holder.kvs(0).key() != key) fail("the cycle's key is not the first created");
  return response.header().revision();
}

// The release: delete `key` if its create revision is still `revision`.
void give_back(Client& client, const std::string& key, std::int64_t revision) {
  pb::TxnRequest request;
  auto* same = request.add_compare();
  same->set_key(key);
  same->set_target(pb::Compare::CREATE);
  same->set_result(pb::Compare::EQUAL);
  same->set_create_revision(revision);
  request.add_success()->mutable_request_delete_range()->set_key(key);
  if (!client.txn(request).succeeded()) fail("the cycle's key was not the one put");
}

// The second client's Watch stream on kWatchedKey, read on a thread of its own. For each event
// it keeps the type, revision and the time its response was read; after a DELETE event, when
// asked to, it ranges over the key on its own client first (the waiter's read) and keeps the
// time that read answered too.
class Watcher {
 public:
  explicit Watcher(Client& client) : client_(client), watch_(pb::Watch::NewStub(client.channel)) {
    stream_ = watch_->Watch(&context_);
    pb::WatchRequest request;
    request.mutable_create_request()->set_key(kWatchedKey);
    if (!stream_->Write(request)) fail("Watch: the create request was not sent");
    pb::WatchResponse response;
    if (!stream_->Read(&response) || !response.created()) fail("Watch: not created");
    thread_ = std::thread([this] { read(); });
  }
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;
  ~Watcher() {
    context_.TryCancel();
    thread_.join();
  }

  // Whether the next DELETE event is followed by the read.
  void read_after_delete(bool yes) {
    std::lock_guard lock(mu_);
    read_after_delete_ = yes;
  }
  // Waits for the event of `type` at `revision`; when its response was read (and with the
  // read, when the read answered).
  Clock::time_point wait(pb::Event::EventType type, std::int64_t revision) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10),
                      [&] { return last_type_ == type && last_revision_ >= revision; }))
      fail("Watch: the event did not come within 10 s");
    if (last_revision_ != revision) fail("Watch: an unexpected revision");
    return last_at_;
  }

 private:
  void read() {
    pb::WatchResponse response;
    while (stream_->Read(&response)) {
      const auto at = Clock::now();
      if (response.canceled()) fail("Watch: canceled by the server");
      for (const auto& event : response.events()) {
        bool then_read;
        {
          std::lock_guard lock(mu_);
          then_read = read_after_delete_ && event.type() == pb::Event::DELETE;
        }
        auto done = at;
        if (then_read) {
          client_.range(kWatchedKey);
          done = Clock::now();
        }
        std::lock_guard lock(mu_);
        last_type_ = event.type();
        last_revision_ = event.kv().mod_revision();
        last_at_ = done;
        cv_.notify_all();
      }
    }
    stream_->Finish();  // cancelled by the destructor
  }

  Client& client_;
  std::unique_ptr<pb::Watch::Stub> watch_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool read_after_delete_ = false;
  pb::Event::EventType last_type_ = pb::Event::PUT;
  std::int64_t last_revision_ = 0;
  Clock::time_point last_at_;
};

// One wake-up sample: the first client puts the watched key (not timed) and the watcher sees
// it; after `idle` (the contended workload's hold, during which both clients wait), the µs from
// the sending of its DeleteRange to the watcher's DELETE (or read).
double wake_up(Client& deleter, Watcher& watcher, std::chrono::microseconds idle = {}) {
  const auto put = deleter.put(kWatchedKey);
  watcher.wait(pb::Event::PUT, put);
  if (idle.count() > 0) std::this_thread::sleep_for(idle);
  const auto sent = Clock::now();
  pb::DeleteRangeRequest request;
  request.set_key(kWatchedKey);
  pb::DeleteRangeResponse response;
  grpc::ClientContext context;
  check(deleter.kv->DeleteRange(&context, request, &response), "DeleteRange");
  return us_between(sent, watcher.wait(pb::Event::DELETE, response.header().revision()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT [ITERATIONS]\n", argv[0]);
    return 64;
  }
  const std::string target = argv[1];
  const int n = std::max(100, argc > 2 ? std::atoi(argv[2]) : 5000);
  Client a(target, 1);
  a.put(kRangeKey);
  const std::int64_t session = a.grant(600);  // outlives the run
  char id[32];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(session));
  const std::string cycle_key = std::string(kCyclePrefix) + id;

  struct Primitive {
    const char* name;
    std::function<void()> op;
    std::vector<double> samples;
  };
  std::vector<double> take_us, give_back_us;
  std::vector<Primitive> primitives;
  primitives.push_back({"Range, one key (linearizable)", [&] { a.range(kRangeKey); }, {}});
  primitives.push_back({"Range, one key (serializable)", [&] { a.range(kRangeKey, true); }, {}});
  primitives.push_back({"Put, one key (a durable write)", [&] { a.put(kPutKey); }, {}});
  primitives.push_back({"Txn put + range, then Txn delete (cycle)",
                        [&] {
                          const auto t0 = Clock::now();
                          const auto revision = take(a, cycle_key, session);
                          const auto t1 = Clock::now();
                          give_back(a, cycle_key, revision);
                          const auto t2 = Clock::now();
                          take_us.push_back(us_between(t0, t1));
                          give_back_us.push_back(us_between(t1, t2));
                        },
                        {}});
  primitives.push_back({"LeaseGrant + LeaseRevoke", [&] { a.revoke(a.grant(60)); }, {}});

  constexpr int kRounds = 20;
  const int warm_up = std::min(n / 10, 500);
  for (auto& p : primitives) {
    for (int i = 0; i < warm_up; ++i) p.op();
  }
  take_us.clear();
  give_back_us.clear();
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
  report("  Txn: put under a lease if absent + range of the prefix, first created (in the cycle)", take_us);
  report("  Txn: delete if the create revision is the one put (in the cycle)", give_back_us);

  // The wake-ups, alternating with and without the watcher's read. Each costs two writes
  // (the put and the delete): a fifth of the iterations.
  {
    Client b(target, 2);
    Watcher watcher(b);
    const int wakes = std::max(kRounds, n / 5);
    for (int i = 0; i < warm_up; ++i) wake_up(a, watcher);
    std::vector<double> wake_us, wake_read_us, idle_wake_read_us;
    for (int round = 0; round < kRounds; ++round) {
      watcher.read_after_delete(false);
      for (int i = 0; i < wakes / kRounds; ++i) wake_us.push_back(wake_up(a, watcher));
      watcher.read_after_delete(true);
      for (int i = 0; i < wakes / kRounds; ++i) wake_read_us.push_back(wake_up(a, watcher));
      for (int i = 0; i < wakes / kRounds; ++i) {
        idle_wake_read_us.push_back(wake_up(a, watcher, std::chrono::milliseconds(1)));
      }
    }
    report("DeleteRange sent to the DELETE event read by another client's Watch stream", wake_us);
    report("DeleteRange sent to the DELETE event plus one Range on the watching client", wake_read_us);
    // A VM's idle vCPUs wake slowly: the contended workload's handoff comes after its 1 ms hold.
    report("the same, the DeleteRange sent after 1 ms of idle (the contended workload's hold)", idle_wake_read_us);
  }
  a.revoke(session);
  pb::DeleteRangeRequest tidy;
  tidy.set_key("dlock-yardstick/");
  tidy.set_range_end("dlock-yardstick0");
  pb::DeleteRangeResponse tidied;
  grpc::ClientContext context;
  check(a.kv->DeleteRange(&context, tidy, &tidied), "DeleteRange (tidy)");
}
