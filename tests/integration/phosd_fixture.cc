#include "phosd_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "../testing/wait_until.h"
#include "phos/runtime/sandbox.h"

namespace phos::testing {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string BuildBinDir() { return std::filesystem::path(PHOS_PHOSD).parent_path().string(); }

std::string AdminToken(const std::string& data_dir) {
  std::ifstream in(data_dir + "/admin.token");
  std::string token;
  in >> token;
  return token;
}

// `curl -i` output: status line, headers, blank line, body.
HttpResponse ParseCurl(const std::string& out) {
  HttpResponse r;
  size_t end = out.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::istringstream head(out.substr(0, end));
  std::string line;
  std::getline(head, line);
  std::sscanf(line.c_str(), "HTTP/%*s %d", &r.status);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    size_t value = line.find_first_not_of(' ', colon + 1);
    r.headers[name] = value == std::string::npos ? "" : line.substr(value);
  }
  r.body = out.substr(end + 4);
  return r;
}

// The function templates and instances of a phosd on `data_dir`: unsandboxed, the processes
// started with PHOS_GPU_SOCKET pointing into it (forked instances inherit the template's
// environment); sandboxed, the processes in its functions' cgroups.
std::vector<pid_t> FunctionProcessesOf(const std::string& data_dir) {
  const std::string needle = "PHOS_GPU_SOCKET=" + data_dir + "/gpu.sock";
  std::error_code ec;
  const std::string cgroup = "/" + phos::runtime::Sandbox::CgroupParent(std::filesystem::canonical(data_dir, ec).string()) + "/";
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat;
    std::ifstream(entry.path() / "stat") >> stat >> stat >> stat;  // pid, comm, state
    if (stat == "Z") continue;                                     // exited, not yet reaped
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ifstream groups_in(entry.path() / "cgroup");
    std::string groups((std::istreambuf_iterator<char>(groups_in)), std::istreambuf_iterator<char>());
    if (env.find(needle + '\0') != std::string::npos || (!ec && groups.find(cgroup) != std::string::npos)) {
      pids.push_back(std::stoi(name));
    }
  }
  return pids;
}

