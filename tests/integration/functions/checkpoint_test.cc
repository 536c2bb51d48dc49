// Checkpoints of running instances under phosd (docs/design.md D10), on stateful_fn: a request
// changes both its device accumulator and its process's count of requests, so an instance restored
// from a checkpoint answers as the checkpointed instance would have, and one restored from the
// pre-entry snapshot does not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "phosd_fixture.h"
#include "../../testing/wait_until.h"

namespace phos::testing {
namespace {

constexpr int kElements = 4096;

// stateful_fn's answer after `served` requests whose numbers add up to `added`.
std::string Expected(int served, double added) {
  const double sum = (kElements - 1.0) * kElements / 4 + added * (kElements / 8) * 36;
  char answer[96];
  std::snprintf(answer, sizeof answer, "served %d sum %.1f", served, sum);
  return answer;
}

class CheckpointTest : public PhosdTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--keep-alive-ms", "100"}; }

  // GET /v1/functions/<function>/instances with the admin token.
  nlohmann::json Instances(const std::string& function) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s"};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.push_back(endpoint() + "/v1/functions/" + function + "/instances");
    return nlohmann::json::parse(::phos::testing::Run(argv).out, nullptr, false);
  }

  // The function's only instance once every other has ended and given its range back; 0 when
  // that never came.
  uint64_t SoleIdleInstance(const std::string& function) {
    uint64_t id = 0;
    bool settled = WaitUntil([&] {
      nlohmann::json j = Instances(function);
      if (j.is_discarded() || !j.contains("instances") || j["instances"].size() != 1) return false;
      if (j["instances"][0].value("state", "") != "idle") return false;
      id = j["instances"][0].value("id", uint64_t{0});
      return true;
    });
    return settled ? id : 0;
  }

  void RestoresGoOnFromTheCheckpoint(const std::string& mode);

  // POST <path> with `body` (and the admin token unless `admin` is false): status and body.
  HttpResponse Post(const std::string& path, const std::string& body, bool admin = true) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body};
    if (admin) {
      for (const std::string& h : AdminHeader()) argv.push_back(h);
    }
    argv.push_back(endpoint() + path);
    return ParseCurl(::phos::testing::Run(argv).out);
  }
};

// A checkpoint in `mode` of the warm instance after two requests; the restores that follow take
// the checkpointed range and the spare in turn.
void CheckpointTest::RestoresGoOnFromTheCheckpoint(const std::string& mode) {
  // One instance at a time, two instance ranges: the warm instance's, and the spare a restore
  // takes while the instance it evicts ends.
  CommandResult deployed = PhosFn({"deploy", "stateful", PHOS_STATEFUL_FUNCTION, "--instances", "1",
                                   "--max-instances", "1", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const uint64_t warm = SoleIdleInstance("stateful");
  ASSERT_NE(warm, 0u);
  nlohmann::json listed = Instances("stateful");
  EXPECT_TRUE(listed["instances"][0].value("restored", false)) << listed.dump();
  EXPECT_GT(listed["instances"][0].value("pid", 0), 0) << listed.dump();

  HttpResponse r = InvokeInMode("stateful", "1", "warm");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(1, 1));
  r = InvokeInMode("stateful", "2", "warm");
  EXPECT_EQ(r.body, Expected(2, 3));

  CommandResult checkpointed = PhosFn({"checkpoint", "stateful", "--instance", std::to_string(warm), "--mode", mode});
  ASSERT_EQ(checkpointed.exit_code, 0) << checkpointed.out;
  EXPECT_NE(checkpointed.out.find("checkpointed instance " + std::to_string(warm) + " of stateful as snapshot v"),
            std::string::npos)
      << checkpointed.out;
  EXPECT_NE(checkpointed.out.find("(" + mode + ";"), std::string::npos) << checkpointed.out;
  // The checkpointed instance serves on from where it was.
  r = InvokeInMode("stateful", "4", "warm");
  EXPECT_EQ(r.body, Expected(3, 7));

  // A restore evicts the warm instance and takes the spare range, which still holds the
  // pre-entry snapshot: it starts from the beginning.
  r = InvokeInMode("stateful", "8", "phos");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(1, 8));
  ASSERT_NE(SoleIdleInstance("stateful"), 0u);
  // The next restore takes the checkpointed range back: the process's count and the device's
  // accumulator are the checkpoint's, whatever the instance did after it.
  for (const char* mode : {"phos", "stop-the-world", "eager"}) {
    SCOPED_TRACE(mode);
    r = InvokeInMode("stateful", "16", mode);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
    // In turn the ranges: the checkpoint's, then the pre-entry snapshot's, then the checkpoint's.
    if (std::string(mode) == "stop-the-world") {
      EXPECT_EQ(r.body, Expected(1, 16));
    } else {
      EXPECT_EQ(r.body, Expected(3, 19));
      EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
    }
    ASSERT_NE(SoleIdleInstance("stateful"), 0u);
  }
}

