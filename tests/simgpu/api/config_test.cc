#include "api/config.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace phos::sim {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  static constexpr const char* kVars[] = {"PHOS_SIMGPU_PROFILE", "PHOS_SIMGPU_TIME_SCALE", "PHOS_SIMGPU_DEVICES",
                                          "PHOS_SIMGPU_MEMORY", "PHOS_SIMGPU_PREFAULT", "PHOS_SIMGPU_KERNEL_TIMEOUT"};
};

TEST_F(ConfigTest, Defaults) {
  SimConfig c;
  std::string error;
  ASSERT_TRUE(ConfigFromEnvironment(&c, &error)) << error;
  EXPECT_EQ(c.profile->name, "a100-pcie4");
  EXPECT_EQ(c.time_scale, SimConfig::kDefaultTimeScale);
  EXPECT_EQ(c.device_count, 1);
  EXPECT_EQ(c.device_memory(), 80ull << 30);
  EXPECT_EQ(c.kernel_timeout_seconds, 0.0);
}

TEST_F(ConfigTest, ReadsEveryVariable) {
  setenv("PHOS_SIMGPU_PROFILE", "h100-pcie5", 1);
  setenv("PHOS_SIMGPU_TIME_SCALE", "2.5", 1);
  setenv("PHOS_SIMGPU_DEVICES", "4", 1);
  setenv("PHOS_SIMGPU_MEMORY", "16G", 1);
  setenv("PHOS_SIMGPU_PREFAULT", "6G", 1);
  setenv("PHOS_SIMGPU_KERNEL_TIMEOUT", "1.5", 1);
  SimConfig c;
  std::string error;
  ASSERT_TRUE(ConfigFromEnvironment(&c, &error)) << error;
  EXPECT_EQ(c.profile->name, "h100-pcie5");
  EXPECT_EQ(c.time_scale, 2.5);
  EXPECT_EQ(c.device_count, 4);
  EXPECT_EQ(c.device_memory(), 16ull << 30);
  EXPECT_EQ(c.prefault_bytes, 6ull << 30);
  EXPECT_EQ(c.kernel_timeout_seconds, 1.5);
}

TEST_F(ConfigTest, BadValuesAreRefusedWithTheVariableNamed) {
  struct Case {
    const char* var;
    const char* value;
  };
  for (Case c : {Case{"PHOS_SIMGPU_PROFILE", "v100"}, Case{"PHOS_SIMGPU_TIME_SCALE", "0"},
                 Case{"PHOS_SIMGPU_TIME_SCALE", "fast"}, Case{"PHOS_SIMGPU_DEVICES", "9"},
                 Case{"PHOS_SIMGPU_DEVICES", "2x"}, Case{"PHOS_SIMGPU_MEMORY", "12Q"},
                 Case{"PHOS_SIMGPU_PREFAULT", "lots"}, Case{"PHOS_SIMGPU_KERNEL_TIMEOUT", "-1"},
                 Case{"PHOS_SIMGPU_KERNEL_TIMEOUT", "soon"}}) {
    setenv(c.var, c.value, 1);
    SimConfig config;
    std::string error;
    EXPECT_FALSE(ConfigFromEnvironment(&config, &error)) << c.var << "=" << c.value;
    EXPECT_NE(error.find(c.var), std::string::npos) << error;
    unsetenv(c.var);
  }
}

TEST(ParseByteSizeTest, Suffixes) {
  uint64_t b = 0;
  EXPECT_TRUE(ParseByteSize("4096", &b));
  EXPECT_EQ(b, 4096u);
  EXPECT_TRUE(ParseByteSize("512M", &b));
  EXPECT_EQ(b, 512ull << 20);
  EXPECT_TRUE(ParseByteSize("2GiB", &b));
  EXPECT_EQ(b, 2ull << 30);
  EXPECT_FALSE(ParseByteSize("", &b));
  EXPECT_FALSE(ParseByteSize("0", &b));
  EXPECT_FALSE(ParseByteSize("-1", &b));
  EXPECT_FALSE(ParseByteSize("99999999999T", &b));
}

TEST(ProfileTest, EveryProfileIsComplete) {
  for (const DeviceProfile* p : AllProfiles()) {
    EXPECT_EQ(FindProfile(p->name), p);
    EXPECT_GT(p->memory_bytes, 0u) << p->name;
    EXPECT_GT(p->h2d_pinned_bps, p->h2d_pageable_bps) << p->name;
    EXPECT_GT(p->d2h_pinned_bps, p->d2h_pageable_bps) << p->name;
    EXPECT_GT(p->d2d_bps, p->h2d_pinned_bps) << p->name;
    EXPECT_GT(p->context_create_s, 0) << p->name;
    EXPECT_GE(p->cc_major, 7) << p->name;
  }
  EXPECT_EQ(FindProfile("nonexistent"), nullptr);
}

}  // namespace
}  // namespace phos::sim
