#pragma once

// What the servers' answers agree on: their votes on an attempt, the holders a majority names,
// the answer to an attempt they refused, and the readers' claims a grant ends on the servers
// that refused it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backends/redlock/servers.hpp"
#include "dlock/backend.hpp"
#include "dlock/errors.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::redlock {

// A server's grant of an acquisition: the token it drew (or already had) and its hold count.
struct Grant {
  std::size_t server;
  std::uint64_t token;
  std::uint32_t holds;
};

// The answering servers' votes on an attempt (Answer: acquire_answer's or acquire_set_answer's
// result): the grants, by server, and the refusals. A refusal of the request's permits
// (InvalidArgument) is kept, to be thrown once the grants are given back.
template <class Granted, class Refused>
struct Votes {
  std::vector<std::pair<std::size_t, Granted>> grants;
  std::vector<Refused> refusals;
  std::exception_ptr mismatch;
};

template <class Granted, class Refused, class Read>
Votes<Granted, Refused> votes(const std::vector<Answer>& answers, const Read& read) {
  Votes<Granted, Refused> out;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].ok()) continue;
    try {
      auto result = read(answers[i].reply.get());
      if (auto* granted = std::get_if<Granted>(&result)) {
        out.grants.emplace_back(i, std::move(*granted));
      } else {
        out.refusals.push_back(std::get<Refused>(std::move(result)));
      }
    } catch (const InvalidArgument&) {
      out.mismatch = std::current_exception();
    }
  }
  return out;
}

// The holders `quorum` servers agree on (`seen`: every server's holders in turn), an owner and
// mode at a time; with `any`, the one seen most when none has a majority.
std::vector<LockInfo> agreed(const std::vector<LockInfo>& seen, std::size_t quorum, bool any = false);

// The answer to an attempt that the servers in `refusals` refused (`answered` servers answered):
// their holders, and when to try again; `backoff` when the servers disagree.
backend::Busy contended(const std::vector<backend::Busy>& refusals, std::size_t answered, std::size_t quorum,
                        std::chrono::milliseconds backoff);

// Each server keeps the readers' claim, which the key's next grant ends: an acquisition that
// holds ends the claims of its keys (their names, from `claims`) on the servers that answered
// without granting it too. A claim there was placed before this grant (or on a writer that
// cannot hold a majority beside it), and would keep refusing writers on that server, which then
// keep their own claim standing there and ring no waiter sleeping there. Costs a round, and the
// names, only when the servers disagreed.
void end_readers_claims(Servers& servers, const std::function<std::vector<std::string>()>& claims,
                        const std::vector<Grant>& grants, const std::vector<Answer>& answers,
                        std::chrono::milliseconds timeout);

}  // namespace dlock::backends::redlock
