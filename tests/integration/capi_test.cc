// The C API (phos.h, libphos.so) against a real phosd on simgpu: mlp deployed, invoked blocking,
// streamed and from many threads over one client, described, checkpointed and removed, each answer
// checked against the CPU reference; the statuses phosd's refusals come back as; and the C example
// (examples/capi/gateway.c) run against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlp_expect.h"
#include "phos.h"
#include "phosd_fixture.h"
#include "../testing/wait_until.h"

namespace phos::testing {
namespace {

class CapiPhosdTest : public PhosdTest {
 protected:
  void SetUp() override {
    PhosdTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(phos_connect(endpoint().c_str(), admin_token().c_str(), &client_), PHOS_OK)
        << phos_last_error();
  }
  void TearDown() override {
    EXPECT_EQ(phos_close(client_), PHOS_OK);
    PhosdTest::TearDown();
  }

  // Deploys mlp as `name` at the shape mlp_expect.h checks, one warm instance; `upload`: as an
  // artifact rather than by its path.
  phos_status DeployMlp(phos_client* client, const char* name, bool upload, char** answer = nullptr) {
    const char* args[] = {"--size-mib", "16", "--layers", "4"};
    phos_deploy_options options{};
    options.struct_size = sizeof(options);
    options.name = name;
    options.executable = PHOS_MLP_FUNCTION;
    options.upload = upload ? 1 : 0;
    options.args = args;
    options.arg_count = 4;
    options.instances = 1;
    return phos_deploy(client, &options, answer);
  }

  // phos_invoke's answer to `request`; a test failure when it is not PHOS_OK.
  std::string Invoke(const char* name, const std::string& request,
                     const phos_invoke_options* options = nullptr, phos_invoke_info* info = nullptr) {
    void* response = nullptr;
    size_t len = 0;
    phos_status s =
        phos_invoke(client_, name, request.data(), request.size(), options, &response, &len, info);
    EXPECT_EQ(s, PHOS_OK) << phos_status_name(s) << ": " << phos_last_error();
    if (s != PHOS_OK) return "";
    std::string body(static_cast<const char*>(response), len);
    EXPECT_EQ(static_cast<const char*>(response)[len], '\0') << "the answer is NUL-terminated";
    phos_free(response);
    return body;
  }

  // What phos_invoke answers for `request`, its answer dropped.
  phos_status InvokeStatus(phos_client* client, const char* name, const std::string& request,
                           const phos_invoke_options* options = nullptr, phos_invoke_info* info = nullptr) {
    void* response = nullptr;
    size_t len = 0;
    phos_status s = phos_invoke(client, name, request.data(), request.size(), options, &response, &len, info);
    phos_free(response);
    return s;
  }

