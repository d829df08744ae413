#include "backends/redlock/activity.hpp"

#include <iterator>
#include <vector>

#include "backends/redis/keys.hpp"

namespace dlock::backends::redlock {

void ActivityTotals::add(const Activity& delta) {
  // The totals are the sum over the servers: each delta goes to one that answers.
  const std::vector<std::string> counts = redis::activity_counts(delta);
  std::vector<Answer> answers(servers_.size());
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (auto why = servers_.left_out(i)) {
      answers[i].error = redis::RedisError{*why, true, false};
      continue;
    }
    try {
      auto connection = servers_.take(i);
      servers_.run(*connection, kAddActivity, {key_}, {counts.begin(), counts.end()});
      return;
    } catch (const redis::RedisError& e) {
      if (e.connection) servers_.failed(i, e);
      answers[i].error = e;
    }
  }
  servers_.no_majority(answers, {}, "cannot add activity");
}

Activity ActivityTotals::totals() {
  Args command{"HMGET", key_};
  command.insert(command.end(), std::begin(redis::kActivityFields), std::end(redis::kActivityFields));
  const auto answers = servers_.round({std::nullopt, {}, servers_.everyone(command)}, timeout_);
  if (answered(answers) < servers_.quorum()) servers_.no_majority(answers, {}, "cannot read the activity totals");
  Activity total;
  for (const auto& a : answers) {
    if (a.ok()) redis::add_activity_reply(a.reply.get(), total);
  }
  return total;
}

}  // namespace dlock::backends::redlock
