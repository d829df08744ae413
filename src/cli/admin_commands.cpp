// `dlock acquire`, `release`, `status`, `list`, `force-release`: one backend call each (list
// pages), plain text for people or one JSON object per invocation with --json.

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/acquire_keeper.hpp"
#include "cli/audit_log.hpp"
#include "cli/commands.hpp"
#include "cli/store_probe.hpp"
#include "core/owner.hpp"
#if DLOCK_WITH_MYSQL
#include "backends/mysql/mysql_backend.hpp"
#endif
#if DLOCK_WITH_POSTGRES
#include "backends/postgres/postgres_backend.hpp"
#endif

namespace dlock::cli {
namespace {

using nlohmann::json;

// `release` of a hold the owner does not have (docs/cli.md).
constexpr int kExitNotHeld = 1;

void print(const json& value) {
  // Keys written by other tools may not be UTF-8; JSON output must stay valid anyway.
  std::puts(value.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

void say(const std::string& message) { std::fprintf(stderr, "dlock: %s\n", message.c_str()); }

// ---- acquire ----

// A local:// lock lives inside the process that took it, where no other command can see or
// release it: refused, before any lock is taken. A store whose locks end with their process
// (or connection) but span processes (mysql:// session mode, zookeeper://) gets a keeper
// process instead (acquire_keeper.hpp).
void refuse_a_store_inside_one_process(const Client& client) {
  if (client.capabilities().spans_processes) return;
  const std::string name(client.backend_name());
  throw ConfigurationError(
      fmt::format("dlock acquire cannot leave a lock held on this {}:// store: its locks live inside the "
                  "process that took them, where no other command can see or release them. Use `dlock run "
                  "KEY -- COMMAND`",
                  name),
      name);
}

int acquire(const GlobalOptions& global, const AcquireOptions& options) {
  // A store that needs a keeper is asked in a child process: the keeper is forked from this
  // one, which must not have opened a client (store_probe.hpp).
  if (const auto store = store_traits_in_child(global);
      store && store->capabilities.spans_processes && !store->capabilities.holds_outlive_the_client) {
    return acquire_in_keeper(global, options);
  }
  {
    const Client client = open_client(global);
    refuse_a_store_inside_one_process(client);
    if (client.capabilities().holds_outlive_the_client) {
      // No renewal: this process is about to exit. The TTL bounds the hold if no release comes.
      Attempt attempt =
          take_lock(client, options.key, options.wait,
                    LockOptions{.ttl = options.ttl, .auto_renew = false, .owner = options.owner});
      // The hold outlives this process, until `dlock release` or its TTL.
      if (attempt) attempt.lease().detach();
      return print_report(report_attempt(global, options, attempt));
    }
  }  // closed, and its threads gone, before the keeper is forked (the child could not tell)
  return acquire_in_keeper(global, options);
}

// ---- release ----

struct ReleaseOptions {
  std::string key;
  std::string owner;
  std::optional<std::uint64_t> token;
};

int release(const GlobalOptions& global, const ReleaseOptions& options) {
  const Client client = open_client(global);
  std::uint64_t token = 0;
  if (options.token) {
    token = *options.token;
  } else {
    const auto holders = client.inspect(options.key);
    const auto ours = std::find_if(holders.begin(), holders.end(),
                                   [&](const LockInfo& holder) { return holder.owner == options.owner; });
    if (ours == holders.end()) {
      say(fmt::format("'{}' is not held by owner {}: {}", options.key, options.owner,
                      holders.empty() ? std::string("it is free") : "it is " + describe_holders(holders)));
      return kExitNotHeld;
    }
    token = ours->token;
  }
  std::uint32_t holds_left = 0;
  try {
    holds_left = client.release(options.key, options.owner, token);
  } catch (const LockLostError& e) {
    say(e.what());
    return kExitNotHeld;
  }
  if (global.json) {
    print({{"key", options.key}, {"owner", options.owner}, {"token", token}, {"holds_left", holds_left}});
  }
  return kExitOk;
}

// ---- status, list, force-release ----

int status(const GlobalOptions& global, const std::string& key) {
  const Client client = open_client(global);
  const auto holders = client.inspect(key);
  if (global.json) {
    print(key_json(key, holders));
  } else {
    std::printf("%s: %s\n", key.c_str(), holders.empty() ? "free" : describe_holders(holders).c_str());
  }
  return kExitOk;
}

struct ListOptions {
  std::string prefix;
  std::string after;
  std::optional<std::size_t> limit;
};

// One row per holder: a key with several holders has several rows.
void print_table(const std::vector<LockInfo>& locks) {
  std::vector<std::array<std::string, 7>> rows{
      {"KEY", "OWNER", "MODE", "TOKEN", "HOLDS", "HELD FOR", "TTL LEFT"}};
  for (const auto& lock : locks) {
    rows.push_back({lock.key, lock.owner, to_string(lock.mode), std::to_string(lock.token),
                    std::to_string(lock.hold_count), lock.held_for ? format_duration(*lock.held_for) : "-",
                    format_duration(lock.ttl_left)});
  }
  std::array<std::size_t, 7> width{};
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", row[0], width[0], row[1], width[1],
               row[2], width[2], row[3], width[3], row[4], width[4], row[5], width[5], row[6], width[6]);
  }
}

int list(const GlobalOptions& global, const ListOptions& options) {
  constexpr std::size_t kPage = 1000;
  const Client client = open_client(global);
  std::vector<LockInfo> locks;
  std::size_t keys = 0;  // what --limit counts; a key may have several holders
  std::string after = options.after;
  std::string next;
  for (;;) {
    const std::size_t want = options.limit ? std::min(kPage, *options.limit - keys) : kPage;
    ListPage page = client.list(options.prefix, after, want);
    keys += count_keys(page.locks);
    std::move(page.locks.begin(), page.locks.end(), std::back_inserter(locks));
    next = std::move(page.next_after);
    if (next.empty() || (options.limit && keys >= *options.limit)) break;
    after = next;
  }
  if (global.json) {
    // null when nothing follows, as over HTTP
    print({{"locks", holders_json(locks)}, {"next_after", next.empty() ? json(nullptr) : json(next)}});
    return kExitOk;
  }
  if (locks.empty()) {
    std::puts(options.prefix.empty() ? "no locks held"
                                     : fmt::format("no locks held under '{}'", options.prefix).c_str());
  } else {
    print_table(locks);
  }
  if (!next.empty()) say(fmt::format("more locks follow: list them with --after '{}'", next));
  return kExitOk;
}

struct ForceReleaseOptions {
  std::string key;
  std::optional<std::uint64_t> token;
  std::string reason;
  std::string by;
  std::string audit_log;
  bool no_lock_delay = false;
};

// Who ran the command, for the audit log: --by, else the login name.
std::string invoking_user(const std::string& by) {
  if (!by.empty()) return by;
  if (const passwd* entry = ::getpwuid(::getuid())) return entry->pw_name;
  return "uid " + std::to_string(::getuid());
}

int force_release(const GlobalOptions& global, const ForceReleaseOptions& options) {
  if (options.reason.find_first_not_of(" \t") == std::string::npos) {
    throw InvalidArgument(
        "give a reason with --reason TEXT: it goes to the audit log with the evicted holder");
  }
  // Opened first: a force-release that cannot be recorded is not made.
  AuditLog audit(options.audit_log.empty() ? default_audit_log() : options.audit_log);
  const Client client = open_client(global);
  const auto freed = client.force_release(
      options.key, options.no_lock_delay ? Eviction::immediate : Eviction::delayed, options.token);
  const AuditRequest request{invoking_user(options.by),
                             fmt::format("dlock force-release on {}", core::host_name()), options.reason,
                             !options.no_lock_delay};
  for (const LockInfo& holder : freed) audit.append(audit_entry(request, holder));
  const std::string& key = options.key;
  if (global.json) {
    print({{"key", key},
           {"released", !freed.empty()},
           {"holders", holders_json(freed)},
           {"lock_delay", !options.no_lock_delay}});
  } else if (!freed.empty() && !options.no_lock_delay) {
    std::printf(
        "force-released '%s', which was %s; no one else can take it until each evicted holder has stopped "
        "(its `dlock run` stops its command and releases) or its lease has run out\n",
        key.c_str(), describe_holders(freed).c_str());
  } else if (!freed.empty()) {
    std::printf(
        "force-released '%s', which was %s; the evicted holds ended at once, without the lock delay\n",
        key.c_str(), describe_holders(freed).c_str());
  } else if (options.token) {
    std::printf("'%s' had no holder with token %llu; nothing to release\n", key.c_str(),
                static_cast<unsigned long long>(*options.token));
  } else {
    std::printf("'%s' was not held; nothing to release\n", key.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_admin_commands(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  {
    auto options = std::make_shared<AcquireOptions>();
    auto* command = app.add_subcommand(
        "acquire", "Take a lock for a script that spans several commands; print its fencing token");
    command
        ->add_option("--owner", options->owner,
                     "Who holds it: 1-128 printable ASCII characters, no spaces; release with the same owner")
        ->required();
    add_duration_option(*command, "--ttl", options->ttl,
                        "Lease length: the lock is free again after this long unless released first")
        ->default_str("30s");
    add_wait_options(*command, options->wait);
    command
        ->add_option("-E,--conflict-exit-code", options->conflict_exit,
                     "Exit code when the lock was not obtained in time")
        ->capture_default_str()
        ->check(CLI::Range(0, 255));
    add_quiet_flag(*command, options->quiet);
    command->add_option("KEY", options->key, "The lock's key")->required();
    command->footer(
        "On a store whose locks end with the process that took them (mysql:// mode=session, "
        "zookeeper://), dlock acquire leaves a keeper process holding the lock: it releases its hold when "
        "the TTL ends, exits once the lock is released or lost, and releases and exits on SIGTERM. "
        "local:// is refused (exit 69): use dlock run there.");
    command->callback([&global, &exit_code, options] { exit_code = acquire(global, *options); });
  }
  {
    auto options = std::make_shared<ReleaseOptions>();
    auto* command = app.add_subcommand("release", "Release one hold taken by `dlock acquire`");
    command->add_option("--owner", options->owner, "The owner given to acquire")->required();
    command->add_option("--token", options->token,
                        "The token acquire printed (default: the token the owner holds now)");
    command->add_option("KEY", options->key, "The lock's key")->required();
    command->callback([&global, &exit_code, options] { exit_code = release(global, *options); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto* command = app.add_subcommand("status", "Show who holds a lock, or that it is free");
    command->add_option("KEY", *key, "The lock's key")->required();
    command->callback([&global, &exit_code, key] { exit_code = status(global, *key); });
  }
  {
    auto options = std::make_shared<ListOptions>();
    auto* command = app.add_subcommand("list", "List held locks, in key order");
    command->add_option("--prefix", options->prefix, "Only keys starting with this");
    command->add_option("--limit", options->limit, "List at most this many (default: all)")
        ->check(CLI::PositiveNumber);
    command->add_option("--after", options->after,
                        "Start after this key (the next_after of an earlier page)");
    command->callback([&global, &exit_code, options] { exit_code = list(global, *options); });
  }
  {
    auto options = std::make_shared<ForceReleaseOptions>();
    auto* command = app.add_subcommand("force-release",
                                       "Evict a lock's holders, whoever they are (with --token, one of "
                                       "them); each one's `dlock run` stops its command. Recorded in the "
                                       "audit log");
    command->add_option("-r,--reason", options->reason, "Why, for the audit log")->required();
    command->add_option("--by", options->by, "Who asks, for the audit log (default: your login name)");
    command->add_flag("--no-lock-delay", options->no_lock_delay,
                      "Free the key at once, even while the evicted holder may still be running (default: "
                      "the key stays closed until that holder has stopped or its lease has run out)");
    command->add_option(
        "--token", options->token,
        "Evict only the holder with this fencing token (as status shows it); nothing if none has it");
    command->add_option("--audit-log", options->audit_log,
                        "Where the force-release is recorded, one JSON line each (default: "
                        "$XDG_STATE_HOME/dlock/audit.log, the one dlock serve uses)");
    command->add_option("KEY", options->key, "The lock's key")->required();
    command->callback([&global, &exit_code, options] { exit_code = force_release(global, *options); });
  }
#if DLOCK_WITH_MYSQL || DLOCK_WITH_POSTGRES
  app.add_subcommand("schema", "Print the DDL of a backend's tables, for DBAs who create them")
      ->require_subcommand(1);
#endif
#if DLOCK_WITH_MYSQL
  {
    auto* schema = app.get_subcommand("schema");
    auto table = std::make_shared<std::string>();
    auto mode = std::make_shared<std::string>("lease");
    auto* mysql = schema->add_subcommand(
        "mysql",
        "The lock table of mysql:// lease and session modes, or the columns row mode adds to your table");
    mysql->add_option("--mode", *mode, "lease, session or row, as in the URL's mode= option")
        ->check(CLI::IsMember({"lease", "session", "row"}))
        ->capture_default_str();
    mysql->add_option("--table", *table,
                      "The table, as in the URL's table= option (default dlock_locks; row mode: your table)");
    mysql->callback([table, mode] {
      if (table->empty()) *table = *mode == "row" ? "your_table" : "dlock_locks";
      std::fputs(backends::mysql_schema(*mode, *table).c_str(), stdout);
    });
  }
#endif
#if DLOCK_WITH_POSTGRES
  {
    auto* schema = app.get_subcommand("schema");
    auto table = std::make_shared<std::string>("dlock_locks");
    auto* postgres =
        schema->add_subcommand("postgres", "The lock table of postgres:// and its token sequence");
    postgres->add_option("--table", *table, "The table, as in the URL's table= option")
        ->capture_default_str();
    postgres->callback([table] { std::fputs(backends::postgres_schema(*table).c_str(), stdout); });
  }
#endif
}

}  // namespace dlock::cli
