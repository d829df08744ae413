#pragma once

// ZooKeeper's answers as dlock errors.

#include <string>
#include <string_view>

namespace dlock::backends::zookeeper {

inline constexpr const char* kName = "zookeeper";

// Whether a request writes: a write whose connection was lost may have been made.
enum class Write { no, yes };

// The client's own answers when the server did not answer: the request may be made again
// once the session is connected.
bool lost_connection(int rc);

// Throws the dlock error for an answer other than ZOK. A write whose connection was lost
// may have been made: its outcome is unknown.
void check(int rc, const std::string& what, std::string_view key, Write write = Write::no);

}  // namespace dlock::backends::zookeeper
