// indirect_fn under phosd: its gather kernel reads a data buffer through a pointer stored in a
// device table, and the answers are the ones its deterministic contents imply.
#include <string>

#include <gtest/gtest.h>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

class IndirectFnTest : public PhosdTest {
 protected:
  void Deploy() {
    CommandResult r = PhosFn({"deploy", "indirect", PHOS_INDIRECT_FUNCTION, "--", "--buffers", "6", "--elements",
                              "5000"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  std::string Invoke(const std::string& request) {
    CommandResult r = PhosFn({"invoke", "indirect", "--data", request});
    EXPECT_EQ(r.exit_code, 0) << request << ": " << r.out;
    return r.out;
  }
};

// Buffer j element k is j * 1000 + k: the first `count` elements of buffer j sum to
// count * j * 1000 + count * (count - 1) / 2.
TEST_F(IndirectFnTest, GathersThroughTheTable) {
  Deploy();
  EXPECT_EQ(Invoke("3 10"), "sum 30045.0 first 3000.0 3001.0 3002.0 3003.0");
  EXPECT_EQ(Invoke("0 1"), "sum 0.0 first 0.0");
  // All of the last buffer: 5000 * 5000 + 5000 * 4999 / 2.
  EXPECT_EQ(Invoke("5 5000"), "sum 37497500.0 first 5000.0 5001.0 5002.0 5003.0");
  // The same request again gives the same bytes.
  EXPECT_EQ(Invoke("3 10"), "sum 30045.0 first 3000.0 3001.0 3002.0 3003.0");
}

TEST_F(IndirectFnTest, BadRequestsAreRefusedAndTheFunctionKeepsServing) {
  Deploy();
  for (const char* bad : {"6 1", "-1 1", "2 0", "2 5001", "two 3", "2", "2 3 4", ""}) {
    CommandResult r = PhosFn({"invoke", "indirect", "--data", bad});
    EXPECT_NE(r.exit_code, 0) << "'" << bad << "' was accepted: " << r.out;
  }
  EXPECT_EQ(Invoke("1 2"), "sum 2001.0 first 1000.0 1001.0");
}

}  // namespace
}  // namespace phos::testing
