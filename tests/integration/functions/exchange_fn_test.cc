// exchange_fn deployed with 2 GPUs and restored: its NCCL sends read buffers no parameter of any
// launch names, so only speculation of the sends and receives themselves (a send's buffer read, a
// receive's written) makes them wait for the restore's loads. Every restore mode gives the warm
// instance's bytes, which are the values computed here, with no speculation miss.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr int kElements = 1 << 23;

// What rank d's inbox holds: rank (1 - d)'s data, element k = (1 - d) * 100000 + k % 1000.
std::string Expected() {
  double sum[2] = {};
  for (int d = 0; d < 2; ++d) {
    for (int k = 0; k < kElements; ++k) sum[d] += static_cast<float>((1 - d) * 100000 + k % 1000);
  }
  char answer[256];
  std::snprintf(answer, sizeof answer, "%.1f %.1f %.1f %.1f %.1f %.1f", sum[0], sum[1], 100000.0, 0.0,
                100000.0 + (kElements - 1) % 1000, static_cast<double>((kElements - 1) % 1000));
  return answer;
}

class ExchangeFnTest : public PhosdTest {};

TEST_F(ExchangeFnTest, RestoredSendsAndReceivesWaitForTheirBuffers) {
  CommandResult deployed = PhosFn({"deploy", "exchange", PHOS_EXCHANGE_FUNCTION, "--gpus", "2",
                                   "--max-instances", "2", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  for (const char* mode : {"warm", "stop-the-world", "eager", "phos"}) {
    SCOPED_TRACE(mode);
    HttpResponse r = ParseCurl(::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "-X", "POST", "-H",
                                                     std::string("X-Phos-Restore-Mode: ") + mode, "--data",
                                                     "go", endpoint() + "/v1/functions/exchange/invoke"})
                                   .out);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, Expected());
    if (std::string(mode) != "warm") {
      EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
    }
  }
}

}  // namespace
}  // namespace phos::testing