std::string SanitizerReport(const std::string& log_path) {
  std::ifstream in(log_path, std::ios::binary);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Every sanitizer ends a report with "SUMMARY: <Name>Sanitizer: ...".
  constexpr std::string_view kSummary = "SUMMARY: ";
  constexpr std::string_view kSanitizer = "Sanitizer:";
  size_t summary = log.find(kSummary);
  for (; summary != std::string::npos; summary = log.find(kSummary, summary + 1)) {
    size_t name_end = log.find_first_of(" \n", summary + kSummary.size());
    if (name_end != std::string::npos && name_end >= summary + kSummary.size() + kSanitizer.size() &&
        log.compare(name_end - kSanitizer.size(), kSanitizer.size(), kSanitizer) == 0) {
      break;
    }
  }
  if (summary == std::string::npos) return "";
  // The report itself: the lines before its summary (a stack or two fit in 16 KiB).
  constexpr size_t kReportBytes = 16 * 1024;
  size_t start = summary > kReportBytes ? log.find('\n', summary - kReportBytes) + 1 : 0;
  size_t end = log.find('\n', summary);
  return log.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

CommandResult Run(const std::vector<std::string>& args) {
  Result<CommandOutput> run = RunCommand({.argv = args}, std::nullopt);
  if (!run.ok()) {
    ADD_FAILURE() << run.status().ToString();
    return {};
  }
  return {run->status.ShellCode(), std::move(run->output)};
}

void PhosdTest::SetUp() {
  char tmpl[] = "/tmp/phosd-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  data_dir_ = tmpl;
  log_path_ = data_dir_ + ".log";
  PrepareDataDir();
  if (HasFatalFailure() || IsSkipped()) return;
  StartPhosd();
}

Result<Subprocess> SpawnPhosd(const std::string& data_dir, const std::string& log_path,
                              const std::vector<std::string>& extra_args,
                              const std::vector<std::pair<std::string, std::string>>& env, std::string* endpoint) {
  int port = FreePort();
  *endpoint = "http://127.0.0.1:" + std::to_string(port);
  SpawnOptions options;
  // PHOS_TEST_GPU=cuda: the tests registered for a GPU host (label 'gpu') run phosd on NVIDIA's driver.
  const char* gpu = std::getenv("PHOS_TEST_GPU");
  options.argv = {PHOS_PHOSD, "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir", data_dir, "--gpu",
                  gpu != nullptr && *gpu != '\0' ? gpu : "sim", "--functions-dir", BuildBinDir()};
  options.argv.insert(options.argv.end(), extra_args.begin(), extra_args.end());
  options.env = env;
  options.stdout_file = log_path;
  options.stderr_to_stdout = true;
  PHOS_ASSIGN_OR_RETURN(Subprocess phosd, Subprocess::Spawn(options));
  // Ready when /healthz answers.
  const std::string health = *endpoint + "/healthz";
  if (!WaitUntil([&] { return ::phos::testing::Run({"/usr/bin/curl", "-sf", health}).exit_code == 0; })) {
    return Status::Unavailable("phosd did not become healthy at " + *endpoint);
  }
  return phosd;
}

void PhosdTest::StartPhosd() {
  Result<Subprocess> phosd = SpawnPhosd(data_dir_, log_path_, ExtraPhosdArgs(), phosd_env_, &endpoint_);
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  phosd_.emplace(std::move(phosd).value());
  admin_token_ = AdminToken(data_dir_);
  ASSERT_FALSE(admin_token_.empty()) << "phosd made no " << data_dir_ << "/admin.token";
}

void PhosdNode::Start(const std::vector<std::string>& extra_args,
                      const std::vector<std::pair<std::string, std::string>>& env) {
  char tmpl[] = "/tmp/phosd-node-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  data_dir_ = tmpl;
  log_path_ = data_dir_ + ".log";
  Result<Subprocess> phosd = SpawnPhosd(data_dir_, log_path_, extra_args, env, &endpoint_);
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  phosd_.emplace(std::move(phosd).value());
  ASSERT_FALSE(AdminToken(data_dir_).empty()) << "phosd made no " << data_dir_ << "/admin.token";
}

void PhosdNode::Stop() {
  if (!phosd_) return;
  Result<ExitStatus> how = phosd_->Stop(kPhosdStopGrace, SIGTERM);
  EXPECT_TRUE(how.ok() && how->success()) << "the second phosd did not exit cleanly on SIGTERM: "
                                          << (how.ok() ? how->ToString() : how.status().ToString());
  phosd_.reset();
  std::string report = SanitizerReport(log_path_);
  EXPECT_TRUE(report.empty()) << "a sanitizer report in " << log_path_ << ":\n" << report;
}

void PhosdNode::Resume(const std::vector<std::string>& extra_args,
                       const std::vector<std::pair<std::string, std::string>>& env) {
  ASSERT_FALSE(phosd_.has_value()) << "Resume after Stop or Kill";
  Result<Subprocess> phosd = SpawnPhosd(data_dir_, log_path_, extra_args, env, &endpoint_);
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  phosd_.emplace(std::move(phosd).value());
}

PhosdNode::~PhosdNode() {
  Stop();
  std::error_code ec;
  if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_, ec);
  if (!log_path_.empty()) std::filesystem::remove(log_path_, ec);
}

void PhosdNode::Kill() {
  if (!phosd_) return;
  Result<ExitStatus> how = phosd_->Stop(kPhosdStopGrace, SIGKILL);
  EXPECT_TRUE(how.ok()) << how.status().ToString();
  phosd_.reset();
}

std::string PhosdNode::Log() const {
  std::ifstream in(log_path_);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

CommandResult PhosdNode::PhosFn(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint_, "--token-file", token_file()};
  argv.insert(argv.end(), args.begin(), args.end());
  return ::phos::testing::Run(argv);
}

