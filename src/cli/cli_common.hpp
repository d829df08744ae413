#pragma once

// Shared by the dlock subcommands: global options, exit codes, output helpers.

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "dlock/client.hpp"

namespace dlock::cli {

// Exit codes, documented in docs/cli.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitConflict = 1;   // lock not obtained in time (flock's default); -E changes it
inline constexpr int kExitError = 69;     // backend or configuration error (EX_UNAVAILABLE)
inline constexpr int kExitUsage = 64;     // bad command line (EX_USAGE)
inline constexpr int kExitLost = 75;      // lock lost while CMD ran; CMD was terminated (EX_TEMPFAIL)

struct GlobalOptions {
  std::string url;  // --url, else DLOCK_URL, else the embedded default
  std::string password_file;  // --password-file, else DLOCK_PASSWORD_FILE
  bool json = false;
};

// Opens the client named by the global options (--url, DLOCK_URL, the embedded default), with
// the password from --password-file, DLOCK_PASSWORD_FILE or DLOCK_PASSWORD when one is given
// and the URL names a server. `options` names the client's default owners (default: "dlock").
Client open_client(const GlobalOptions& global, const ClientOptions& options = {});
// True when a password comes from --password-file, DLOCK_PASSWORD_FILE or DLOCK_PASSWORD.
bool password_given(const GlobalOptions& global);

// Where the userinfo of `url` is: [begin, at) before the '@' at `at` (npos when there is no
// userinfo); nothing when `url` has no scheme.
struct Userinfo {
  std::size_t begin = 0;
  std::size_t at = std::string::npos;
};
std::optional<Userinfo> find_userinfo(std::string_view url);

// `url` with `password` in its userinfo (percent-encoded); ConfigurationError when the URL has
// a password already. A lone userinfo becomes the user name.
std::string url_with_password(const std::string& url, const std::string& password);

// Overwrites the password of every --url on the command line with 'x's, so `ps` and
// /proc/PID/cmdline (dlock's and its sentinel's) no longer show it; returns the arguments as
// they were, for parsing.
std::vector<std::string> hide_url_passwords(int argc, char** argv);

// One holder as JSON, as `--json` output and the HTTP API show it: key, owner, mode, token,
// hold_count, ttl_left_ms, held_for_ms, waiters, queue, evicted.
nlohmann::json lock_json(const LockInfo& info);
// Holders as a JSON array of lock_json objects.
nlohmann::json holders_json(const std::vector<LockInfo>& holders);
// A key with every holder, as `status --json` and GET /api/lock show it: key, held, holders.
nlohmann::json key_json(std::string_view key, const std::vector<LockInfo>& holders);
// How many keys `holders` name, listed in key order as ListPage has them: what a list's limit
// counts.
std::size_t count_keys(const std::vector<LockInfo>& holders);

}  // namespace dlock::cli
