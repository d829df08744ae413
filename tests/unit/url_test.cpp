#include "core/url.hpp"

#include <gtest/gtest.h>

#include "core/percent.hpp"
#include "dlock/errors.hpp"

using dlock::ConfigurationError;
using dlock::core::HexDigits;
using dlock::core::percent_decode;
using dlock::core::Url;
using dlock::core::UrlOptions;

TEST(PercentDecode, EscapesOfEitherCaseOrOnlyUpperCase) {
  EXPECT_EQ(percent_decode("a%2Fb%25c"), "a/b%c");
  EXPECT_EQ(percent_decode("%2f"), "/");
  EXPECT_FALSE(percent_decode("%2f", HexDigits::upper)) << "the stores write upper-case escapes only";
  EXPECT_EQ(percent_decode("%E2%9C%93", HexDigits::upper), "\xE2\x9C\x93");
  EXPECT_FALSE(percent_decode("%2"));
  EXPECT_FALSE(percent_decode("%zz"));
  EXPECT_EQ(percent_decode(""), "");
}

TEST(Url, ParsesEveryPart) {
  const auto url = Url::parse("MySQL://app:s%40cret@db.example:3307/locks?table=dlock_lease&connect_timeout=2s");
  EXPECT_EQ(url.scheme, "mysql");
  EXPECT_EQ(url.user, "app");
  EXPECT_EQ(url.password, "s@cret");
  EXPECT_EQ(url.host, "db.example");
  EXPECT_EQ(url.port, 3307);
  EXPECT_EQ(url.path, "/locks");
  ASSERT_EQ(url.query.size(), 2u);
  EXPECT_EQ(url.query[1].first, "connect_timeout");
}

TEST(Url, SqlitePathsKeepTheirShape) {
  EXPECT_EQ(Url::parse("sqlite:///var/tmp/x.db").path, "/var/tmp/x.db");
  const auto relative = Url::parse("sqlite://data/x.db");
  EXPECT_EQ(relative.host + relative.path, "data/x.db");
}

TEST(Url, HostListsKeepTheirPorts) {
  const auto url = Url::parse("redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003");
  EXPECT_EQ(url.host, "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003");
  EXPECT_FALSE(url.port);
}

TEST(Url, Ipv6HostAndPort) {
  const auto url = Url::parse("redis://[::1]:6380");
  EXPECT_EQ(url.host, "[::1]");
  EXPECT_EQ(url.port, 6380);
}

TEST(Url, RedactedHidesThePassword) {
  const auto url = Url::parse("mysql://app:hunter2@h/db");
  EXPECT_EQ(url.redacted(), "mysql://app:***@h/db");
  EXPECT_EQ(url.redacted().find("hunter2"), std::string::npos);
}

// Defect 8: `redis://SECRET@host` was echoed verbatim as a user name. A lone userinfo is the
// password for Redis (redis-cli -u, Jedis, redis-py), so it is parsed and redacted as one.
TEST(Url, LoneUserinfoIsTheRedisPasswordAndRedacted) {
  for (const char* text : {"redis://hunter2@h:6379/0", "rediss://hunter2@h", "redlock://hunter2@h1:1,h2:2,h3:3/0"}) {
    SCOPED_TRACE(text);
    const auto url = Url::parse(text);
    EXPECT_EQ(url.user, "");
    EXPECT_EQ(url.password, "hunter2");
    EXPECT_EQ(url.redacted().find("hunter2"), std::string::npos) << url.redacted();
    EXPECT_NE(url.redacted().find(":***@"), std::string::npos) << url.redacted();
  }
  // Elsewhere a lone userinfo stays the user name, as URLs have it.
  const auto mysql = Url::parse("mysql://app@h/db");
  EXPECT_EQ(mysql.user, "app");
  EXPECT_EQ(mysql.password, "");
}

TEST(Url, ErrorsNameTheProblemAndNeverThePassword) {
  const auto message = [](const char* text) {
    try {
      Url::parse(text);
    } catch (const ConfigurationError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("no-scheme-here").find("no scheme://"), std::string::npos);
  EXPECT_NE(message("redis://h:99999").find("port"), std::string::npos);
  EXPECT_NE(message("redis://h:6379?a=1&a=2").find("given twice"), std::string::npos);
  EXPECT_NE(message("redis://h/%zz").find("hex"), std::string::npos);
  const std::string with_secret = message("redis://u:hunter2@h:bad");
  EXPECT_NE(with_secret.find("port"), std::string::npos);
  EXPECT_EQ(with_secret.find("hunter2"), std::string::npos);
}

TEST(UrlOptions, UnknownOptionsAreRejectedWithTheAcceptedOnes) {
  const auto url = Url::parse("sqlite:///x.db?busy_timeout=2s&bogus=1");
  UrlOptions options(url);
  EXPECT_EQ(options.take_duration("busy_timeout"), std::chrono::milliseconds(2000));
  try {
    options.finish();
    FAIL() << "finish() accepted an unknown option";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("'bogus'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("busy_timeout"), std::string::npos);
  }
}

TEST(UrlOptions, TypedValuesAreChecked) {
  const auto url = Url::parse("x://h?n=12&b=maybe&d=10x&s=10");
  UrlOptions options(url);
  EXPECT_THROW(options.take_int("n", 1, 10), ConfigurationError);
  EXPECT_THROW(options.take_bool("b"), ConfigurationError);
  EXPECT_THROW(options.take_duration("d"), ConfigurationError);
  EXPECT_EQ(options.take_duration("s"), std::chrono::seconds(10)) << "a bare number is seconds, as on the command line";
}
