// graph_fn under phosd: the graph it captured before its pre-entry point is the snapshot's in every
// instance restored from it, in every restore mode: the restored function launches it without
// capturing again, gets what the CPU computes, runs the graph's host node once per launch in the
// restored process, and its launch waits for the buffers its nodes name (no speculation miss).
#include <gtest/gtest.h>

#include <string>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr int kElements = 4096;

// The answer to X, computed here: tmp = 3 X + i / 2, out = 2 tmp, over kElements elements, from
// the one capture the snapshot's process made.
std::string Expected(float x) {
  double sum = 0;
  float first[2] = {0, 0};
  for (int i = 0; i < kElements; ++i) {
    const float tmp = 3.0f * x + static_cast<float>(i) / 2;
    const float out = 2.0f * tmp + 0.0f;
    sum += out;
    if (i < 2) first[i] = out;
  }
  char answer[128];
  std::snprintf(answer, sizeof answer, "sum %.1f first %.1f %.1f captures 1 host 1", sum,
                static_cast<double>(first[0]), static_cast<double>(first[1]));
  return answer;
}

class GraphFnTest : public PhosdTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--keep-alive-ms", "100"}; }
};

TEST_F(GraphFnTest, ARestoredInstanceLaunchesTheSnapshotsGraphWithoutCapturingAgain) {
  CommandResult deployed = PhosFn({"deploy", "graph", PHOS_GRAPH_FUNCTION, "--instances", "1",
                                   "--max-instances", "2", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_TRUE(SettledToOneIdleInstance("graph"));
  HttpResponse r = InvokeInMode("graph", "1", "warm");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(1));
  for (const char* mode : {"stop-the-world", "eager", "no-pool", "no-order", "phos", "phos"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(SettledToOneIdleInstance("graph"));
    r = InvokeInMode("graph", "2.5", mode);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
    EXPECT_EQ(r.body, Expected(2.5f));
    // The graph's launch waited for every buffer its nodes name.
    EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
  }
}

}  // namespace
}  // namespace phos::testing
