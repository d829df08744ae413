#pragma once

// Default owners: NAME@HOST:PID.THREAD/RANDOM, readable by a person who wonders who holds a
// key, unique without any coordination.

#include <cstdint>
#include <string>
#include <string_view>

namespace dlock::core {

// "NAME@HOST" of a client's default owners: NAME is `name`, else the program's short name;
// HOST is this host's name. Both are made printable ASCII without spaces or '@' (other bytes
// become '_') and cut so that owner_of() always fits in kMaxOwnerBytes.
std::string owner_prefix(std::string_view name, std::string_view host);
// The host's name, as gethostname(2) gives it ("" when it cannot).
std::string host_name();

// PREFIX:PID.THREAD/RANDOM, RANDOM being the first 16 hex digits (64 bits) of the client's
// random id: owners stay distinct between clients with equal names, hosts and pids
// (containers). The pid keeps a forked child, which inherits the client, from sharing its holds.
std::string owner_of(std::string_view prefix, long pid, std::uint64_t thread_serial, std::string_view client_id);

}  // namespace dlock::core
