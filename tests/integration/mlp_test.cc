// The first vertical slice end to end: phosd on simgpu, the mlp function deployed with phos-fn,
// invoked with phos-fn and with plain curl, its outputs checked against the CPU reference.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "mlp_expect.h"
#include "mlp_model.h"
#include "phosd_fixture.h"
#include "../testing/wait_until.h"

namespace phos::testing {
namespace {

class MlpTest : public PhosdTest {
 protected:
  void Deploy(int instances) {
    CommandResult r = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", std::to_string(instances), "--",
                              "--size-mib", "16", "--layers", "4"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // Starts `other`, a second phosd, and deploys mlp on both (there with `other_size_mib`), once
  // mlp here has settled to its one idle instance.
  void DeployOnTwoNodes(PhosdNode& other, int other_size_mib) {
    ASSERT_NO_FATAL_FAILURE(other.Start(ExtraPhosdArgs(), phosd_env_));
    Deploy(1);
    CommandResult deployed = other.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--",
                                           "--size-mib", std::to_string(other_size_mib), "--layers", "4"});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out << other.Log();
    ASSERT_TRUE(SettledToOneIdleInstance("mlp"));
  }
  // A request to mlp with `seed`, with the response's headers.
  HttpResponse InvokeMlp(int seed) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary",
                                     "{\"seed\": " + std::to_string(seed) + "}"};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.push_back(endpoint() + "/v1/functions/mlp/invoke");
    return ParseCurl(::phos::testing::Run(argv).out);
  }
};

TEST_F(MlpTest, DeployInvokeWithPhosFnAndCurl) {
  Deploy(1);
  CommandResult listed = PhosFn({"ls", "--json"});
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("\"mlp\""), std::string::npos) << listed.out;

  CommandResult invoked = PhosFn({"invoke", "mlp", "--data", R"({"seed": 7, "full": true})"});
  ASSERT_EQ(invoked.exit_code, 0) << invoked.out;
  ExpectMlpMatchesReference(invoked.out, 7, /*full=*/true);

  CommandResult curl = CurlPost("/v1/functions/mlp/invoke", R"({"seed": 7, "full": true})");
  ASSERT_EQ(curl.exit_code, 0);
  // The same request always gives the same response bytes.
  EXPECT_EQ(curl.out, invoked.out);
}

// An instance checkpointed in each mode (docs/design.md D10): the instances restored from there
// answer as it did.
TEST_F(MlpTest, ACheckpointedInstanceRestoresToTheSameAnswers) {
  Deploy(1);
  CommandResult invoked = PhosFn({"invoke", "mlp", "--data", R"({"seed": 9, "full": true})"});
  ASSERT_EQ(invoked.exit_code, 0) << invoked.out;
  ExpectMlpMatchesReference(invoked.out, 9, /*full=*/true);
  ExpectCheckpointsRestoreTheSameAnswers("mlp", R"({"seed": 9, "full": true})");
}

TEST_F(MlpTest, SixteenConcurrentInvocationsOverTwoInstances) {
  Deploy(2);
  std::vector<std::string> bodies(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      bodies[i] = CurlPost("/v1/functions/mlp/invoke", "{\"seed\": " + std::to_string(100 + i) + "}").out;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE("invocation " + std::to_string(i));
    ExpectMlpMatchesReference(bodies[i], 100 + i, /*full=*/false);
  }
}

