#pragma once

// Run a function under a lock whose key is built from a template (the C++ face of the
// annotation-with-a-key-expression that lock libraries of other languages offer):
//
//   auto client = dlock::Client::open();   // DLOCK_URL, and DLOCK_TTL for the default lease
//   int total = dlock::with_lock(client, "order:{}:line:{}", order_id, line, [&] { return recount(); });
//   dlock::with_lock(client, {.ttl = 5s}, "report:{}", day, [&](const dlock::Lease& lease) {
//     write_report(day, lease.token());        // the fencing token, for the resource
//   });
//
// The key is built and checked before any round trip: "{}" takes the next argument, "{{" and
// "}}" are literal braces; a template whose placeholders and arguments do not match, or a key
// that is empty or not a valid key, is an InvalidArgument naming the template. The lock is
// taken with Client::acquire (waiting for it), the function runs, its result is returned and
// the lock released. If the function throws, the lock is released and the exception goes on;
// if the lease was lost while the function ran, with_lock throws LockLostError after it (the
// work may not have been exclusive; a long function should watch lease.stop_token()).

#include <cstddef>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/export.hpp"
#include "dlock/options.hpp"

namespace dlock {
namespace detail {

// The text an argument puts in a key: strings as they are, integers in decimal, bool as
// true/false, anything else as its operator<< writes it.
template <class T>
std::string key_part(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    return std::string(std::string_view(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, char>) {
    return std::string(1, value);
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(value);
  } else {
    std::ostringstream out;
    out << value;
    return out.str();
  }
}

DLOCK_EXPORT std::string format_key(std::string_view pattern, const std::vector<std::string>& parts);

// Calls fn(lease) when it takes the lease, else fn().
template <class Fn>
decltype(auto) call_with(Fn& fn, const Lease& lease) {
  if constexpr (std::is_invocable_v<Fn&, const Lease&>) {
    return std::invoke(fn, lease);
  } else {
    return std::invoke(fn);
  }
}

template <class Tuple, std::size_t... I>
std::string format_parts(std::string_view pattern, const Tuple& args, std::index_sequence<I...>) {
  return format_key(pattern, std::vector<std::string>{key_part(std::get<I>(args))...});
}

}  // namespace detail

// The key `pattern` makes with `args` (see above). Throws InvalidArgument.
template <class... Args>
std::string format_key(std::string_view pattern, const Args&... args) {
  return detail::format_key(pattern, std::vector<std::string>{detail::key_part(args)...});
}

// with_lock(client, [options,] pattern, args..., fn): the function comes last.
template <class... ArgsThenFn>
decltype(auto) with_lock(const Client& client, const LockOptions& options, std::string_view pattern,
                         ArgsThenFn&&... args_then_fn) {
  static_assert(sizeof...(ArgsThenFn) >= 1, "with_lock needs the function to run under the lock, as its last argument");
  auto all = std::forward_as_tuple(std::forward<ArgsThenFn>(args_then_fn)...);
  constexpr std::size_t kArgs = sizeof...(ArgsThenFn) - 1;
  auto& fn = std::get<kArgs>(all);
  const std::string key = detail::format_parts(pattern, all, std::make_index_sequence<kArgs>{});
  Lease lease = client.acquire(key, options);
  using Result = decltype(detail::call_with(fn, lease));
  if constexpr (std::is_void_v<Result>) {
    detail::call_with(fn, lease);
    lease.release();
  } else {
    Result result = detail::call_with(fn, lease);
    lease.release();
    return result;
  }
}

template <class... ArgsThenFn>
decltype(auto) with_lock(const Client& client, std::string_view pattern, ArgsThenFn&&... args_then_fn) {
  return with_lock(client, LockOptions{}, pattern, std::forward<ArgsThenFn>(args_then_fn)...);
}

}  // namespace dlock
