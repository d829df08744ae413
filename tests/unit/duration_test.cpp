#include <gtest/gtest.h>

#include "dlock/client.hpp"

using namespace std::chrono_literals;

TEST(ParseDuration, AcceptsTheDocumentedUnits) {
  EXPECT_EQ(dlock::parse_duration("500ms"), 500ms);
  EXPECT_EQ(dlock::parse_duration("30s"), 30s);
  EXPECT_EQ(dlock::parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(dlock::parse_duration("5m"), 5min);
  EXPECT_EQ(dlock::parse_duration("2h"), 2h);
  EXPECT_EQ(dlock::parse_duration("1500us"), 2ms);  // rounded up: a timeout is never shortened
  EXPECT_EQ(dlock::parse_duration("0s"), 0ms);
}

// Defect: `-w 5` was refused, though flock(1) users write seconds without a unit. A bare number
// is seconds everywhere a duration is read (options, URL options).
TEST(ParseDuration, BareNumberIsSeconds) {
  EXPECT_EQ(dlock::parse_duration("5"), 5s);
  EXPECT_EQ(dlock::parse_duration("0.5"), 500ms);
  EXPECT_EQ(dlock::parse_duration("0"), 0ms);
  EXPECT_EQ(dlock::parse_duration("0.0001"), 1ms);  // rounded up, as with units
}

TEST(ParseDuration, RejectsWithTheAcceptedForms) {
  for (const char* bad : {"", "s", "-1s", "1x", "1.2.3s", "ms500", "99999999999999h"}) {
    try {
      dlock::parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const dlock::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("5, 0.5; or a number with a unit: 500ms, 30s"), std::string::npos) << e.what();
    }
  }
}