// The deploy says what became of its sample request: served (and the first-touch order learned),
// or failed with the function's reason; a failed sample does not fail the deploy.
TEST_F(MlpTest, TheDeploySaysWhatBecameOfItsSampleRequest) {
  CommandResult served = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--sample", R"({"seed": 1})", "--", "--size-mib",
                                 "16", "--layers", "4"});
  ASSERT_EQ(served.exit_code, 0) << served.out;
  EXPECT_NE(served.out.find("sample request served; first-touch order learned"), std::string::npos) << served.out;
  CommandResult failed = PhosFn({"deploy", "mlp-bad-sample", PHOS_MLP_FUNCTION, "--sample", R"({"input": [1, 2, 3]})",
                                 "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(failed.exit_code, 0) << failed.out;
  EXPECT_NE(failed.out.find("sample request failed: "), std::string::npos) << failed.out;
  // The function serves anyway.
  CommandResult good = PhosFn({"invoke", "mlp-bad-sample", "--data", R"({"seed": 3})"});
  ASSERT_EQ(good.exit_code, 0) << good.out;
  ExpectMlpMatchesReference(good.out, 3, false);
}

// The sample request's calls also say which buffers are read-only (docs/design.md D14): no call's
// speculated write set names the weights and biases; the activations are written (the input by a
// host-to-device copy, each layer's output by its GEMM and bias kernel).
TEST_F(MlpTest, TheSampleRequestLearnsWhichBuffersAreReadOnly) {
  constexpr int kLayers = 4;
  CommandResult served = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--sample", R"({"seed": 1})", "--",
                                 "--size-mib", "16", "--layers", std::to_string(kLayers)});
  ASSERT_EQ(served.exit_code, 0) << served.out;
  // phos-snapshot opens the store read-only beside the running phosd.
  CommandResult inspect =
      ::phos::testing::Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir() + "/store", "inspect", "mlp"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
  static const std::regex kBuffer(R"(^\s*buffer\s+\d+\s+\S+\s+(\d+) B\s.*rank\s+-?\d+\s+(\S+)\s)");
  int weights_read_only = 0;
  std::map<std::string, int> classes;
  std::istringstream lines(inspect.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, kBuffer)) continue;
    ++classes[m[2]];
    // The weight matrices are the large buffers; biases and activations are one row each.
    if (std::stoull(m[1]) > 4096 && m[2] == "read-only") ++weights_read_only;
  }
  EXPECT_EQ(weights_read_only, kLayers) << inspect.out;
  EXPECT_EQ(classes["read-only"], 2 * kLayers) << "weights and biases\n" << inspect.out;
  EXPECT_EQ(classes["read-write"], 2) << "the activations\n" << inspect.out;
  EXPECT_EQ(classes.size(), 2u) << inspect.out;
}

TEST_F(MlpTest, BadRequestIsAClientErrorAndTheFunctionKeepsServing) {
  Deploy(1);
  CommandResult bad = PhosFn({"invoke", "mlp", "--data", R"({"input": [1, 2, 3]})"});
  EXPECT_NE(bad.exit_code, 0);
  CommandResult good = PhosFn({"invoke", "mlp", "--data", R"({"seed": 3})"});
  ASSERT_EQ(good.exit_code, 0);
  ExpectMlpMatchesReference(good.out, 3, false);
}

// Live migration between the node's devices (docs/design.md D10; PHOS_SIMGPU_DEVICES=2): the
// instance moves 0 -> 1 -> 0 -> 1 while three clients keep a request outstanding each (max one
// instance: whatever arrives during a move waits for it), and every answer is the CPU reference's.
TEST_F(MlpTest, AnInstanceMovedBetweenDevicesAnswersEveryRequestSentDuringTheMove) {
  Deploy(1);
  ASSERT_TRUE(SettledToOneIdleInstance("mlp"));
  std::atomic<bool> moving{true};
  std::mutex mu;
  std::vector<std::pair<int, std::string>> answers;  // seed, body
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; moving.load() || i < 2; ++i) {
        const int seed = 1000 * (c + 1) + i;
        std::string body = CurlPost("/v1/functions/mlp/invoke", "{\"seed\": " + std::to_string(seed) + "}").out;
        std::lock_guard lock(mu);
        answers.emplace_back(seed, std::move(body));
      }
    });
  }
  auto device_of_instance = [&] {
    CommandResult listed = PhosFn({"instances", "mlp", "--json"});
    nlohmann::json j = nlohmann::json::parse(listed.out, nullptr, false);
    if (j.is_discarded() || !j.contains("instances") || j["instances"].size() != 1) return -1;
    return j["instances"][0].value("device", -1);
  };
  // Device 1's pool leases a context to nobody but the instance (device 0's also holds the
  // snapshot store's for its pinned memory).
  auto leased_on_device_1 = [&] {
    std::string metrics = ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/metrics"}).out;
    std::smatch m;
    static const std::regex kLeased(R"(phos_ctxpool_contexts\{device="1",state="leased"\} (\S+))");
    return std::regex_search(metrics, m, kLeased) ? std::stoi(m[1]) : -1;
  };
  int moves = 0;
  for (int to : {1, 0, 1}) {
    SCOPED_TRACE("to device " + std::to_string(to));
    CommandResult moved = PhosFn({"migrate", "mlp", "--device", std::to_string(to)});
    ASSERT_EQ(moved.exit_code, 0) << moved.out << PhosdLog();
    EXPECT_NE(moved.out.find("to device " + std::to_string(to)), std::string::npos) << moved.out;
    EXPECT_EQ(device_of_instance(), to);
    EXPECT_EQ(leased_on_device_1(), to == 1 ? 1 : 0);
    ++moves;
  }
  moving = false;
  for (auto& t : clients) t.join();
  EXPECT_EQ(moves, 3);
  ASSERT_GE(answers.size(), 6u);
  for (const auto& [seed, body] : answers) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ExpectMlpMatchesReference(body, seed, /*full=*/false);
  }
}

