#pragma once

// Small helpers the tests against real servers (mysql, redis) share.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace dlock::test {

// An environment variable, or nothing when unset or empty.
std::optional<std::string> env(const char* name);
long long ms(std::chrono::steady_clock::duration d);
// Polls `condition` every 10 ms until it holds (true) or `timeout` passes (false).
bool eventually(const std::function<bool()>& condition, std::chrono::steady_clock::duration timeout);
// `digits` random hex digits: names of tables, keys and namespaces no other run uses.
std::string random_hex(int digits);
// `url` with `option` ("name=value") appended to its query.
std::string with_option(const std::string& url, const std::string& option);

}  // namespace dlock::test
