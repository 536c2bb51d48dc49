// batched_gemm_fn deployed, then restored on demand ("phos" mode, copies modelled 40 times slower
// than the device so that the matrices are still loading when the request's GEMM is made): the
// batch names its matrices only in device arrays of pointers, so phosd's speculation must read the
// arrays and have every matrix loaded before cuBLAS runs. A matrix it missed would be read while
// absent, which validation counts as a speculation miss.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../testing/wait_until.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr int kMatrices = 16, kSize = 1024;  // 16 buffers of 4 MiB

class BatchedGemmRestoreTest : public PhosdTest {
 protected:
  BatchedGemmRestoreTest() { phosd_env_ = {{"PHOS_SIMGPU_TIME_SCALE", "40"}}; }
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--keep-alive-ms", "100"}; }

  HttpResponse Invoke(const std::string& mode) {
    CommandResult r =
        ::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", "go", "-H",
                              "X-Phos-Restore-Mode: " + mode, endpoint() + "/v1/functions/batched/invoke"});
    return ParseCurl(r.out);
  }

  // Whether the function has exactly one instance, idle (a forced restore's extra instance has
  // ended after --keep-alive-ms).
  bool Settled() {
    CommandResult r = ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"});
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) return false;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") != "batched" || !f.contains("state")) continue;
      const auto& s = f["state"];
      return s.value("idle", -1) == 1 && s.value("starting", -1) == 0 && s.value("busy", -1) == 0;
    }
    return false;
  }
};

std::string Expected() {
  std::string out;
  for (int i = 0; i < kMatrices; ++i) out += (i == 0 ? "" : " ") + std::to_string((i + 1) * kSize) + ".0";
  return out;
}

TEST_F(BatchedGemmRestoreTest, ARestoreLoadsEveryMatrixThePointerArraysNameBeforeTheGemm) {
  CommandResult deployed = PhosFn({"deploy", "batched", PHOS_BATCHED_GEMM_FUNCTION, "--instances", "1",
                                   "--max-instances", "2", "--sample", "go", "--", "--matrices",
                                   std::to_string(kMatrices), "--size", std::to_string(kSize)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_TRUE(WaitUntil([&] { return Settled(); }));
    HttpResponse r = Invoke("phos");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], "phos");
    EXPECT_EQ(r.body, Expected());
    EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
  }
}

}  // namespace
}  // namespace phos::testing
