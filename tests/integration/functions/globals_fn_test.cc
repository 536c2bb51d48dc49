// globals_fn under phosd: the module globals and the kernel setting it made before its pre-entry
// point are the snapshot's in every instance restored from it, in every restore mode, and in a
// context that kept the module loaded from the function's previous instance; a warm instance
// keeps counting where it is.
#include <gtest/gtest.h>

#include <string>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr int kElements = 4096;

// The answer to X: out[i] = X * (i % 8 + 1) + i / 2 over 4096 elements, the counter at `seen`.
std::string Expected(unsigned seen, double x) {
  const double sum = x * (kElements / 8) * 36 + (kElements - 1.0) * kElements / 4;
  char answer[128];
  std::snprintf(answer, sizeof answer, "seen %u sum %.1f first %.1f %.1f", seen, sum, x, 2 * x + 0.5);
  return answer;
}

class GlobalsFnTest : public PhosdTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--keep-alive-ms", "100"}; }
};

TEST_F(GlobalsFnTest, EveryRestoredInstanceStartsFromTheSnapshotsGlobalsAndKernelSetting) {
  CommandResult deployed = PhosFn({"deploy", "globals", PHOS_GLOBALS_FUNCTION, "--instances", "1",
                                   "--max-instances", "2", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_TRUE(SettledToOneIdleInstance("globals"));
  // The warm instance counts on from the snapshot's 100.
  HttpResponse r = InvokeInMode("globals", "1", "warm");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(101, 1));
  r = InvokeInMode("globals", "2", "warm");
  EXPECT_EQ(r.body, Expected(102, 2));
  // Each restored instance starts from the snapshot again: its table, its counter and its kernel's
  // opt-in to 64 KiB of dynamic shared memory (without which the launch would fail). "phos" twice:
  // the second restore finds the module its context kept from the first, counter at 101.
  for (const char* mode : {"stop-the-world", "eager", "no-pool", "no-order", "phos", "phos"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(SettledToOneIdleInstance("globals"));
    r = InvokeInMode("globals", "3", mode);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
    EXPECT_EQ(r.body, Expected(101, 3));
    // The launch names the weights, and the globals need no loading.
    EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
  }
  // The warm instance was left alone.
  ASSERT_TRUE(SettledToOneIdleInstance("globals"));
  r = InvokeInMode("globals", "1", "warm");
  EXPECT_EQ(r.body, Expected(103, 1));
}

}  // namespace
}  // namespace phos::testing
