// blas_report (transparency_test.cc) under `phos-fn run` with phosd on NVIDIA's driver and
// libcublas: the same program, the same checks, computed by a GPU (label 'gpu').
#include <gtest/gtest.h>

#include <string>

#include "../integration/phosd_fixture.h"

namespace phos::testing {
namespace {

class GpuTransparencyTest : public PhosdTest {
 protected:
  std::string Gpu() const override { return "cuda"; }
};

TEST_F(GpuTransparencyTest, APlainCublasProgramsResultsMatchItsOwnLoopsOnAGpu) {
  CommandResult r = PhosFn({"run", "--", PHOS_BLAS_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(" checks, all checks held"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace phos::testing