int PhosdTest::RestartPhosd(int signal) {
  Result<ExitStatus> how = phosd_->Stop(kPhosdStopGrace, signal);
  phosd_.reset();
  EXPECT_TRUE(how.ok()) << how.status().ToString();
  StartPhosd();
  return how.ok() ? how->ShellCode() : -1;
}

std::string PhosdTest::PhosdLog() const {
  std::ifstream in(log_path_);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void PhosdTest::TearDown() {
  if (phosd_) {
    Result<ExitStatus> how = phosd_->Stop(kPhosdStopGrace, SIGTERM);
    EXPECT_TRUE(how.ok() && how->success()) << "phosd did not exit cleanly on SIGTERM: "
                                            << (how.ok() ? how->ToString() : how.status().ToString());
    phosd_.reset();
  }
  // In a sanitizer build (scripts/test.sh --sanitize), a report in phosd or in a function process
  // goes to its standard error, that is to these logs: it fails the test that caused it.
  std::vector<std::string> logs = {log_path_};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir_ + "/logs", ec)) {
    logs.push_back(entry.path().string());
  }
  for (const std::string& path : logs) {
    std::string report = SanitizerReport(path);
    EXPECT_TRUE(report.empty()) << "a sanitizer report in " << path << ":\n" << report;
  }
  if (HasFailure()) std::printf("phosd's log:\n%s\n", PhosdLog().c_str());
  ReleaseDataDir();
  std::filesystem::remove_all(data_dir_, ec);
  std::filesystem::remove(log_path_, ec);
}

bool PhosdTest::Sandboxed() const { return PhosdLog().find("] on: functions run as uids") != std::string::npos; }

std::vector<std::string> PhosdTest::PhosFnCommand(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint_, "--token-file", data_dir_ + "/admin.token"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

CommandResult PhosdTest::PhosFn(const std::vector<std::string>& args) {
  return ::phos::testing::Run(PhosFnCommand(args));
}

CommandResult PhosdTest::CurlPost(const std::string& path, const std::string& body) {
  return ::phos::testing::Run({"/usr/bin/curl", "-s", "-H", "Authorization: Bearer " + admin_token_, "-X", "POST",
                               "--data", body, endpoint_ + path});
}

std::vector<std::string> PhosdTest::AdminHeader() const { return {"-H", "Authorization: Bearer " + admin_token_}; }

HttpResponse PhosdTest::InvokeInMode(const std::string& function, const std::string& body, const std::string& mode) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body};
  for (const std::string& h : AdminHeader()) argv.push_back(h);
  argv.insert(argv.end(), {"-H", "X-Phos-Restore-Mode: " + mode, endpoint() + "/v1/functions/" + function + "/invoke"});
  return ParseCurl(::phos::testing::Run(argv).out);
}

void PhosdTest::ExpectCheckpointsRestoreTheSameAnswers(const std::string& function, const std::string& request) {
  ASSERT_TRUE(SettledToOneIdleInstance(function));
  HttpResponse warm = InvokeInMode(function, request, "warm");
  ASSERT_EQ(warm.status, 200) << warm.body;
  for (const char* mode : {"stop-the-world", "soft-cow", "soft-recopy"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(SettledToOneIdleInstance(function));
    CommandResult c = PhosFn({"checkpoint", function, "--mode", mode});
    ASSERT_EQ(c.exit_code, 0) << c.out;
    // The first restore takes the spare range (evicting the checkpointed instance), the second
    // the checkpointed one.
    for (int i = 0; i < 2; ++i) {
      HttpResponse r = InvokeInMode(function, request, "phos");
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.headers["x-phos-restore-mode"], "phos");
      EXPECT_EQ(r.body, warm.body);
      ASSERT_TRUE(SettledToOneIdleInstance(function));
    }
  }
}

bool PhosdTest::SettledToOneIdleInstance(const std::string& function) {
  return WaitUntil([&] {
    nlohmann::json j = nlohmann::json::parse(::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) return false;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") != function || !f.contains("state")) continue;
      const auto& s = f["state"];
      return s.value("idle", -1) == 1 && s.value("starting", -1) == 0 && s.value("busy", -1) == 0;
    }
    return false;
  });
}

}  // namespace phos::testing
