// functions/tp-mlp deployed through phosd (issue 5's Done line): the function declares 2 GPUs,
// its session leases a device group (a pooled context per device and a communicator over them),
// its per-layer ncclAllReduce runs on the group, and its output is the CPU reference's. Restored
// from its snapshot in every restore mode (issue 6), it gives the warm instance's bytes.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mlp_model.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr uint64_t kWeightSeed = 42;  // tp-mlp's default --weight-seed
const mlp::Shape kShape{.width = 256, .layers = 3, .batch = 1};

class TpMlpTest : public PhosdTest {
 protected:
  void Deploy(int gpus) {
    CommandResult r = PhosFn({"deploy", "tp-mlp", PHOS_TP_MLP_FUNCTION, "--gpus", std::to_string(gpus), "--",
                              "--width", std::to_string(kShape.width), "--layers", std::to_string(kShape.layers)});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
};

// mlp_test.cc's tolerances: the tensor-parallel sums differ from the reference's only in order.
void ExpectMatchesReference(const std::string& body, uint64_t seed) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  std::vector<float> expected = mlp::Reference(kWeightSeed, kShape, mlp::InputFromSeed(seed, kShape));
  double expected_sum = 0;
  for (float v : expected) expected_sum += v;
  int expected_argmax = static_cast<int>(std::max_element(expected.begin(), expected.end()) - expected.begin());
  ASSERT_TRUE(j.contains("checksum") && j.contains("argmax") && j.contains("output")) << body;
  EXPECT_NEAR(j["checksum"].get<double>(), expected_sum, 1e-3 * (1 + std::abs(expected_sum)));
  EXPECT_EQ(j["argmax"][0].get<int>(), expected_argmax);
  std::vector<float> output = j["output"].get<std::vector<float>>();
  ASSERT_EQ(output.size(), expected.size());
  for (size_t i = 0; i < output.size(); ++i) ASSERT_NEAR(output[i], expected[i], 1e-4) << "element " << i;
}

// POST /v1/functions/tp-mlp/invoke with X-Phos-Restore-Mode: `mode`; the mode that served it
// (X-Phos-Restore-Mode of the response) into *served, the body returned.
std::string InvokeAs(const std::string& endpoint, const std::string& mode, const std::string& body, std::string* served) {
  CommandResult r = Run({"/usr/bin/curl", "-s", "-D", "-", "-X", "POST", "-H", "X-Phos-Restore-Mode: " + mode, "--data",
                         body, endpoint + "/v1/functions/tp-mlp/invoke"});
  size_t end = r.out.find("\r\n\r\n");
  if (end == std::string::npos) return r.out;
  std::string head = r.out.substr(0, end);
  const std::string key = "X-Phos-Restore-Mode: ";
  size_t at = head.find(key);
  served->clear();
  if (at != std::string::npos) served->assign(head.substr(at + key.size(), head.find("\r\n", at) - at - key.size()));
  return r.out.substr(end + 4);
}

TEST_F(TpMlpTest, RestoredInEveryModeGivesTheWarmBytes) {
  CommandResult r = PhosFn({"deploy", "tp-mlp", PHOS_TP_MLP_FUNCTION, "--gpus", "2", "--max-instances", "2", "--",
                            "--width", std::to_string(kShape.width), "--layers", std::to_string(kShape.layers)});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  constexpr int kRequests = 20;
  std::vector<std::string> warm(kRequests);
  std::string served;
  for (int i = 0; i < kRequests; ++i) {
    warm[i] = InvokeAs(endpoint(), "warm", "{\"seed\": " + std::to_string(200 + i) + ", \"full\": true}", &served);
    ASSERT_EQ(served, "warm") << warm[i];
    ExpectMatchesReference(warm[i], 200 + i);
  }
  for (const char* mode : {"cold-boot", "stop-the-world", "eager", "no-pool", "no-order", "phos"}) {
    for (int i = 0; i < kRequests; ++i) {
      SCOPED_TRACE(std::string(mode) + " request " + std::to_string(i));
      std::string body = InvokeAs(endpoint(), mode, "{\"seed\": " + std::to_string(200 + i) + ", \"full\": true}", &served);
      ASSERT_EQ(served, mode) << body;
      EXPECT_EQ(body, warm[i]);
    }
  }
}

