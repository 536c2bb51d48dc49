#include "phos/base/log.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

namespace phos::log {
namespace {

TEST(LogTest, LevelFilter) {
  Configure(Level::Warn, "");
  EXPECT_FALSE(Enabled(Level::Info, "simgpu"));
  EXPECT_TRUE(Enabled(Level::Warn, "simgpu"));
  EXPECT_TRUE(Enabled(Level::Error, "store"));
  Configure(Level::Off, "");
  EXPECT_FALSE(Enabled(Level::Error, "store"));
}

TEST(LogTest, SubsystemAllowList) {
  Configure(Level::Debug, "simgpu,store");
  EXPECT_TRUE(Enabled(Level::Debug, "simgpu"));
  EXPECT_TRUE(Enabled(Level::Info, "store"));
  EXPECT_FALSE(Enabled(Level::Info, "runtime"));
  // Warnings pass whatever the subsystem filter says.
  EXPECT_TRUE(Enabled(Level::Warn, "runtime"));
}

TEST(LogTest, SubsystemDenyList) {
  Configure(Level::Info, "^simgpu");
  EXPECT_FALSE(Enabled(Level::Info, "simgpu"));
  EXPECT_TRUE(Enabled(Level::Info, "runtime"));
}

TEST(LogTest, ParseLevel) {
  Level l = Level::Off;
  EXPECT_TRUE(ParseLevel("debug", &l));
  EXPECT_EQ(l, Level::Debug);
  EXPECT_FALSE(ParseLevel("loud", &l));
  EXPECT_EQ(l, Level::Debug);
}

TEST(LogTest, RateLimiterAdmitsOncePerPeriod) {
  RateLimiter limiter;
  EXPECT_TRUE(limiter.Admit(std::chrono::seconds(60)));
  EXPECT_FALSE(limiter.Admit(std::chrono::seconds(60)));
  EXPECT_FALSE(limiter.Admit(std::chrono::seconds(60)));
}

TEST(LogTest, LineCarriesSubsystemFileAndLine) {
  Configure(Level::Trace, "");
  testing::internal::CaptureStderr();
  PHOS_LOG(Info, "test", "value {} and {}", 1, "two");
  int line = __LINE__ - 1;
  Configure(Level::Info, "^test");
  PHOS_LOG(Info, "test", "hidden");
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[test] [log_test.cc:" + std::to_string(line) + "] value 1 and two"), std::string::npos) << out;
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
}

TEST(LogTest, ControlCharactersCannotForgeALine) {
  EXPECT_EQ(EscapeControl("plain name"), "plain name");
  EXPECT_EQ(EscapeControl("k\n[error] forged"), "k\\n[error] forged");
  EXPECT_EQ(EscapeControl(std::string("a\0b\x1b[31m\t\r\x7f", 11)), "a\\x00b\\x1b[31m\\t\\r\\x7f");
  // A backslash is doubled: a peer cannot spell an escape that reads as one the logger made.
  EXPECT_EQ(EscapeControl("a\\nb"), "a\\\\nb");

  Configure(Level::Trace, "");
  testing::internal::CaptureStderr();
  PHOS_LOG(Info, "test", "kernel {} refused", "evil\n[2026-01-01] [error] [runtime] forged");
  std::string out = testing::internal::GetCapturedStderr();
  Configure(Level::Info, "");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("evil\\n[2026-01-01]"), std::string::npos) << out;
}

}  // namespace
}  // namespace phos::log
