#include "exec/model_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

namespace phos::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(ModelClockTest, ScalesDeviceTimeToWallTime) {
  ModelClock clock(10);
  // 256 MiB at 25 GB/s = 10.74 ms of device time; at scale 10 it holds the engine for 107 ms.
  const double copy_s = 256.0 * 1024 * 1024 / 25e9;
  using Ms = std::chrono::duration<double, std::milli>;
  EXPECT_NEAR(Ms(clock.ToWall(copy_s)).count(), 107.37, 0.01);
  EXPECT_EQ(clock.ToWall(1.0), nanoseconds(10'000'000'000));
  EXPECT_DOUBLE_EQ(clock.ToDeviceSeconds(milliseconds(500)), 0.05);
}

TEST(ModelClockTest, RoundTrips) {
  ModelClock clock(3.5);
  for (double s : {1e-6, 0.001, 0.25, 7.0}) EXPECT_NEAR(clock.ToDeviceSeconds(clock.ToWall(s)), s, 1e-9);
}

TEST(ModelClockTest, BadCostsAreZeroAndHugeCostsAreCapped) {
  ModelClock clock(1);
  EXPECT_EQ(clock.ToWall(-1.0), nanoseconds(0));
  EXPECT_EQ(clock.ToWall(std::numeric_limits<double>::quiet_NaN()), nanoseconds(0));
  EXPECT_EQ(clock.ToWall(1e300), ModelClock::kMaxWall);
  EXPECT_EQ(clock.ToWall(std::numeric_limits<double>::infinity()), ModelClock::kMaxWall);
}

TEST(ModelClockTest, InvalidScaleFallsBackToOne) {
  EXPECT_EQ(ModelClock(0).time_scale(), 1.0);
  EXPECT_EQ(ModelClock(-2).time_scale(), 1.0);
  EXPECT_EQ(ModelClock(std::nan("")).time_scale(), 1.0);
  EXPECT_EQ(ModelClock(0.5).time_scale(), 0.5);
}

TEST(ModelClockTest, PaySleepsTheScaledCost) {
  ModelClock clock(20);
  const auto start = std::chrono::steady_clock::now();
  clock.Pay(0.005);  // 100 ms of wall time
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ms, 100.0);
  // Oversleeping by a scheduling delay says nothing about the clock (a loaded host adds tens of
  // milliseconds); a unit mistake (scale applied twice, seconds taken for milliseconds) sleeps
  // 20x to 1000x too long.
  EXPECT_LT(ms, 2000.0);
}

}  // namespace
}  // namespace phos::sim