TEST_F(CheckpointTest, AnInstanceRestoredFromAStopTheWorldCheckpointGoesOnFromWhereTheCheckpointedOneWas) {
  RestoresGoOnFromTheCheckpoint("stop-the-world");
}

TEST_F(CheckpointTest, AnInstanceRestoredFromASoftCopyOnWriteCheckpointGoesOnFromWhereTheCheckpointedOneWas) {
  RestoresGoOnFromTheCheckpoint("soft-cow");
}

TEST_F(CheckpointTest, AnInstanceRestoredFromASoftRecopyCheckpointGoesOnFromWhereTheCheckpointedOneWas) {
  RestoresGoOnFromTheCheckpoint("soft-recopy");
}

// An instance restored but not yet called has no GPU session: a checkpoint of it in any mode keeps
// its CPU state and the snapshot its range holds, and restores there answer as a fresh instance.
TEST_F(CheckpointTest, AnInstanceThatMadeNoCallSinceItsRestoreIsCheckpointedWithItsRangesSnapshot) {
  for (const char* mode : {"stop-the-world", "soft-cow", "soft-recopy"}) {
    SCOPED_TRACE(mode);
    const std::string name = std::string("idle-") + mode;
    CommandResult deployed = PhosFn({"deploy", name, PHOS_STATEFUL_FUNCTION, "--instances", "1", "--max-instances",
                                     "1", "--", "--elements", std::to_string(kElements)});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
    ASSERT_NE(SoleIdleInstance(name), 0u);
    CommandResult checkpointed = PhosFn({"checkpoint", name, "--mode", mode});
    ASSERT_EQ(checkpointed.exit_code, 0) << checkpointed.out;
    HttpResponse r = InvokeInMode(name, "1", "warm");
    EXPECT_EQ(r.body, Expected(1, 1));
    // The spare range, then the checkpointed one: both start where the deploy stood.
    for (int i = 0; i < 2; ++i) {
      r = InvokeInMode(name, "2", "phos");
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.body, Expected(1, 2));
      ASSERT_NE(SoleIdleInstance(name), 0u);
    }
    ASSERT_EQ(PhosFn({"rm", name}).exit_code, 0);
  }
}

// Post-warm-up snapshots: every instance range is checkpointed after the warm-up requests ran
// there, so every instance, warm or restored for a request, starts warmed up.
TEST_F(CheckpointTest, ADeployWithWarmUpRequestsRestoresInstancesThatServedThem) {
  CommandResult deployed =
      PhosFn({"deploy", "stateful", PHOS_STATEFUL_FUNCTION, "--instances", "1", "--max-instances", "1", "--warmup", "5",
              "--warmup-count", "2", "--", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  EXPECT_NE(deployed.out.find("warmed up in"), std::string::npos) << deployed.out;
  EXPECT_NE(deployed.out.find(std::to_string(kElements * 4) + " bytes at the entry point, " +
                              std::to_string(kElements * 4) + " after the warm-up"),
            std::string::npos)
      << deployed.out;
  ASSERT_NE(SoleIdleInstance("stateful"), 0u);
  HttpResponse r = InvokeInMode("stateful", "1", "warm");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(3, 11));
  // Both ranges: the spare one, then the first again.
  for (int i = 0; i < 2; ++i) {
    r = InvokeInMode("stateful", "1", "phos");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, Expected(3, 11));
    EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
    ASSERT_NE(SoleIdleInstance("stateful"), 0u);
  }
  // A warm-up the function refuses fails the deploy, saying why; nothing is registered.
  CommandResult refused = PhosFn({"deploy", "refused", PHOS_STATEFUL_FUNCTION, "--warmup", "not a number", "--",
                                  "--elements", std::to_string(kElements)});
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  nlohmann::json listed = nlohmann::json::parse(
      ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out, nullptr, false);
  ASSERT_TRUE(listed.contains("functions")) << listed.dump();
  for (const auto& f : listed["functions"]) EXPECT_NE(f.value("name", ""), "refused");
  EXPECT_NE(PhosdLog().find("warm-up request 1 failed"), std::string::npos);
}

