#include "phosd_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../testing/wait_until.h"

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
  int port = FreePort();
  endpoint_ = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> argv = {PHOS_PHOSD, "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir",
                                   data_dir_, "--gpu", "sim", "--functions-dir", BuildBinDir()};
  std::vector<std::string> extra = ExtraPhosdArgs();
  argv.insert(argv.end(), extra.begin(), extra.end());
  Result<Subprocess> phosd = Subprocess::Spawn({.argv = std::move(argv)});
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  phosd_.emplace(std::move(phosd).value());
  // Ready when /healthz answers.
  bool healthy = WaitUntil([&] {
    return ::phos::testing::Run({"/usr/bin/curl", "-sf", endpoint_ + "/healthz"}).exit_code == 0;
  });
  ASSERT_TRUE(healthy) << "phosd did not become healthy at " << endpoint_;
  admin_token_ = AdminToken(data_dir_);
  ASSERT_FALSE(admin_token_.empty()) << "phosd made no " << data_dir_ << "/admin.token";
}

void PhosdTest::TearDown() {
  if (phosd_) {
    Result<ExitStatus> how = phosd_->Stop(kPhosdStopGrace, SIGTERM);
    EXPECT_TRUE(how.ok() && how->success()) << "phosd did not exit cleanly on SIGTERM: "
                                            << (how.ok() ? how->ToString() : how.status().ToString());
    phosd_.reset();
  }
  std::error_code ec;
  std::filesystem::remove_all(data_dir_, ec);
}

CommandResult PhosdTest::PhosFn(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint_, "--token-file", data_dir_ + "/admin.token"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ::phos::testing::Run(argv);
}

CommandResult PhosdTest::CurlPost(const std::string& path, const std::string& body) {
  return ::phos::testing::Run({"/usr/bin/curl", "-s", "-H", "Authorization: Bearer " + admin_token_, "-X", "POST",
                               "--data", body, endpoint_ + path});
}

std::vector<std::string> PhosdTest::AdminHeader() const { return {"-H", "Authorization: Bearer " + admin_token_}; }

}  // namespace phos::testing
