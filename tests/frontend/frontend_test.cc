// The frontend libraries against an in-process API server on simgpu: client programs in their
// own processes, attached by PHOS_GPU_SOCKET and PHOS_INSTANCE_TOKEN.
#include <unistd.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "phos/runtime/api_server.h"
#include "phos/driver/driver_table.h"
#include "../testing/wait_until.h"
#include "piped_process.h"

namespace phos::runtime {
namespace {

using phos::testing::PipedProcess;
using EnvList = std::vector<std::pair<std::string, std::string>>;

class FrontendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    socket_ = "/tmp/phos-frontend-test-" + std::to_string(getpid()) + ".sock";
    auto server = ApiServer::Start({.socket_path = socket_}, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static EnvList Env(const std::string& token) {
    return {{"PHOS_GPU_SOCKET", socket_}, {"PHOS_INSTANCE_TOKEN", token}};
  }
  static std::unique_ptr<PipedProcess> Client(const std::vector<std::string>& args, const std::string& token,
                                              const char* program = PHOS_REMOTE_CLIENT) {
    std::vector<std::string> argv{program, PHOS_TEST_MODULE};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<PipedProcess>(argv, Env(token));
  }
  static int RunClient(const std::vector<std::string>& args, const char* program = PHOS_REMOTE_CLIENT) {
    std::string token = server_->IssueToken();
    int code = Client(args, token, program)->Wait();
    server_->EndSession(token);
    return code;
  }

  static inline std::shared_ptr<driver::DriverTable> table_;
  static inline ApiServer* server_ = nullptr;
  static inline std::string socket_;
};

TEST_F(FrontendTest, EveryMemcpyKindRoundTrips) { EXPECT_EQ(RunClient({"roundtrip"}), 0); }

TEST_F(FrontendTest, AsyncErrorSurfacesAtTheNextSynchronisingCall) { EXPECT_EQ(RunClient({"async-error"}), 0); }

TEST_F(FrontendTest, VirtualHandlesAreStableAndChecked) { EXPECT_EQ(RunClient({"handles"}), 0); }

TEST_F(FrontendTest, DeviceQueriesFlagsLimitsPeersAndResetAnswerAsTheDevice) {
  EXPECT_EQ(RunClient({"device"}), 0);
}

TEST_F(FrontendTest, PitchedCopiesSetsPeerCopiesAndPointerAttributesMatchAHostImage) {
  EXPECT_EQ(RunClient({"pitched"}), 0);
}

TEST_F(FrontendTest, StreamOrderedAllocationsFreeInStreamOrderAndCountInThePool) {
  EXPECT_EQ(RunClient({"pools"}), 0);
}

TEST_F(FrontendTest, StreamPrioritiesFlagsDevicesAndIdsAnswerAsTheDriver) {
  EXPECT_EQ(RunClient({"priorities"}, PHOS_STREAM_CLIENT), 0);
}

TEST_F(FrontendTest, HostFunctionsRunInTheProcessInStreamOrderHoldingOnlyTheirStream) {
  EXPECT_EQ(RunClient({"host-functions"}, PHOS_STREAM_CLIENT), 0);
}

TEST_F(FrontendTest, PerThreadDefaultStreamsAreEachThreadsOwnAndTheLegacyStreamKeepsItsRules) {
  EXPECT_EQ(RunClient({"per-thread"}, PHOS_STREAM_CLIENT), 0);
}

TEST_F(FrontendTest, TheHostFunctionThreadStopsForAForkOnlyWhenNothingIsPending) {
  EXPECT_EQ(RunClient({"quiesce"}, PHOS_STREAM_CLIENT), 0);
}

// A host function that never returns holds up its own stream, not phosd: the process ends with it
// still waiting, its session ends and releases everything, and the next session is served.
TEST_F(FrontendTest, ASessionEndingWithAHostFunctionPendingCleansUp) {
  std::string token = server_->IssueToken();
  auto held = Client({"held"}, token, PHOS_STREAM_CLIENT);
  EXPECT_EQ(held->ReadLine(), "held");
  EXPECT_EQ(held->Wait(), 0);
  EXPECT_TRUE(::phos::testing::WaitUntil([&] { return server_->session_count() == 0; }));
  server_->EndSession(token);
  EXPECT_EQ(RunClient({"host-functions"}, PHOS_STREAM_CLIENT), 0);
}

// Kernels' attributes, settings and occupancy, launches with attributes, nvcc's launch entry
// points, and module globals through cudaMemcpyToSymbol and its family (launch_client.cc).
TEST_F(FrontendTest, KernelAttributesOccupancyAndLaunchAttributesAnswerAsTheDriver) {
  const std::string token = server_->IssueToken();
  PipedProcess p({PHOS_LAUNCH_CLIENT, PHOS_LAUNCH_TEST_MODULE, "functions"}, Env(token));
  EXPECT_EQ(p.Wait(), 0);
  server_->EndSession(token);
}

TEST_F(FrontendTest, ModuleGlobalsAreReadAndWrittenThroughTheirHostShadows) {
  const std::string token = server_->IssueToken();
  PipedProcess p({PHOS_LAUNCH_CLIENT, PHOS_LAUNCH_TEST_MODULE, "symbols"}, Env(token));
  EXPECT_EQ(p.Wait(), 0);
  server_->EndSession(token);
}

// As a `--default-stream per-thread` build calls them: the _ptds / _ptsz symbol copies and
// launches with attributes.
TEST_F(FrontendTest, PerThreadDefaultStreamFormsOfTheSymbolAndLaunchCallsWork) {
  const std::string token = server_->IssueToken();
  PipedProcess p({PHOS_LAUNCH_CLIENT, PHOS_LAUNCH_TEST_MODULE, "per-thread"}, Env(token));
  EXPECT_EQ(p.Wait(), 0);
  server_->EndSession(token);
}

// A forked instance (the fork template's child) opens a session of its own: it gets the kernel
// settings its parent made, and its own module's globals.
TEST_F(FrontendTest, AForkedInstanceKeepsItsKernelSettingsAndFindsItsOwnGlobals) {
  const std::string parent = server_->IssueToken(), child = server_->IssueToken();
  PipedProcess p({PHOS_LAUNCH_CLIENT, PHOS_LAUNCH_TEST_MODULE, "fork-replay", child}, Env(parent));
  EXPECT_EQ(p.Wait(), 0);
  server_->EndSession(child);
  server_->EndSession(parent);
}

TEST_F(FrontendTest, UnknownTokenIsRefused) {
  PipedProcess p({PHOS_REMOTE_CLIENT, PHOS_TEST_MODULE, "no-session"}, Env(std::string(32, 'a')));
  EXPECT_EQ(p.ReadLine(), "cudaErrorNoDevice");
  EXPECT_EQ(p.Wait(), 0);
  EXPECT_EQ(server_->session_count(), 0u);
}

TEST_F(FrontendTest, IsolationRefusesAnotherInstancesPointerAndLeavesItsDataIntact) {
  std::string owner_token = server_->IssueToken();
  auto owner = Client({"owner"}, owner_token);
  std::string address = owner->ReadLine();
  ASSERT_EQ(address.rfind("0x", 0), 0u) << address;
  EXPECT_EQ(RunClient({"attacker", address}), 0);
  owner->WriteLine("check");
  EXPECT_EQ(owner->ReadLine(), "intact");
  EXPECT_EQ(owner->Wait(), 0);
  server_->EndSession(owner_token);
}

TEST_F(FrontendTest, SessionEndsWhenTheProcessExits) {
  std::string token = server_->IssueToken();
  EXPECT_EQ(Client({"handles"}, token)->Wait(), 0);
  // The control socket's hang-up ends the session without EndSession.
  ::phos::testing::WaitUntil([&] { return server_->session_count() == 0; });
  EXPECT_EQ(server_->session_count(), 0u);
  server_->EndSession(token);
}

TEST_F(FrontendTest, ManySessionsAtOnce) {
  std::vector<std::string> tokens;
  std::vector<std::unique_ptr<PipedProcess>> clients;
  for (int i = 0; i < 4; ++i) {
    tokens.push_back(server_->IssueToken());
    clients.push_back(Client({"roundtrip"}, tokens.back()));
  }
  for (auto& c : clients) EXPECT_EQ(c->Wait(), 0);
  for (auto& t : tokens) server_->EndSession(t);
}

TEST_F(FrontendTest, PlainCudaProgramRunsOnTheFrontendLibraries) {
  std::string token = server_->IssueToken();
  EnvList env = Env(token);
  env.emplace_back("LD_LIBRARY_PATH", PHOS_FRONTEND_LIB_DIR);
  PipedProcess p({PHOS_PLAIN_CUDA_PROGRAM}, env);
  std::string line = p.ReadLine();
  EXPECT_EQ(p.Wait(), 0);
  EXPECT_NE(line.find("correct"), std::string::npos) << line;
  server_->EndSession(token);
}

// Naming an error needs no session: the program runs with NVIDIA's libcudart (no GPU either) and
// then with phos's, and prints the same name and text for every value, a value that is no
// cudaError_t included ("unrecognized error code").
TEST(FrontendErrorNamesTest, EveryErrorIsNamedAsNvidiasRuntimeNamesIt) {
  auto run = [](const std::string& library_dir) {
    SpawnOptions options;
    options.argv = {PHOS_CUDA_ERROR_NAMES};
    options.env = {{"LD_LIBRARY_PATH", library_dir}};
    Result<CommandOutput> out = RunCommand(options, std::chrono::seconds(60));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->output : std::string();
  };
  const std::string nvidia = run(PHOS_CUDA_LIB_DIR);
  const std::string phos = run(PHOS_FRONTEND_LIB_DIR);
  ASSERT_NE(nvidia.find("\tcudaErrorApiFailureBase\t"), std::string::npos) << "NVIDIA's runtime did not run";
  std::istringstream want(nvidia), got(phos);
  std::string want_line, got_line;
  int lines = 0, differences = 0;
  while (std::getline(want, want_line)) {
    ++lines;
    if (!std::getline(got, got_line)) got_line = "(missing)";
    if (got_line != want_line && ++differences <= 10) ADD_FAILURE() << "NVIDIA: " << want_line << "\nphos:   " << got_line;
  }
  EXPECT_EQ(differences, 0);
  EXPECT_GT(lines, 12000);
}

#ifdef PHOS_NCCL_LOCAL_ANSWERS
// What NCCL answers before a communicator is reached (its version, the text of every result, the
// NULL communicator's lifecycle calls, a group end outside a group) needs neither a GPU nor a
// session: the program runs with NVIDIA's libnccl, then with phos's, and prints the same.
TEST(FrontendErrorNamesTest, NcclAnswersWhatNvidiasAnswersWithoutACommunicator) {
  auto run = [](const std::string& library_dir) {
    SpawnOptions options;
    options.argv = {PHOS_NCCL_LOCAL_ANSWERS};
    options.env = {{"LD_LIBRARY_PATH", library_dir}};
    Result<CommandOutput> out = RunCommand(options, std::chrono::seconds(60));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->output : std::string();
  };
  const std::string nvidia = run(PHOS_NCCL_LIB_DIR);
  ASSERT_NE(nvidia.find("ncclGetVersion\t0\t"), std::string::npos) << "NVIDIA's NCCL did not run:\n" << nvidia;
  EXPECT_EQ(run(PHOS_FRONTEND_LIB_DIR), nvidia);
}
#endif

}  // namespace
}  // namespace phos::runtime