  phos_client* client_ = nullptr;
};

// The pieces of a streamed answer, and how many times the callback ran.
struct Pieces {
  std::string bytes;
  int calls = 0;
};
int CollectPiece(void* user, const void* data, size_t len) {
  auto* pieces = static_cast<Pieces*>(user);
  pieces->bytes.append(static_cast<const char*>(data), len);
  ++pieces->calls;
  return 0;
}

TEST_F(CapiPhosdTest, DeployInvokeBlockingAndStreamedThenRemove) {
  char* deployed = nullptr;
  ASSERT_EQ(DeployMlp(client_, "mlp", /*upload=*/false, &deployed), PHOS_OK) << phos_last_error();
  ASSERT_NE(deployed, nullptr);
  nlohmann::json answer = nlohmann::json::parse(deployed, nullptr, false);
  phos_free(deployed);
  ASSERT_TRUE(answer.is_object());
  EXPECT_EQ(answer.value("name", ""), "mlp");
  EXPECT_TRUE(answer.contains("contexts_ready")) << answer.dump();
  EXPECT_EQ(DeployMlp(client_, "mlp", false), PHOS_ALREADY_EXISTS) << phos_last_error();

  const std::string request = R"({"seed": 7, "full": true})";
  phos_invoke_info info{};
  info.struct_size = sizeof(info);
  const std::string blocking = Invoke("mlp", request, nullptr, &info);
  ExpectMlpMatchesReference(blocking, 7, /*full=*/true);
  EXPECT_STRNE(info.restore_mode, "") << "phosd says which mode served every answer";

  Pieces pieces;
  phos_status s = phos_invoke_stream(client_, "mlp", request.data(), request.size(), nullptr, CollectPiece,
                                     &pieces, nullptr);
  ASSERT_EQ(s, PHOS_OK) << phos_last_error();
  EXPECT_GE(pieces.calls, 1);
  EXPECT_EQ(pieces.bytes, blocking);

  // A new instance restored for the request: phosd says how, and when its first byte left.
  phos_invoke_options restore{};
  restore.struct_size = sizeof(restore);
  restore.restore_mode = "phos";
  phos_invoke_info restored{};
  restored.struct_size = sizeof(restored);
  ExpectMlpMatchesReference(Invoke("mlp", R"({"seed": 8})", &restore, &restored), 8, /*full=*/false);
  EXPECT_STREQ(restored.restore_mode, "phos");
  EXPECT_GE(restored.first_byte_us, 0);

  // The function's own refusal of a request it cannot read.
  EXPECT_EQ(InvokeStatus(client_, "mlp", R"({"input": [1, 2, 3]})"), PHOS_FUNCTION_ERROR);
  EXPECT_STRNE(phos_last_error(), "");

  ASSERT_EQ(phos_remove(client_, "mlp"), PHOS_OK) << phos_last_error();
  EXPECT_EQ(InvokeStatus(client_, "mlp", request), PHOS_NOT_FOUND) << phos_last_error();
  EXPECT_EQ(phos_remove(client_, "mlp"), PHOS_NOT_FOUND) << phos_last_error();
}

// phosd on a Unix socket as well (--listen-unix): the C API and phos-fn reach it at unix:///PATH,
// deploys and invocations included, with the same tokens.
class CapiUnixSocketTest : public CapiPhosdTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--listen-unix", socket_path()}; }
  std::string socket_path() const { return data_dir() + "/api.sock"; }
};

TEST_F(CapiUnixSocketTest, TheCApiAndPhosFnReachPhosdOverItsUnixSocket) {
  const std::string endpoint = "unix://" + socket_path();
  phos_client* over_unix = nullptr;
  ASSERT_EQ(phos_connect(endpoint.c_str(), admin_token().c_str(), &over_unix), PHOS_OK) << phos_last_error();
  ASSERT_EQ(DeployMlp(over_unix, "mlp", /*upload=*/true), PHOS_OK) << phos_last_error();
  void* response = nullptr;
  size_t len = 0;
  const std::string request = R"({"seed": 3})";
  ASSERT_EQ(phos_invoke(over_unix, "mlp", request.data(), request.size(), nullptr, &response, &len, nullptr), PHOS_OK)
      << phos_last_error();
  const std::string over_socket(static_cast<const char*>(response), len);
  phos_free(response);
  // The same function answers the same over TCP.
  EXPECT_EQ(Invoke("mlp", request), over_socket);
  phos_client* anonymous = nullptr;
  ASSERT_EQ(phos_connect(endpoint.c_str(), nullptr, &anonymous), PHOS_OK) << phos_last_error();
  EXPECT_EQ(phos_remove(anonymous, "mlp"), PHOS_UNAUTHENTICATED) << "a Unix socket is no way around the admin token";
  EXPECT_EQ(phos_close(anonymous), PHOS_OK);
  EXPECT_EQ(phos_close(over_unix), PHOS_OK);

  CommandResult ls = ::phos::testing::Run({PHOS_PHOS_FN, "--endpoint", endpoint, "--token-file",
                                           data_dir() + "/admin.token", "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls.out;
  EXPECT_NE(ls.out.find("mlp"), std::string::npos) << ls.out;
  CommandResult bad = ::phos::testing::Run({PHOS_PHOS_FN, "--endpoint", "unix://relative.sock", "ls"});
  EXPECT_EQ(bad.exit_code, 2);
}

// Events as a watch hands them over: the warm instance that came up, one restored for a request,
// what ended with the function's removal; none once the watch is stopped.
struct Told {
  std::mutex mu;
  std::vector<std::string> events;  // "restored mlp v1 #3 phos"
  std::vector<std::string> Copy() {
    std::lock_guard lock(mu);
    return events;
  }
};
void Tell(void* user, const phos_event* e) {
  auto* told = static_cast<Told*>(user);
  static const char* kNames[] = {"?", "started", "restored", "evicted", "ended"};
  std::lock_guard lock(told->mu);
  told->events.push_back(fmt::format("{} {} v{} #{} {}", kNames[e->kind >= 1 && e->kind <= 4 ? e->kind : 0],
                                     e->function, e->version, e->instance, e->mode));
}

TEST_F(CapiPhosdTest, AWatchTellsWhatBecomesOfInstances) {
  Told told;
  phos_watch* watch = nullptr;
  ASSERT_EQ(phos_watch_events(client_, Tell, &told, &watch), PHOS_OK) << phos_last_error();
  // Stopped before `told` goes, whatever ends the test.
  struct Stop {
    phos_watch** watch;
    ~Stop() { phos_watch_stop(*watch); }
  } stop{&watch};
  ASSERT_EQ(DeployMlp(client_, "mlp", /*upload=*/false), PHOS_OK) << phos_last_error();
  auto has = [&](const std::string& prefix) {
    for (const std::string& e : told.Copy()) {
      if (e.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(WaitUntil([&] { return has("restored mlp v1 "); })) << fmt::format("{}", fmt::join(told.Copy(), "; "));
  phos_invoke_options restore{};
  restore.struct_size = sizeof(restore);
  restore.restore_mode = "phos";
  phos_invoke_info info{};
  info.struct_size = sizeof(info);
  Invoke("mlp", R"({"seed": 1})", &restore, &info);
  EXPECT_TRUE(WaitUntil([&] { return has("evicted mlp v1 "); })) << fmt::format("{}", fmt::join(told.Copy(), "; "));
  ASSERT_EQ(phos_remove(client_, "mlp"), PHOS_OK) << phos_last_error();
  EXPECT_TRUE(WaitUntil([&] {
    std::vector<std::string> now = told.Copy();
    return std::count_if(now.begin(), now.end(), [](const std::string& e) { return e.rfind("ended", 0) == 0; }) >= 2;
  })) << fmt::format("{}", fmt::join(told.Copy(), "; "));
  EXPECT_EQ(phos_watch_stop(watch), PHOS_OK) << phos_last_error();
  watch = nullptr;
  // A NULL watch stops as nothing; a watch needs a callback.
  EXPECT_EQ(phos_watch_stop(nullptr), PHOS_OK);
  EXPECT_EQ(phos_watch_events(client_, nullptr, nullptr, &watch), PHOS_INVALID_ARGUMENT);
}

TEST_F(CapiPhosdTest, RefusalsComeBackAsTheirStatuses) {
  // phosd answers 403 to a wrong token and 401 to none.
  phos_client* wrong = nullptr;
  ASSERT_EQ(phos_connect(endpoint().c_str(), "not-the-admin-token", &wrong), PHOS_OK) << phos_last_error();
  EXPECT_EQ(DeployMlp(wrong, "mlp", false), PHOS_PERMISSION_DENIED) << phos_last_error();
  EXPECT_NE(std::string(phos_last_error()).find("HTTP 403"), std::string::npos) << phos_last_error();
  EXPECT_EQ(phos_remove(wrong, "mlp"), PHOS_PERMISSION_DENIED) << phos_last_error();
  EXPECT_EQ(phos_close(wrong), PHOS_OK);
  phos_client* anonymous = nullptr;
  ASSERT_EQ(phos_connect(endpoint().c_str(), nullptr, &anonymous), PHOS_OK) << phos_last_error();
  EXPECT_EQ(DeployMlp(anonymous, "mlp", false), PHOS_UNAUTHENTICATED) << phos_last_error();
  char* json = nullptr;
  EXPECT_EQ(phos_list(anonymous, &json), PHOS_OK) << "listing is open";
  phos_free(json);
  EXPECT_EQ(phos_close(anonymous), PHOS_OK);

  // Nothing of that name.
  EXPECT_EQ(InvokeStatus(client_, "nothing-here", "{}"), PHOS_NOT_FOUND) << phos_last_error();
  EXPECT_EQ(phos_describe(client_, "nothing-here", &json), PHOS_NOT_FOUND) << phos_last_error();
  EXPECT_EQ(json, nullptr);
  EXPECT_EQ(phos_checkpoint(client_, "nothing-here", 0, nullptr, nullptr), PHOS_NOT_FOUND)
      << phos_last_error();

  // Refused before anything is sent.
  EXPECT_EQ(InvokeStatus(client_, "a/b", "{}"), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(InvokeStatus(client_, "..", "{}"), PHOS_INVALID_ARGUMENT);
  phos_invoke_options bad_mode{};
  bad_mode.struct_size = sizeof(bad_mode);
  bad_mode.restore_mode = "sometimes";
  EXPECT_EQ(InvokeStatus(client_, "mlp", "{}", &bad_mode), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("sometimes"), std::string::npos) << phos_last_error();
  phos_deploy_options no_executable{};
  no_executable.struct_size = sizeof(no_executable);
  no_executable.name = "mlp";
  EXPECT_EQ(phos_deploy(client_, &no_executable, nullptr), PHOS_INVALID_ARGUMENT);
  phos_deploy_options missing_file = no_executable;
  missing_file.executable = "/nonexistent/mlp";
  missing_file.upload = 1;
  EXPECT_EQ(phos_deploy(client_, &missing_file, nullptr), PHOS_INVALID_ARGUMENT);
  // An executable outside phosd's --functions-dir is phosd's to refuse.
  phos_deploy_options outside = no_executable;
  outside.executable = "/bin/sh";
  EXPECT_EQ(phos_deploy(client_, &outside, nullptr), PHOS_INVALID_ARGUMENT) << phos_last_error();
  EXPECT_NE(std::string(phos_last_error()).find("HTTP 400"), std::string::npos) << phos_last_error();
}

// A struct_size below the first version's is refused, whichever struct carries it.
TEST_F(CapiPhosdTest, AStructSizeBelowTheFirstVersionsIsRefused) {
  phos_deploy_options deploy{};
  deploy.struct_size = sizeof(size_t);
  deploy.name = "mlp";
  deploy.executable = PHOS_MLP_FUNCTION;
  EXPECT_EQ(phos_deploy(client_, &deploy, nullptr), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("struct_size"), std::string::npos) << phos_last_error();

  phos_invoke_options options{};
  options.struct_size = 0;
  EXPECT_EQ(InvokeStatus(client_, "mlp", "{}", &options), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("phos_invoke_options"), std::string::npos)
      << phos_last_error();

  phos_invoke_info info{};
  info.struct_size = sizeof(info) - sizeof(int64_t);
  EXPECT_EQ(InvokeStatus(client_, "mlp", "{}", nullptr, &info), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("phos_invoke_info"), std::string::npos) << phos_last_error();

  // Nothing was deployed meanwhile.
  char* json = nullptr;
  ASSERT_EQ(phos_list(client_, &json), PHOS_OK) << phos_last_error();
  nlohmann::json listed = nlohmann::json::parse(json, nullptr, false);
  phos_free(json);
  ASSERT_TRUE(listed.contains("functions")) << listed.dump();
  EXPECT_TRUE(listed["functions"].empty()) << listed.dump();
}

// One client, many threads at once: every answer is its own request's.
TEST_F(CapiPhosdTest, OneClientServesManyThreadsAtOnce) {
  ASSERT_EQ(DeployMlp(client_, "mlp", false), PHOS_OK) << phos_last_error();
  constexpr int kThreads = 8;
  constexpr int kEach = 3;
  std::vector<std::vector<std::string>> bodies(kThreads, std::vector<std::string>(kEach));
  std::vector<phos_status> statuses(kThreads * kEach, PHOS_INTERNAL);
  std::vector<std::string> errors(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string request = "{\"seed\": " + std::to_string(100 + t * kEach + i) + "}";
        void* response = nullptr;
        size_t len = 0;
        statuses[t * kEach + i] =
            phos_invoke(client_, "mlp", request.data(), request.size(), nullptr, &response, &len, nullptr);
        errors[t * kEach + i] = phos_last_error();
        if (response != nullptr) bodies[t][i].assign(static_cast<const char*>(response), len);
        phos_free(response);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      SCOPED_TRACE("thread " + std::to_string(t) + ", request " + std::to_string(i));
      ASSERT_EQ(statuses[t * kEach + i], PHOS_OK) << errors[t * kEach + i];
      ExpectMlpMatchesReference(bodies[t][i], 100 + t * kEach + i, /*full=*/false);
    }
  }
}

// An uploaded artifact, described, checkpointed, and phosd's metrics.
TEST_F(CapiPhosdTest, AnUploadedFunctionIsDescribedCheckpointedAndCounted) {
  ASSERT_EQ(DeployMlp(client_, "mlp-artifact", /*upload=*/true), PHOS_OK) << phos_last_error();
  ExpectMlpMatchesReference(Invoke("mlp-artifact", R"({"seed": 3})"), 3, /*full=*/false);

  char* json = nullptr;
  ASSERT_EQ(phos_describe(client_, "mlp-artifact", &json), PHOS_OK) << phos_last_error();
  nlohmann::json described = nlohmann::json::parse(json, nullptr, false);
  phos_free(json);
  ASSERT_TRUE(described.is_object()) << described.dump();
  EXPECT_EQ(described["function"].value("name", ""), "mlp-artifact") << described.dump();
  EXPECT_TRUE(described["function"].contains("state")) << described.dump();
  ASSERT_TRUE(described["instances"].is_array()) << described.dump();
  EXPECT_GE(described["instances"].size(), 1u) << described.dump();

  ASSERT_EQ(phos_list(client_, &json), PHOS_OK) << phos_last_error();
  EXPECT_NE(std::string(json).find("\"mlp-artifact\""), std::string::npos) << json;
  phos_free(json);

  char* checkpoint = nullptr;
  ASSERT_EQ(phos_checkpoint(client_, "mlp-artifact", 0, "soft-cow", &checkpoint), PHOS_OK)
      << phos_last_error();
  nlohmann::json taken = nlohmann::json::parse(checkpoint, nullptr, false);
  phos_free(checkpoint);
  EXPECT_EQ(taken.value("mode", ""), "soft-cow") << taken.dump();
  EXPECT_TRUE(taken.contains("version")) << taken.dump();
  EXPECT_EQ(phos_checkpoint(client_, "mlp-artifact", 0, "sideways", nullptr), PHOS_INVALID_ARGUMENT);
  ExpectMlpMatchesReference(Invoke("mlp-artifact", R"({"seed": 4})"), 4, /*full=*/false);

  char* metrics = nullptr;
  ASSERT_EQ(phos_stats(client_, &metrics), PHOS_OK) << phos_last_error();
  EXPECT_NE(std::string(metrics).find("phos_invocations_total"), std::string::npos) << metrics;
  phos_free(metrics);
}

// The lines of the example's output that begin with `prefix`, without it.
std::vector<std::string> LinesAfter(const std::string& out, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line.substr(prefix.size()));
  }
  return found;
}

TEST_F(CapiPhosdTest, TheCExampleDeploysInvokesAndRemoves) {
  Result<CommandOutput> run = RunCommand({.argv = {PHOS_CAPI_GATEWAY, endpoint(), PHOS_MLP_FUNCTION, "11"},
                                          .env = {{"PHOS_TOKEN", admin_token()}}},
                                         std::chrono::minutes(5));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_TRUE(run->status.success()) << run->status.ToString() << "\n" << run->output;
  const std::string& out = run->output;
  EXPECT_NE(out.find("deployed mlp\n"), std::string::npos) << out;
  EXPECT_NE(out.find("removed mlp\n"), std::string::npos) << out;
  // "blocking (served warm): {...}" and "streamed: {...}"
  std::vector<std::string> blocking = LinesAfter(out, "blocking (served ");
  std::vector<std::string> streamed = LinesAfter(out, "streamed: ");
  ASSERT_EQ(blocking.size(), 1u) << out;
  ASSERT_EQ(streamed.size(), 1u) << out;
  const std::string blocking_body = blocking[0].substr(blocking[0].find("): ") + 3);
  ExpectMlpMatchesReference(blocking_body, 11, /*full=*/false);
  EXPECT_EQ(streamed[0], blocking_body);

  // The example removed what it deployed.
  char* json = nullptr;
  ASSERT_EQ(phos_list(client_, &json), PHOS_OK) << phos_last_error();
  EXPECT_EQ(std::string(json).find("\"mlp\""), std::string::npos) << json;
  phos_free(json);

  // Its failures: exit code 1, the call, its status and phosd's reason.
  Result<CommandOutput> refused =
      RunCommand({.argv = {PHOS_CAPI_GATEWAY, endpoint(), PHOS_MLP_FUNCTION, "11"},
                  .env = {{"PHOS_TOKEN", "wrong"}},
                  .stderr_to_stdout = true},
                 std::chrono::minutes(1));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->status.ShellCode(), 1) << refused->output;
  EXPECT_NE(refused->output.find("gateway: deploy: PHOS_PERMISSION_DENIED: "), std::string::npos)
      << refused->output;
}

// Embedded mode: the daemon inside this test's process (phos_runtime_open), used through a client
// of it exactly as a phosd is: mlp deployed, invoked blocking and streamed (checked against the CPU
// reference), reached from another process at its endpoint, removed; then closed.
TEST(CapiEmbeddedTest, TheDaemonRunsInThisProcessBehindTheSameApi) {
  char dir[] = "/tmp/phos-embedded-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string functions = std::filesystem::path(PHOS_MLP_FUNCTION).parent_path().string();
  const char* functions_dirs[] = {functions.c_str()};
  phos_runtime_options options{};
  options.struct_size = sizeof(options);
  options.data_dir = dir;
  options.gpu = "sim";
  options.functions_dirs = functions_dirs;
  options.functions_dir_count = 1;
  phos_runtime* runtime = nullptr;
  ASSERT_EQ(phos_runtime_open(&options, &runtime), PHOS_OK) << phos_last_error();
  const std::string endpoint = phos_runtime_endpoint(runtime);
  EXPECT_EQ(endpoint.rfind("http://127.0.0.1:", 0), 0u) << endpoint;
  phos_client* client = nullptr;
  ASSERT_EQ(phos_runtime_connect(runtime, &client), PHOS_OK) << phos_last_error();

  const char* args[] = {"--size-mib", "16", "--layers", "4"};
  phos_deploy_options deploy{};
  deploy.struct_size = sizeof(deploy);
  deploy.name = "mlp";
  deploy.executable = PHOS_MLP_FUNCTION;
  deploy.args = args;
  deploy.arg_count = 4;
  deploy.instances = 1;
  ASSERT_EQ(phos_deploy(client, &deploy, nullptr), PHOS_OK) << phos_last_error();
  const std::string request = R"({"seed": 21})";
  void* response = nullptr;
  size_t len = 0;
  ASSERT_EQ(phos_invoke(client, "mlp", request.data(), request.size(), nullptr, &response, &len, nullptr), PHOS_OK)
      << phos_last_error();
  const std::string blocking(static_cast<const char*>(response), len);
  phos_free(response);
  ExpectMlpMatchesReference(blocking, 21, /*full=*/false);
  std::string streamed;
  auto append = [](void* user, const void* data, size_t size) {
    static_cast<std::string*>(user)->append(static_cast<const char*>(data), size);
    return 0;
  };
  ASSERT_EQ(phos_invoke_stream(client, "mlp", request.data(), request.size(), nullptr, append, &streamed, nullptr),
            PHOS_OK)
      << phos_last_error();
  EXPECT_EQ(streamed, blocking);
  // Other processes reach it at its endpoint.
  EXPECT_EQ(::phos::testing::Run({"/usr/bin/curl", "-sf", endpoint + "/healthz"}).out, "ok\n");

  EXPECT_EQ(phos_remove(client, "mlp"), PHOS_OK) << phos_last_error();
  EXPECT_EQ(phos_invoke(client, "mlp", request.data(), request.size(), nullptr, &response, &len, nullptr),
            PHOS_NOT_FOUND);
  // A watch of the embedded daemon ends with it: its stop says so.
  Told told;
  phos_watch* watch = nullptr;
  ASSERT_EQ(phos_watch_events(client, Tell, &told, &watch), PHOS_OK) << phos_last_error();
  EXPECT_EQ(phos_runtime_close(runtime), PHOS_OK);
  EXPECT_EQ(phos_watch_stop(watch), PHOS_UNAVAILABLE);
  EXPECT_NE(std::string(phos_last_error()).find("phosd ended the stream"), std::string::npos) << phos_last_error();
  EXPECT_EQ(phos_close(client), PHOS_OK);
  // Closed: nothing answers there any more.
  EXPECT_NE(::phos::testing::Run({"/usr/bin/curl", "-sf", "--max-time", "5", endpoint + "/healthz"}).exit_code, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// The embedded example (examples/capi/embedded_gateway.c): a gateway with phos inside it answers
// its own HTTP requests by invoking mlp, each answer the CPU reference's, and exits cleanly after
// the requests it was told to serve.
TEST(CapiEmbeddedTest, TheEmbeddedGatewayAnswersItsOwnRequestsThroughPhos) {
  char dir[] = "/tmp/phos-gateway-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + ".out";
  Result<Subprocess> gateway = Subprocess::Spawn(
      {.argv = {PHOS_CAPI_EMBEDDED_GATEWAY, std::string(dir) + "/data", PHOS_MLP_FUNCTION, "0", "3"},
       .stdout_file = out,
       .stderr_to_stdout = true});
  ASSERT_TRUE(gateway.ok()) << gateway.status().ToString();
  auto printed = [&] {
    std::ifstream in(out);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  int port = 0;
  // Its line among whatever the simulated GPU logs.
  auto listening = [&] {
    const std::string text = printed();
    const size_t at = text.find("listening on 127.0.0.1:");
    return at != std::string::npos && std::sscanf(text.c_str() + at, "listening on 127.0.0.1:%d", &port) == 1;
  };
  ASSERT_TRUE(WaitUntil(listening, std::chrono::minutes(2))) << printed();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/invoke/";
  for (int seed : {31, 32}) {
    CommandResult r = ::phos::testing::Run(
        {"/usr/bin/curl", "-s", "--data", "{\"seed\": " + std::to_string(seed) + "}", url + "mlp"});
    ExpectMlpMatchesReference(r.out, seed, /*full=*/false);
  }
  CommandResult absent = ::phos::testing::Run({"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                               "--data", "{}", url + "absent"});
  EXPECT_EQ(absent.out, "404");
  Result<ExitStatus> ended = gateway->Wait(std::chrono::minutes(2));
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_TRUE(ended->success()) << ended->ToString() << "\n" << printed();
  EXPECT_NE(printed().find("served 3 requests"), std::string::npos) << printed();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(out, ec);
}

TEST(CapiEmbeddedTest, BadOptionsAreRefusedWithTheirReason) {
  phos_runtime* runtime = nullptr;
  phos_runtime_options options{};
  options.struct_size = sizeof(options);
  EXPECT_EQ(phos_runtime_open(&options, &runtime), PHOS_INVALID_ARGUMENT);  // no data_dir
  EXPECT_NE(std::string(phos_last_error()).find("data_dir"), std::string::npos) << phos_last_error();
  options.data_dir = "/tmp/phos-embedded-never";
  options.log_level = "loud";
  EXPECT_EQ(phos_runtime_open(&options, &runtime), PHOS_INVALID_ARGUMENT);
  options.log_level = nullptr;
  options.struct_size = sizeof(size_t);
  EXPECT_EQ(phos_runtime_open(&options, &runtime), PHOS_INVALID_ARGUMENT);
  options.struct_size = sizeof(options);
  options.gpu = "quantum";
  EXPECT_EQ(phos_runtime_open(&options, &runtime), PHOS_INVALID_ARGUMENT) << phos_last_error();
  EXPECT_EQ(runtime, nullptr);
  std::error_code ec;
  std::filesystem::remove_all("/tmp/phos-embedded-never", ec);
}

}  // namespace
}  // namespace phos::testing