TEST_F(CheckpointTest, BadCheckpointRequestsGetClearErrorsAndTheInstanceServesOn) {
  CommandResult deployed = PhosFn({"deploy", "stateful", PHOS_STATEFUL_FUNCTION, "--instances", "1", "--",
                                   "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const uint64_t warm = SoleIdleInstance("stateful");
  ASSERT_NE(warm, 0u);
  const std::string at = "/v1/functions/stateful/instances/" + std::to_string(warm) + "/checkpoint";
  EXPECT_EQ(Post(at, "", /*admin=*/false).status, 401);
  EXPECT_EQ(Post("/v1/functions/nothing/checkpoint", "").status, 404);
  EXPECT_EQ(Post("/v1/functions/stateful/instances/999999/checkpoint", "").status, 404);
  EXPECT_EQ(Post("/v1/functions/stateful/instances/zero/checkpoint", "").status, 400);
  EXPECT_EQ(Post(at, "{\"mode\": \"sideways\"}").status, 400);
  EXPECT_EQ(Post(at, "{\"mode\": 3}").status, 400);
  EXPECT_EQ(Post(at, "{\"mode\": \"stop-the-world\", \"extra\": 1}").status, 400);
  EXPECT_EQ(Post(at, "[1, 2]").status, 400);
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                   endpoint() + "/v1/functions/stateful/instances"};
  EXPECT_EQ(::phos::testing::Run(argv).out, "401");  // listing instances is the operator's too

  HttpResponse r = InvokeInMode("stateful", "5", "warm");
  EXPECT_EQ(r.body, Expected(1, 5));
  // Without an id, the idle instance is taken; twice in a row, each a new version.
  HttpResponse first = Post("/v1/functions/stateful/checkpoint", "{\"mode\": \"stop-the-world\"}");
  ASSERT_EQ(first.status, 201) << first.body;
  HttpResponse second = Post("/v1/functions/stateful/checkpoint", "{\"mode\": \"soft-cow\"}");
  ASSERT_EQ(second.status, 201) << second.body;
  nlohmann::json a = nlohmann::json::parse(first.body, nullptr, false);
  nlohmann::json b = nlohmann::json::parse(second.body, nullptr, false);
  EXPECT_EQ(a.value("instance", uint64_t{0}), warm);
  EXPECT_EQ(a.value("mode", ""), "stop-the-world");
  EXPECT_GT(b.value("version", uint64_t{0}), a.value("version", uint64_t{0}));
  EXPECT_GE(a.value("stall_us", -1), 0);
  EXPECT_EQ(b.value("mode", ""), "soft-cow");
  EXPECT_EQ(b.value("missed_writes", -1), 0);  // stateful_fn's launch names the buffer it writes
  EXPECT_FALSE(a.contains("missed_writes"));
  EXPECT_LE(b.value("stall_us", -1), b.value("total_us", -1));
  // A soft recopy of an idle instance: nothing was written since its first copies.
  HttpResponse third = Post(at, "{\"mode\": \"soft-recopy\"}");
  ASSERT_EQ(third.status, 201) << third.body;
  nlohmann::json c = nlohmann::json::parse(third.body, nullptr, false);
  EXPECT_EQ(c.value("mode", ""), "soft-recopy");
  EXPECT_GT(c.value("version", uint64_t{0}), b.value("version", uint64_t{0}));
  EXPECT_EQ(c.value("recopied", -1), 0) << third.body;
  EXPECT_EQ(c.value("missed_writes", -1), 0);
  EXPECT_FALSE(c.contains("copied_before_write"));
  r = InvokeInMode("stateful", "5", "warm");
  EXPECT_EQ(r.body, Expected(2, 10));
}

// Moved to another phosd (docs/design.md D10), stateful_fn's device state goes with it and its
// process state does not: the other node restores the accumulator under its own deploy's process,
// whose count of requests starts over. Requests sent here afterwards are answered there.
TEST_F(CheckpointTest, MovedToAnotherNodeItsDeviceStateGoesOnThereAndItsProcessStateStartsOver) {
  PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES();
  PhosdNode other;
  ASSERT_NO_FATAL_FAILURE(other.Start(ExtraPhosdArgs(), phosd_env_));
  const std::vector<std::string> deploy = {"deploy", "stateful", PHOS_STATEFUL_FUNCTION, "--instances", "1",
                                           "--max-instances", "1", "--", "--elements", std::to_string(kElements)};
  CommandResult here = PhosFn(deploy);
  ASSERT_EQ(here.exit_code, 0) << here.out;
  CommandResult there = other.PhosFn(deploy);
  ASSERT_EQ(there.exit_code, 0) << there.out << other.Log();
  ASSERT_NE(SoleIdleInstance("stateful"), 0u);
  EXPECT_EQ(InvokeInMode("stateful", "1", "warm").body, Expected(1, 1));
  EXPECT_EQ(InvokeInMode("stateful", "2", "warm").body, Expected(2, 3));

  CommandResult moved =
      PhosFn({"migrate", "stateful", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << PhosdLog() << other.Log();
  HttpResponse r = Post("/v1/functions/stateful/invoke", "4");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, Expected(1, 7));  // 1 + 2 + 4 added on the device; one request for this process
  EXPECT_EQ(r.headers["x-phos-node"], other.endpoint());
  // The other node serves it as its own.
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-X", "POST", "--data-binary", "1", "-H",
                                   "Authorization: Bearer " + AdminToken(other.data_dir()),
                                   other.endpoint() + "/v1/functions/stateful/invoke"};
  EXPECT_EQ(::phos::testing::Run(argv).out, Expected(2, 8));
}

}  // namespace
}  // namespace phos::testing