// The versions of `function` a phosd's store holds (phos-snapshot opens it read-only beside it).
std::string StoredVersions(const std::string& data_dir) {
  return Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir + "/store", "ls"}).out;
}

// An instance moved to another phosd (docs/design.md D10): every request sent here during the move
// is answered as the CPU reference says, and those after it by the other node (X-Phos-Node), which
// was sent only the chunks it lacked (it deployed mlp too: it holds the weights). This node then
// runs no instance of mlp and says where it went.
TEST_F(MlpTest, AnInstanceMovedToAnotherNodeAnswersEveryRequestSentDuringTheMove) {
  PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES();
  PhosdNode other;
  ASSERT_NO_FATAL_FAILURE(DeployOnTwoNodes(other, 16));
  std::atomic<bool> moving{true};
  std::mutex mu;
  std::vector<std::pair<int, HttpResponse>> answers;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; moving.load() || i < 2; ++i) {
        const int seed = 1000 * (c + 1) + i;
        HttpResponse r = InvokeMlp(seed);
        std::lock_guard lock(mu);
        answers.emplace_back(seed, std::move(r));
      }
    });
  }
  CommandResult moved =
      PhosFn({"migrate", "mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  moving = false;
  for (auto& t : clients) t.join();
  ASSERT_EQ(moved.exit_code, 0) << moved.out << PhosdLog() << other.Log();
  std::smatch sent;
  ASSERT_TRUE(std::regex_search(moved.out, sent, std::regex(R"((\d+) chunks sent, (\d+) bytes)"))) << moved.out;
  EXPECT_LT(std::stoull(sent[2]), 16ull << 20) << "the weights went although the other node holds them: " << moved.out;
  for (int seed : {7001, 7002}) answers.emplace_back(seed, InvokeMlp(seed));
  ASSERT_GE(answers.size(), 8u);
  for (const auto& [seed, r] : answers) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectMlpMatchesReference(r.body, seed, /*full=*/false);
    if (seed > 7000) {
      EXPECT_EQ(r.headers.count("x-phos-node") ? r.headers.at("x-phos-node") : "", other.endpoint());
    }
  }
  EXPECT_TRUE(WaitUntil([&] {
    nlohmann::json j = nlohmann::json::parse(PhosFn({"instances", "mlp", "--json"}).out, nullptr, false);
    return j.is_object() && j.contains("instances") && j["instances"].empty();
  })) << "an instance of mlp still runs here";
  EXPECT_NE(PhosFn({"ls", "--json"}).out.find("\"moved_to\":\"" + other.endpoint() + "\""), std::string::npos);
  // Moved once: it does not move again from here.
  EXPECT_NE(PhosFn({"migrate", "mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()}).exit_code, 0);
}

// Invocations forwarded to the node an instance moved to count against the function's max_queue,
// as they would waiting here: with that node silent, max_queue of them are held and the next is
// refused at once (429); once it answers again, those held are answered as the CPU reference says.
TEST_F(MlpTest, InvocationsForwardedToAMovedInstanceAreBoundedByTheFunctionsMaxQueue) {
  PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES();
  PhosdNode other;
  ASSERT_NO_FATAL_FAILURE(other.Start(ExtraPhosdArgs(), phosd_env_));
  CommandResult deployed = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--max-queue", "2", "--",
                                   "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  deployed = other.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib", "16", "--layers",
                           "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out << other.Log();
  ASSERT_TRUE(SettledToOneIdleInstance("mlp"));
  CommandResult moved =
      PhosFn({"migrate", "mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << PhosdLog() << other.Log();

  auto forwarding = [&] {
    nlohmann::json j = nlohmann::json::parse(PhosFn({"ls", "--json"}).out, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) return -1;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") == "mlp") return f.value("forwarding", -1);
    }
    return -1;
  };
  EXPECT_EQ(forwarding(), 0);
  ASSERT_EQ(kill(other.pid(), SIGSTOP), 0);
  std::vector<HttpResponse> held(2);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) clients.emplace_back([&, i] { held[i] = InvokeMlp(500 + i); });
  const bool both_held = WaitUntil([&] { return forwarding() == 2; });
  HttpResponse refused = both_held ? InvokeMlp(600) : HttpResponse{};
  ASSERT_EQ(kill(other.pid(), SIGCONT), 0);
  for (auto& t : clients) t.join();
  ASSERT_TRUE(both_held) << "forwarding: " << forwarding();
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_NE(refused.body.find("max_queue"), std::string::npos) << refused.body;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("seed " + std::to_string(500 + i));
    ASSERT_EQ(held[i].status, 200) << held[i].body;
    ExpectMlpMatchesReference(held[i].body, 500 + i, /*full=*/false);
  }
  EXPECT_TRUE(WaitUntil([&] { return forwarding() == 0; }));
  HttpResponse after = InvokeMlp(700);
  ASSERT_EQ(after.status, 200) << after.body;
  ExpectMlpMatchesReference(after.body, 700, /*full=*/false);
}

// A node whose devices are of another kind (here an A100's profile, not the CI device) refuses the
// snapshot, naming both kinds; the instance serves on here.
TEST_F(MlpTest, AMoveToANodeOfAnotherDeviceKindIsRefusedNamingBoth) {
  PhosdNode other;
  std::vector<std::pair<std::string, std::string>> env = phosd_env_;
  env.emplace_back("PHOS_SIMGPU_PROFILE", "a100-pcie4");
  ASSERT_NO_FATAL_FAILURE(other.Start(ExtraPhosdArgs(), env));
  Deploy(1);
  CommandResult deployed = other.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib",
                                         "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out << other.Log();
  ASSERT_TRUE(SettledToOneIdleInstance("mlp"));
  CommandResult moved =
      PhosFn({"migrate", "mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  EXPECT_NE(moved.exit_code, 0) << moved.out;
  EXPECT_NE(PhosdLog().find("different kinds of device (phos simgpu CI device (a100-pcie4 link) and NVIDIA A100 80GB PCIe)"),
            std::string::npos)
      << PhosdLog();
  HttpResponse here = InvokeMlp(12);
  ASSERT_EQ(here.status, 200) << here.body << PhosdLog();
  ExpectMlpMatchesReference(here.body, 12, /*full=*/false);
  EXPECT_EQ(here.headers.count("x-phos-node"), 0u);
}

// A move the other node refuses (its mlp is laid out otherwise: the snapshot's buffers are not its
// deploy's) leaves the instance serving here, restored from the checkpoint, and nothing kept
// there; what reaches the import routes otherwise is checked too, each refusal with its status.
TEST_F(MlpTest, AMoveTheOtherNodeRefusesLeavesTheInstanceServingHere) {
  PhosdNode other;
  ASSERT_NO_FATAL_FAILURE(DeployOnTwoNodes(other, 8));
  const std::string kept_there = StoredVersions(other.data_dir());
  CommandResult moved =
      PhosFn({"migrate", "mlp", "--node", other.endpoint(), "--node-token-file", other.token_file()});
  EXPECT_NE(moved.exit_code, 0) << moved.out;
  HttpResponse here = InvokeMlp(11);
  ASSERT_EQ(here.status, 200) << here.body << PhosdLog();
  ExpectMlpMatchesReference(here.body, 11, /*full=*/false);
  EXPECT_EQ(here.headers.count("x-phos-node"), 0u);
  EXPECT_EQ(StoredVersions(other.data_dir()), kept_there);

  // The import routes, as a hostile sender would call them.
  auto call = [&](const std::string& method, const std::string& path, const std::string& body, bool admin = true) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", method, "--data-binary", body};
    if (admin) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + AdminToken(other.data_dir())});
    argv.push_back(other.endpoint() + path);
    return ParseCurl(::phos::testing::Run(argv).out);
  };
  const std::string zeros(4096, '\0');
  struct Case {
    std::string method, path, body;
    int status;
    bool admin = true;
  } cases[] = {
      {"PUT", "/v1/chunks/0123456789abcdef0123456789abcdef", zeros, 400},  // not those bytes' id
      {"PUT", "/v1/chunks/not-a-chunk-id", zeros, 400},
      {"POST", "/v1/chunks/missing", R"({"chunks": ["zz"]})", 400},
      {"POST", "/v1/chunks/missing", R"({"chunks": 3})", 400},
      {"POST", "/v1/functions/mlp/ranges/0/snapshot", "not a manifest", 400},
      {"POST", "/v1/functions/mlp/ranges/x/snapshot", "", 400},
      {"POST", "/v1/functions/nope/ranges/0/snapshot", "", 404},
      {"POST", "/v1/chunks/missing", R"({"chunks": []})", 401, false},
      {"PUT", "/v1/chunks/0123456789abcdef0123456789abcdef", zeros, 401, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body.substr(0, 40));
    HttpResponse r = call(c.method, c.path, c.body, c.admin);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  }
  // A chunk it does hold is not asked for: the one just refused is not there.
  HttpResponse asked = call("POST", "/v1/chunks/missing", R"({"chunks": ["0123456789abcdef0123456789abcdef"]})");
  ASSERT_EQ(asked.status, 200) << asked.body;
  EXPECT_NE(asked.body.find("0123456789abcdef0123456789abcdef"), std::string::npos) << asked.body;
  EXPECT_EQ(StoredVersions(other.data_dir()), kept_there);
  HttpResponse still = call("POST", "/v1/functions/mlp/invoke", R"({"seed": 12})");
  EXPECT_EQ(still.status, 200) << still.body;
}

// What a migration cannot do is refused with the reason, and the instance serves on where it was.
TEST_F(MlpTest, AMigrationThatCannotBeIsRefusedAndTheInstanceServesOn) {
  Deploy(1);
  ASSERT_TRUE(SettledToOneIdleInstance("mlp"));
  struct Case {
    std::string path, body;
    int status;
  } cases[] = {
      {"/v1/functions/mlp/migrate", R"({"device": 2})", 400},          // the node has 2 devices
      {"/v1/functions/mlp/migrate", R"({"device": 0})", 400},          // where it runs
      {"/v1/functions/mlp/migrate", R"({"device": -1})", 400},
      {"/v1/functions/mlp/migrate", R"({"device": "1"})", 400},
      {"/v1/functions/mlp/migrate", R"({"device": 1, "x": 1})", 400},
      {"/v1/functions/mlp/migrate", R"([1])", 400},
      {"/v1/functions/mlp/migrate", "", 400},
      {"/v1/functions/mlp/instances/0/migrate", R"({"device": 1})", 400},
      {"/v1/functions/mlp/instances/x/migrate", R"({"device": 1})", 400},
      {"/v1/functions/mlp/instances/999/migrate", R"({"device": 1})", 404},
      {"/v1/functions/nope/migrate", R"({"device": 1})", 404},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body);
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data", c.body};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.push_back(endpoint() + c.path);
    HttpResponse r = ParseCurl(::phos::testing::Run(argv).out);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_FALSE(r.body.empty());
  }
  CommandResult good = PhosFn({"invoke", "mlp", "--data", R"({"seed": 5})"});
  ASSERT_EQ(good.exit_code, 0);
  ExpectMlpMatchesReference(good.out, 5, false);
  CommandResult listed = PhosFn({"instances", "mlp", "--json"});
  nlohmann::json j = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(j.contains("instances") && j["instances"].size() == 1) << listed.out;
  EXPECT_EQ(j["instances"][0].value("device", -1), 0);

  // Two moves to device 1 at once: one moves it; the other is refused, whether it came while the
  // first was queued or under way ("being moved") or after it ("already runs on device 1").
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data", R"({"device": 1})"};
  for (const std::string& h : AdminHeader()) argv.push_back(h);
  argv.push_back(endpoint() + "/v1/functions/mlp/migrate");
  HttpResponse answers[2];
  std::thread second([&] { answers[1] = ParseCurl(::phos::testing::Run(argv).out); });
  answers[0] = ParseCurl(::phos::testing::Run(argv).out);
  second.join();
  EXPECT_EQ((answers[0].status == 200) + (answers[1].status == 200), 1) << answers[0].body << answers[1].body;
  for (const HttpResponse& a : answers) {
    if (a.status != 200) {
      EXPECT_TRUE(a.status == 400 || a.status == 503) << a.status << " " << a.body;
    }
  }
  CommandResult after = PhosFn({"invoke", "mlp", "--data", R"({"seed": 6})"});
  ASSERT_EQ(after.exit_code, 0);
  ExpectMlpMatchesReference(after.out, 6, false);
}

}  // namespace
}  // namespace phos::testing
