#pragma once

// What a command decides from the store's capabilities before it forks (`dlock acquire`'s
// keeper, `dlock bench`'s worker processes), asked in a child process, so that the forking
// process never opens a client itself. A closed client may leave its library's state behind,
// which a forked copy cannot use: gRPC's event engine outlives etcd://'s last channel, and a
// keeper forked after it crashed (SIGSEGV in its poller) as soon as it opened a client of its own.

#include <optional>
#include <string>

#include "cli/cli_common.hpp"
#include "dlock/backend.hpp"

namespace dlock::cli {

struct StoreTraits {
  std::string name;  // the backend's
  backend::Capabilities capabilities;
};

// The store's traits as a child process found them; nothing when it could not tell (the caller
// then opens a client itself, which reports why as opening one does).
std::optional<StoreTraits> store_traits_in_child(const GlobalOptions& global);

}  // namespace dlock::cli
