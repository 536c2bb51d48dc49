// `phos-fn run`: an unmodified CUDA program (built against NVIDIA's libcudart and libcublas, no
// phos headers) runs with the frontend libraries in their place, its GPU work executed by phosd.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

class RunTest : public PhosdTest {};

TEST_F(RunTest, PlainCudaProgramRunsThroughPhosd) {
  CommandResult r = PhosFn({"run", "--", PHOS_PLAIN_CUDA_PROGRAM});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("sgemm 64x48x32 correct"), std::string::npos) << r.out;
}

TEST_F(RunTest, WithoutPhosdTheProgramHasNoGpu) {
  // Run directly, it gets NVIDIA's libraries, and there is no GPU here: this is what makes the
  // test above meaningful (and would fail on a GPU host, hence the skip there).
  CommandResult r = ::phos::testing::Run({PHOS_PLAIN_CUDA_PROGRAM});
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA driver is present on this host";
  EXPECT_NE(r.exit_code, 0);
}

TEST_F(RunTest, ExitCodeAndOutputAreTheProgramsOwn) {
  CommandResult r = PhosFn({"run", "--", "/bin/sh", "-c", "echo from-the-program; exit 7"});
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.out, "from-the-program\n");
}

}  // namespace
}  // namespace phos::testing
