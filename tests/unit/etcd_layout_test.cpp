// etcd://'s layout and URL, which need no server: keys as directories (a prefix of keys is a
// prefix of directories, for list), node values, range ends, and the settings' errors.

#include <gtest/gtest.h>

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
  const NodeValue value{"job@host:1.2/abc", 3, std::chrono::milliseconds(2000), true};
  const auto back = from_value(to_value(value));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->owner, value.owner);
  EXPECT_EQ(back->holds, 3u);
  EXPECT_EQ(back->ttl, value.ttl);
  EXPECT_TRUE(back->evicted);
  EXPECT_FALSE(from_value(""));
  EXPECT_FALSE(from_value("owner\n1\n2000"));
  EXPECT_FALSE(from_value("owner\nx\n2000\nheld"));
  EXPECT_FALSE(from_value("owner\n1\n2000\nmaybe"));
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
