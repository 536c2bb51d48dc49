// globals_fn under phosd: the module globals and the kernel setting it made before its pre-entry
// point are the snapshot's in every instance restored from it, in every restore mode, and in a
// context that kept the module loaded from the function's previous instance; a warm instance
// keeps counting where it is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../testing/wait_until.h"
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

  HttpResponse Invoke(const std::string& body, const std::string& mode) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.insert(argv.end(),
                {"-H", "X-Phos-Restore-Mode: " + mode, endpoint() + "/v1/functions/globals/invoke"});
    return ParseCurl(::phos::testing::Run(argv).out);
  }
  // Until the function has one instance, idle: the extra instances of forced restores have
  // ended and their contexts gone back to the pool (with the module kept for the function).
  bool Settled() {
    return WaitUntil([&] {
      nlohmann::json j = nlohmann::json::parse(
          ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out, nullptr, false);
      if (j.is_discarded() || !j.contains("functions")) return false;
      for (const auto& f : j["functions"]) {
        if (f.value("name", "") != "globals" || !f.contains("state")) continue;
        const auto& s = f["state"];
        return s.value("idle", -1) == 1 && s.value("starting", -1) == 0 && s.value("busy", -1) == 0;
      }
      return false;
    });
  }
};

TEST_F(GlobalsFnTest, EveryRestoredInstanceStartsFromTheSnapshotsGlobalsAndKernelSetting) {
  CommandResult deployed = PhosFn({"deploy", "globals", PHOS_GLOBALS_FUNCTION, "--instances", "1",
                                   "--max-instances", "2", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_TRUE(Settled());
  // The warm instance counts on from the snapshot's 100.
  HttpResponse r = Invoke("1", "warm");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(101, 1));
  r = Invoke("2", "warm");
  EXPECT_EQ(r.body, Expected(102, 2));
  // Each restored instance starts from the snapshot again: its table, its counter and its kernel's
  // opt-in to 64 KiB of dynamic shared memory (without which the launch would fail). "phos" twice:
  // the second restore finds the module its context kept from the first, counter at 101.
  for (const char* mode : {"stop-the-world", "eager", "no-pool", "no-order", "phos", "phos"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(Settled());
    r = Invoke("3", mode);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
    EXPECT_EQ(r.body, Expected(101, 3));
    // The launch names the weights, and the globals need no loading.
    EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
  }
  // The warm instance was left alone.
  ASSERT_TRUE(Settled());
  r = Invoke("1", "warm");
  EXPECT_EQ(r.body, Expected(103, 1));
}

}  // namespace
}  // namespace phos::testing
