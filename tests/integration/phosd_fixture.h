// Starts a real phosd on simgpu for a test, and runs phos-fn and curl against it.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/sanitizers.h"
#include "phos/base/subprocess.h"

namespace phos::testing {

// Whether simgpu's device memory lies at the same address in every process. Not under
// ThreadSanitizer, which confines mmap to ranges of its own: two phosd (a move to another node) or
// one restarted (a job resumed after it) then lay out their instance ranges differently, and a test
// that needs them alike skips there.
inline constexpr bool kStableDeviceAddresses = !kThreadSanitizer;
#define PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES()                                                         \
  if (!::phos::testing::kStableDeviceAddresses)                                                            \
  GTEST_SKIP() << "a ThreadSanitizer build maps simgpu's device memory at another address in each process, " \
                  "so two phosd's instance ranges differ"

// How long a phosd asked to stop may take before it is killed (and the test fails).
inline constexpr std::chrono::milliseconds kPhosdStopGrace{60000};

struct CommandResult {
  int exit_code = -1;  // the exit code, 128 + signal when killed, -1 when it could not start
  std::string out;     // standard output
};

// Runs argv (no shell), capturing standard output; standard error goes to the test log.
CommandResult Run(const std::vector<std::string>& argv);
// A loopback port the kernel just handed out (phosd binds it again at once).
int FreePort();
// Where phosd, phos-fn and the functions the tests deploy are built (build/bin): every test's
// phosd is started with --functions-dir there.
std::string BuildBinDir();
// The admin token phosd keeps in `data_dir` (made at its first start); empty when there is none.
std::string AdminToken(const std::string& data_dir);

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  // The header's value as an integer; -1 when absent.
  int64_t Number(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? -1 : std::stoll(it->second);
  }
  bool Has(const std::string& name) const { return headers.count(name) != 0; }
};

// `curl -i` output: status line, headers, blank line, body.
HttpResponse ParseCurl(const std::string& out);

// Processes started with PHOS_GPU_SOCKET pointing into `data_dir`: the function templates and
// instances of a phosd on that directory (forked instances inherit the template's environment).
std::vector<pid_t> FunctionProcessesOf(const std::string& data_dir);

// The first sanitizer report (AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer,
// ThreadSanitizer) in the log file at `log_path`, up to its SUMMARY line; empty when there is none.
std::string SanitizerReport(const std::string& log_path);

// Starts phosd on `data_dir` (its output to `log_path`) with `extra_args` besides --listen (a free
// loopback port: *endpoint), --data-dir, --gpu and --functions-dir, and `env`; once /healthz answers.
Result<Subprocess> SpawnPhosd(const std::string& data_dir, const std::string& log_path,
                              const std::vector<std::string>& extra_args,
                              const std::vector<std::pair<std::string, std::string>>& env, std::string* endpoint);

// Another phosd beside a PhosdTest's, on a data directory of its own (a second node): stopped
// (SIGTERM, the test failing unless it exits cleanly) and its directory removed when destroyed.
class PhosdNode {
 public:
  PhosdNode() = default;
  ~PhosdNode();
  PhosdNode(const PhosdNode&) = delete;
  PhosdNode& operator=(const PhosdNode&) = delete;
  // Fatal failure when it does not become healthy.
  void Start(const std::vector<std::string>& extra_args, const std::vector<std::pair<std::string, std::string>>& env);
  const std::string& endpoint() const { return endpoint_; }
  const std::string& data_dir() const { return data_dir_; }
  // Kills it (SIGKILL: a node that dies), waiting for it to be gone.
  void Kill();
  // Stops it (SIGTERM), expecting a clean exit.
  void Stop();
  // Starts it again on its data directory after Stop or Kill (another port: endpoint() changes).
  void Resume(const std::vector<std::string>& extra_args, const std::vector<std::pair<std::string, std::string>>& env);
  std::string token_file() const { return data_dir_ + "/admin.token"; }
  // Its process (to stop and continue it: a node that goes silent).
  pid_t pid() const { return phosd_->pid(); }
  std::string Log() const;
  // phos-fn --endpoint <its endpoint> --token-file <its admin token> args...
  CommandResult PhosFn(const std::vector<std::string>& args) const;

 private:
  std::string data_dir_;
  std::string log_path_;
  std::string endpoint_;
  std::optional<Subprocess> phosd_;
};

class PhosdTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Options phosd is started with besides --listen, --data-dir, --gpu and --functions-dir.
  virtual std::vector<std::string> ExtraPhosdArgs() const { return {}; }
  // Called once the data directory exists, before phosd first starts on it (a test mounts a small
  // file system there), and after phosd stopped for good, before the directory is removed.
  virtual void PrepareDataDir() {}
  virtual void ReleaseDataDir() {}

  // Stops phosd with `signal` (SIGKILL: at once, whatever it was doing) and starts it again on the
  // same data directory, with phosd_env_ as it is now. phosd's exit code as Run reports it.
  int RestartPhosd(int signal);
  // The running phosd's process id.
  pid_t phosd_pid() const { return phosd_->pid(); }
  // What phosd has logged so far (every start's standard output and error).
  std::string PhosdLog() const;
  // Whether phosd runs its functions sandboxed (it says so in its log when it starts).
  bool Sandboxed() const;

  // "http://127.0.0.1:<port>"
  const std::string& endpoint() const { return endpoint_; }
  // phos-fn --endpoint <endpoint> --token-file <data_dir>/admin.token args...
  CommandResult PhosFn(const std::vector<std::string>& args);
  // The phos-fn command line PhosFn runs, for a thread that must reach this phosd even if the
  // test restarts it meanwhile (a restart changes the endpoint).
  std::vector<std::string> PhosFnCommand(const std::vector<std::string>& args) const;
  // curl -s -X POST --data <body> <endpoint><path> with the admin token; the response body.
  CommandResult CurlPost(const std::string& path, const std::string& body);
  // POST /v1/functions/<function>/invoke with `body` and X-Phos-Restore-Mode: `mode`.
  HttpResponse InvokeInMode(const std::string& function, const std::string& body, const std::string& mode);
  // Waits (WaitUntil) until `function` has one instance, idle, none starting or busy: the extra
  // instances of forced restores have ended and their contexts gone back to the pool. False when
  // that never came.
  bool SettledToOneIdleInstance(const std::string& function);
  // Checkpoints `function`'s one instance (it runs one at a time: two instance ranges) in each
  // mode, and checks that the instances restored afterwards in both its ranges (the spare, then
  // the checkpointed one) answer `request` as the warm instance did before the checkpoint.
  void ExpectCheckpointsRestoreTheSameAnswers(const std::string& function, const std::string& request);
  // curl's arguments that send the admin token: {"-H", "Authorization: Bearer <token>"}.
  std::vector<std::string> AdminHeader() const;
  // The admin token phosd made at start.
  const std::string& admin_token() const { return admin_token_; }
  // phosd's --data-dir (its snapshot store is in <data_dir>/store).
  const std::string& data_dir() const { return data_dir_; }

  // Variables phosd is started with on top of the test's environment (read at each start).
  std::vector<std::pair<std::string, std::string>> phosd_env_;

 private:
  void StartPhosd();

  std::string data_dir_;
  std::string log_path_;  // beside the data directory, which may be a file system of its own
  std::string endpoint_;
  std::string admin_token_;
  std::optional<Subprocess> phosd_;
};

}  // namespace phos::testing