// An instance on a device group (two devices, an NCCL communicator) checkpointed in each mode:
// restores in either instance range, the checkpointed one and the spare, give the warm answer.
TEST_F(TpMlpTest, ACheckpointedDeviceGroupInstanceRestoresToTheSameAnswers) {
  Deploy(2);  // one instance at a time: its range and a spare
  const std::string request = R"({"seed": 7, "full": true})";
  std::string served;
  ExpectMatchesReference(InvokeAs(endpoint(), "warm", request, &served), 7);
  ExpectCheckpointsRestoreTheSameAnswers("tp-mlp", request);
}

// A device group's instance moved to another phosd (docs/design.md D10): its two devices' buffers
// go there, that node's deploy restores them on a device group of its own (its communicator), and
// the requests sent here afterwards are answered there as the CPU reference says.
TEST_F(TpMlpTest, ADeviceGroupInstanceMovedToAnotherNodeAnswersThere) {
  PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES();
  PhosdNode other;
  ASSERT_NO_FATAL_FAILURE(other.Start(ExtraPhosdArgs(), phosd_env_));
  Deploy(2);
  CommandResult deployed =
      other.PhosFn({"deploy", "tp-mlp", PHOS_TP_MLP_FUNCTION, "--gpus", "2", "--", "--width",
                    std::to_string(kShape.width), "--layers", std::to_string(kShape.layers)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out << other.Log();
  ASSERT_TRUE(SettledToOneIdleInstance("tp-mlp"));
  std::string served;
  ExpectMatchesReference(InvokeAs(endpoint(), "warm", R"({"seed": 5, "full": true})", &served), 5);
  CommandResult moved =
      PhosFn({"migrate", "tp-mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << PhosdLog() << other.Log();
  for (uint64_t seed : {6, 7}) {
    CommandResult r = ::phos::testing::Run({"/usr/bin/curl", "-s", "-D", "-", "-X", "POST", "--data",
                           "{\"seed\": " + std::to_string(seed) + ", \"full\": true}",
                           endpoint() + "/v1/functions/tp-mlp/invoke"});
    HttpResponse answer = ParseCurl(r.out);
    ASSERT_EQ(answer.status, 200) << r.out;
    EXPECT_EQ(answer.headers["x-phos-node"], other.endpoint());
    ExpectMatchesReference(answer.body, seed);
  }
}

// A device group's instance does not move between the node's devices: refused, and it serves on.
TEST_F(TpMlpTest, ADeviceGroupInstanceIsNotMovedBetweenTheNodesDevices) {
  Deploy(2);
  ASSERT_TRUE(SettledToOneIdleInstance("tp-mlp"));
  CommandResult moved = PhosFn({"migrate", "tp-mlp", "--device", "1"});
  EXPECT_NE(moved.exit_code, 0) << moved.out;
  std::string served;
  ExpectMatchesReference(InvokeAs(endpoint(), "warm", R"({"seed": 8, "full": true})", &served), 8);
}

TEST_F(TpMlpTest, DeployedWithTwoGpusGivesTheCpuReference) {
  Deploy(2);
  for (uint64_t seed : {1, 7, 12345}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    CommandResult invoked =
        PhosFn({"invoke", "tp-mlp", "--data", "{\"seed\": " + std::to_string(seed) + ", \"full\": true}"});
    ASSERT_EQ(invoked.exit_code, 0) << invoked.out;
    ExpectMatchesReference(invoked.out, seed);
  }
  CommandResult listed = PhosFn({"ls", "--json"});
  ASSERT_EQ(listed.exit_code, 0);
  nlohmann::json j = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << listed.out;
  ASSERT_EQ(j["functions"].size(), 1u) << listed.out;
  EXPECT_EQ(j["functions"][0]["gpus"].get<int>(), 2);
}

// 0 is no GPU count at all; 3 and 9 are more than this node's 2 devices (PHOS_SIMGPU_DEVICES=2),
// refused by the count phosd's driver reports.
TEST_F(TpMlpTest, BadGpuCountIsRefusedAtRegistration) {
  const std::pair<int, std::string> cases[] = {{0, "gpus must be 1..72"},
                                               {3, "asks for 3 GPUs; this node has 2"},
                                               {9, "asks for 9 GPUs; this node has 2"}};
  for (const auto& [gpus, reason] : cases) {
    CommandResult r = CurlPost("/v1/functions", nlohmann::json{{"name", "tp-mlp"},
                                                                {"executable", PHOS_TP_MLP_FUNCTION},
                                                                {"gpus", gpus}}
                                                    .dump());
    ASSERT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find(reason), std::string::npos) << r.out;
  }
  CommandResult listed = PhosFn({"ls", "--json"});
  EXPECT_EQ(listed.out.find("tp-mlp"), std::string::npos) << listed.out;
}

}  // namespace
}  // namespace phos::testing
