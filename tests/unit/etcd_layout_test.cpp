// etcd://'s layout and URL, which need no server: keys as directories (a prefix of keys is a
// prefix of directories, for list), node values, range ends, and the settings' errors.

#include <gtest/gtest.h>

#include "backends/etcd/holders.hpp"
#include "backends/etcd/nodes.hpp"
#include "backends/etcd/settings.hpp"
#include "core/url.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

TEST(EtcdLayout, AKeysDirectoryNamesItBackByteForByte) {
  for (const std::string key : {"plain", "a/b/c", "100%/x", "%2F", "заказ/42 ✓", "/", "%"}) {
    const std::string node = new_node("/dlock", key, 0x1234);
    EXPECT_EQ(node.rfind(key_dir("/dlock", key), 0), 0u) << key;
    EXPECT_EQ(key_of_node("/dlock", node), key) << node;
    EXPECT_EQ(key_dir("/dlock", key).find('/', 7), key_dir("/dlock", key).size() - 1)
        << "a '/' inside " << key;
  }
  EXPECT_FALSE(key_of_node("/dlock", "/other/k/0000000000001234-0000000000000001"));
  EXPECT_FALSE(key_of_node("/dlock", "/dlock/k/short"));
}

TEST(EtcdLayout, APrefixOfKeysIsAPrefixOfTheirDirectories) {
  const std::string prefix = "p_%/";
  for (const std::string key : {"p_%/a", "p_%/", "p_%/x/y"}) {
    EXPECT_EQ(key_dir("/r", key).rfind(keys_from("/r", prefix), 0), 0u) << key;
  }
  for (const std::string key : {"p_%", "p_%0/x", "pX%/z"}) {
    EXPECT_NE(key_dir("/r", key).rfind(keys_from("/r", prefix), 0), 0u) << key;
  }
}

TEST(EtcdLayout, PrefixEndIsTheFirstKeyPastThePrefix) {
  EXPECT_EQ(prefix_end("/dlock/a/"), "/dlock/a0");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff", 1)), std::string(1, '\0'));
}

TEST(EtcdLayout, NodeValuesRoundTripAndRejectOthers) {
  const NodeValue value{"job@host:1.2/abc", 3, std::chrono::milliseconds(2000), true, LockMode::shared, 5};
  const auto back = from_value(to_value(value));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->owner, value.owner);
  EXPECT_EQ(back->holds, 3u);
  EXPECT_EQ(back->ttl, value.ttl);
  EXPECT_TRUE(back->evicted);
  EXPECT_EQ(back->mode, LockMode::shared);
  EXPECT_EQ(back->permits, 5u);
  EXPECT_EQ(from_value(to_value(NodeValue{"o", 1, std::chrono::milliseconds(1000)}))->mode, LockMode::exclusive);
  EXPECT_FALSE(from_value(""));
  EXPECT_FALSE(from_value("owner\n1\n2000\nheld"));
  EXPECT_FALSE(from_value("owner\nx\n2000\nheld\nexclusive\n0"));
  EXPECT_FALSE(from_value("owner\n1\n2000\nmaybe\nexclusive\n0"));
  EXPECT_FALSE(from_value("owner\n1\n2000\nheld\nboth\n0"));
  EXPECT_FALSE(from_value("owner\n1\n2000\nheld\nshared\n-1"));
}

// A queue of nodes, each "x" (exclusive) or "sN" (shared with N permits), owned "o0", "o1", ...
Line line(const std::vector<std::string>& kinds) {
  std::vector<etcdserverpb::KeyValue> nodes;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    NodeValue value{"o" + std::to_string(i), 1, std::chrono::milliseconds(1000)};
    if (kinds[i] != "x") {
      value.mode = LockMode::shared;
      value.permits = static_cast<std::uint32_t>(std::stoul(kinds[i].substr(1)));
    }
    etcdserverpb::KeyValue node;
    node.set_key("/dlock/k/" + std::to_string(i));
    node.set_create_revision(static_cast<std::int64_t>(10 + i));
    node.set_value(to_value(value));
    nodes.push_back(node);
  }
  return line_of("k", nodes, nodes.size());
}

std::vector<std::size_t> holding(const Line& l) {
  std::vector<std::size_t> held;
  for (std::size_t i = 0; i < l.nodes.size(); ++i) {
    if (holds(l, i)) held.push_back(i);
  }
  return held;
}

TEST(EtcdHolders, WritersHoldAloneReadersTogetherSemaphoresUpToTheirPermits) {
  using V = std::vector<std::size_t>;
  EXPECT_EQ(holding(line({"x", "x", "s0"})), V{0});
  EXPECT_EQ(holding(line({"s0", "s0", "x", "s0"})), (V{0, 1})) << "a reader behind a waiting writer waits";
  EXPECT_EQ(holding(line({"s2", "s2", "s2"})), (V{0, 1}));
  EXPECT_EQ(awaited(line({"x", "s0", "s0"}), 2), V{0}) << "a reader awaits its nearest writer";
  EXPECT_EQ(awaited(line({"s0", "s0", "x"}), 2), V{1}) << "a writer awaits the node before it";
  EXPECT_EQ(awaited(line({"s2", "s2", "s2", "s2"}), 3), (V{1, 2})) << "a semaphore's waiter awaits its permits";
}

TEST(EtcdHolders, ReentryFollowsTheModesAndPermitsMustAgree) {
  const Line l = line({"s0", "x"});
  backend::AcquireRequest request{"k", "o0", std::chrono::milliseconds(1000)};
  EXPECT_FALSE(own_hold(l, 2, request)) << "a reader asking to write is not a re-entry";
  request.mode = LockMode::shared;
  EXPECT_EQ(own_hold(l, 2, request), 0u);
  request.permits = 3;
  EXPECT_THROW(check_permits(l, 2, request), InvalidArgument);
  const auto refused = busy("k", line({"s0", "s0", "x"}), 3);
  ASSERT_EQ(refused.holders.size(), 2u);
  EXPECT_EQ(refused.holders[1].token, 11u);
  EXPECT_EQ(refused.holders[0].waiters, 1u);
}

TEST(EtcdSettings, UrlGivesEndpointsPrefixAndTtl) {
  const auto settings = parse_settings(core::Url::parse("etcd://u:secret@h1:2379,h2:2380/locks/x/?ttl=5s"));
  EXPECT_EQ(settings.endpoints, (std::vector<std::string>{"h1:2379", "h2:2380"}));
  EXPECT_EQ(settings.root, "/locks/x");
  EXPECT_EQ(settings.ttl, std::chrono::seconds(5));
  EXPECT_EQ(settings.user, "u");
  EXPECT_EQ(settings.shown.find("secret"), std::string::npos);
  EXPECT_EQ(parse_settings(core::Url::parse("etcd://h:1")).root, "/dlock");
}

TEST(EtcdSettings, BadUrlsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"etcd://h:1/x?ttl=1500ms", "whole"}, {"etcd://h:1/x?ttl=0s", "ttl"}, {"etcd:///x", "servers"},
      {"etcd://h1:1,h2/x", "port"},         {"etcd://h:1/a//b", "prefix"},  {"etcd://:pw@h:1/x", "user"},
      {"etcd://h:1/x?bogus=1", "bogus"},
  };
  for (const auto& [url, names] : bad) {
    try {
      parse_settings(core::Url::parse(url));
      ADD_FAILURE() << url << " was accepted";
    } catch (const ConfigurationError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("pw"), std::string::npos) << "the password shown: " << e.what();
    }
  }
}

}  // namespace
}  // namespace dlock::backends::etcd
