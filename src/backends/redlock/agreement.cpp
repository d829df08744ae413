#include "backends/redlock/agreement.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace dlock::backends::redlock {
namespace {

using std::chrono::milliseconds;

// One owner's holder, as `infos` (one per server) show it.
LockInfo merged(std::vector<const LockInfo*> infos, std::size_t quorum) {
  // Longest lease first: the lock stays held by a majority until the quorum-th of them ends.
  std::sort(infos.begin(), infos.end(), [](const LockInfo* a, const LockInfo* b) { return a->ttl_left > b->ttl_left; });
  LockInfo info = *infos[std::min(quorum, infos.size()) - 1];
  std::size_t live = 0;
  for (const LockInfo* other : infos) {
    info.token = std::max(info.token, other->token);
    info.hold_count = std::max(info.hold_count, other->hold_count);
    if (other->held_for) info.held_for = std::max(info.held_for.value_or(milliseconds(0)), *other->held_for);
    if (!other->evicted) ++live;
  }
  // Evicted once it is live on fewer than a majority: no renewal of it can succeed any more.
  info.evicted = live < infos.size() && live < quorum;
  if (info.evicted) info.hold_count = 0;
  return info;
}

}  // namespace

std::vector<LockInfo> agreed(const std::vector<LockInfo>& seen, std::size_t quorum, bool any) {
  std::map<std::pair<std::string_view, LockMode>, std::vector<const LockInfo*>> by_owner;
  for (const auto& info : seen) by_owner[{info.owner, info.mode}].push_back(&info);
  std::vector<LockInfo> holders;
  const std::vector<const LockInfo*>* top = nullptr;
  for (const auto& [owner, infos] : by_owner) {
    if (infos.size() >= quorum) holders.push_back(merged(infos, quorum));
    if (!top || infos.size() > top->size()) top = &infos;
  }
  if (holders.empty() && any && top) holders.push_back(merged(*top, quorum));
  return holders;
}

backend::Busy contended(const std::vector<backend::Busy>& refusals, std::size_t answered, std::size_t quorum,
                        milliseconds backoff) {
  // Every server that answered refused, naming the same holders (or none, for a writer's
  // claim), or all naming one holder whose release rings wherever the waiter sleeps (beside
  // readers whose releases some servers have not seen yet): sleep until a release rings or
  // the first lease (or claim) ends. Otherwise the state is moving (a release or another
  // acquisition under way on some servers, or votes split): try again after a short random
  // back-off.
  const auto owners = [](const backend::Busy& busy) {
    std::vector<std::pair<std::string_view, LockMode>> out;
    for (const auto& h : busy.holders) out.emplace_back(h.owner, h.mode);
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<LockInfo> seen;
  auto retry = milliseconds::max();
  bool alike = true;
  std::vector<std::pair<std::string_view, LockMode>> everywhere;  // named by every refusal
  for (const auto& busy : refusals) {
    seen.insert(seen.end(), busy.holders.begin(), busy.holders.end());
    retry = std::min(retry, busy.retry_within);
    const auto here = owners(busy);
    alike = alike && here == owners(refusals.front());
    if (&busy == &refusals.front()) {
      everywhere = here;
    } else {
      std::vector<std::pair<std::string_view, LockMode>> both;
      std::set_intersection(everywhere.begin(), everywhere.end(), here.begin(), here.end(), std::back_inserter(both));
      everywhere = std::move(both);
    }
  }
  if ((alike || !everywhere.empty()) && refusals.size() == answered && answered >= quorum) {
    return {agreed(seen, quorum), retry};
  }
  auto holders = agreed(seen, quorum, true);
  retry = backoff;
  for (const auto& h : holders) retry = std::min(retry, h.ttl_left);
  return {std::move(holders), retry};
}

void end_readers_claims(Servers& servers, const std::function<std::vector<std::string>()>& claims,
                        const std::vector<Grant>& grants, const std::vector<Answer>& answers,
                        milliseconds timeout) {
  if (grants.size() == answered(answers)) return;
  const auto names = claims();  // outlives the round: Args views it
  Args del{"DEL"};
  del.insert(del.end(), names.begin(), names.end());
  Request end{std::nullopt, {}, servers.no_one()};
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].ok()) end.args[i] = del;
  }
  for (const auto& g : grants) end.args[g.server].reset();
  // A claim this cannot reach runs out.
  servers.round(end, timeout);
}

}  // namespace dlock::backends::redlock
