#include "phosd_harness.h"

#include <gtest/gtest.h>

#include <cmath>

namespace phos::bench {
namespace {

// As phosd's prometheus-cpp serializer writes it: two devices, a histogram whose _sum and _count
// share the family's prefix, and a label value with an escaped quote.
constexpr char kExposition[] =
    "# HELP phos_ctxpool_contexts Held by the pool now, by state.\n"
    "# TYPE phos_ctxpool_contexts gauge\n"
    "phos_ctxpool_contexts{device=\"0\",state=\"ready\"} 2\n"
    "phos_ctxpool_contexts{device=\"1\",state=\"ready\"} 1\n"
    "phos_ctxpool_contexts{device=\"0\",state=\"scrubbing\"} 1\n"
    "phos_ctxpool_lease_misses_total{device=\"0\"} 3\n"
    "phos_ctxpool_lease_misses_total_extra 100\n"
    "phos_instance_retire_seconds_count 4\n"
    "phos_instance_retire_seconds_sum 0.5\n"
    "phos_instance_retire_seconds_bucket{le=\"+Inf\"} 4\n"
    "phos_odd{why=\"a \\\"quoted\\\" b\"} 7\n";

TEST(MetricValueTest, SumsTheSeriesWhoseLabelsMatch) {
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_contexts", {{"state", "ready"}}).value(), 3);
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_contexts", {{"state", "ready"}, {"device", "1"}}).value(),
            1);
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_contexts").value(), 4);
  EXPECT_EQ(MetricValue(kExposition, "phos_odd", {{"why", "a \"quoted\" b"}}).value(), 7);
}

TEST(MetricValueTest, TellsANameFromLongerNamesItPrefixes) {
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_lease_misses_total").value(), 3);
  EXPECT_EQ(MetricValue(kExposition, "phos_instance_retire_seconds_sum").value(), 0.5);
  EXPECT_EQ(MetricValue(kExposition, "phos_instance_retire_seconds_count").value(), 4);
  EXPECT_EQ(MetricValue(kExposition, "phos_instance_retire_seconds").status().code(), StatusCode::kNotFound);
}

TEST(MetricValueTest, AbsentMetricOrLabelIsNotFound) {
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_pool_wait_seconds_count").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(MetricValue(kExposition, "phos_ctxpool_contexts", {{"state", "creating"}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(MetricValue("", "phos_ctxpool_contexts").status().code(), StatusCode::kNotFound);
  // A truncated line is skipped, not read past its end.
  EXPECT_EQ(MetricValue("phos_x{a=\"1", "phos_x").status().code(), StatusCode::kNotFound);
}

TEST(PercentileTest, NearestRank) {
  std::vector<double> v;
  for (int i = 30; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 99), 30);  // of fewer than 100 samples, p99 is the maximum
  EXPECT_EQ(Percentile(v, 50), 15);
  EXPECT_EQ(Percentile(v, 100), 30);
  EXPECT_EQ(Percentile({4}, 1), 4);
  EXPECT_TRUE(std::isnan(Percentile({}, 99)));
  EXPECT_EQ(Median({3, 1, 2, 10}), 2.5);
}

TEST(ParsePositiveListTest, AcceptsPositiveIntegersOnly) {
  EXPECT_EQ(ParsePositiveList("--sizes", "256,1024").value(), (std::vector<int>{256, 1024}));
  EXPECT_EQ(ParsePositiveList("--bursts", "2").value(), (std::vector<int>{2}));
  for (const char* bad : {"", "0", "-1", "2,,4", "2,", "4x", "1,abc", "99999999999"}) {
    Result<std::vector<int>> r = ParsePositiveList("--bursts", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--bursts"), std::string::npos);
  }
}

}  // namespace
}  // namespace phos::bench
