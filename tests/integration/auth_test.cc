// Who may call what, end to end (docs/design.md, "Who may call what"): the admin token on admin
// routes, per-function invoke tokens, redacted listings, the listener's address, and deploys that
// can name only files under a functions directory or uploaded artifacts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../testing/wait_until.h"
#include "mlp_model.h"
#include "phos/base/subprocess.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

namespace fs = std::filesystem;

struct Answer {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// One request through curl -i: `args` are curl's (method, headers, data) before the URL.
Answer Curl(const std::vector<std::string>& args, const std::string& url) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(url);
  CommandResult r = ::phos::testing::Run(argv);
  Answer a;
  size_t end = r.out.find("\r\n\r\n");
  if (end == std::string::npos) return a;
  a.head = r.out.substr(0, end);
  a.body = r.out.substr(end + 4);
  std::sscanf(a.head.c_str(), "HTTP/%*s %d", &a.status);
  return a;
}

// The JSON error of a refusal has its code and a message; a refusal for want of a token says Bearer.
void ExpectAuthRefusal(const Answer& a, int status, const std::string& what) {
  EXPECT_EQ(a.status, status) << what << ": " << a.head << "\n" << a.body;
  nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << what << ": " << a.body;
  EXPECT_EQ(j["error"].value("code", ""), status == 401 ? "unauthenticated" : "permission_denied") << what;
  EXPECT_FALSE(j["error"].value("message", "").empty()) << what << ": " << a.body;
  EXPECT_NE(a.head.find("WWW-Authenticate: Bearer"), std::string::npos) << what << ": " << a.head;
}

class AuthTest : public PhosdTest {
 protected:
  AuthTest() {
    char tmpl[] = "/tmp/phosd-auth-functions-XXXXXX";
    functions_dir_ = mkdtemp(tmpl);
  }
  ~AuthTest() override { fs::remove_all(functions_dir_); }
  // A functions directory of the test's own besides the build's: for links that point outside.
  // Bodies of 1 MiB at most, but artifacts up to --max-artifact-mib's default (256 MiB).
  std::vector<std::string> ExtraPhosdArgs() const override {
    return {"--functions-dir", functions_dir_, "--max-body-mib", "1"};
  }

  std::vector<std::string> Bearer(const std::string& token) const {
    return {"-H", "Authorization: Bearer " + token};
  }
  // POST /v1/functions of `spec` with `auth` (curl arguments).
  Answer Deploy(const nlohmann::json& spec, const std::vector<std::string>& auth) {
    std::vector<std::string> args = {"-X", "POST", "--data-binary", spec.dump()};
    args.insert(args.end(), auth.begin(), auth.end());
    return Curl(args, endpoint() + "/v1/functions");
  }

  std::string functions_dir_;
};

TEST_F(AuthTest, AdminRoutesNeedTheAdminTokenAndInvokeTokensGuardTheirFunction) {
  // The token phosd made: 64 hex digits, mode 0600.
  EXPECT_EQ(admin_token().size(), 64u);
  struct stat st {};
  ASSERT_EQ(stat((data_dir() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // gpu.sock: 0660 whatever phosd's umask.
  ASSERT_EQ(stat((data_dir() + "/gpu.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  const nlohmann::json probe = {
      {"name", "probe"}, {"executable", PHOS_PROBE_FN}, {"env", {{"PROBE_SECRET", "hunter2"}}}};
  // Every admin route: 401 without a token or with a malformed one, 403 with a wrong one.
  const std::vector<std::pair<std::vector<std::string>, std::string>> admin_calls = {
      {{"-X", "POST", "--data-binary", probe.dump()}, "/v1/functions"},
      {{"-X", "DELETE"}, "/v1/functions/probe"},
      {{"-X", "POST", "--data-binary", "{}"}, "/v1/sessions"},
      {{"-X", "POST", "--data-binary", "#!/bin/sh\n"}, "/v1/artifacts"},
  };
  for (const auto& [args, path] : admin_calls) {
    ExpectAuthRefusal(Curl(args, endpoint() + path), 401, path + " without a token");
    std::vector<std::string> basic = args;
    basic.insert(basic.end(), {"-H", "Authorization: Basic YWRtaW46YWRtaW4="});
    ExpectAuthRefusal(Curl(basic, endpoint() + path), 401, path + " with Basic");
    std::vector<std::string> wrong = args;
    wrong.insert(wrong.end(), {"-H", "Authorization: Bearer " + std::string(64, '0')});
    ExpectAuthRefusal(Curl(wrong, endpoint() + path), 403, path + " with a wrong token");
  }
  // phos-fn without the token is refused, and says so.
  CommandResult anonymous = ::phos::testing::Run({PHOS_PHOS_FN, "--endpoint", endpoint(), "rm", "probe"});
  EXPECT_NE(anonymous.exit_code, 0);
  // Nothing was deployed by any of that.
  Answer listed = Curl({}, endpoint() + "/v1/functions");
  EXPECT_EQ(nlohmann::json::parse(listed.body)["functions"].size(), 0u) << listed.body;

  // With the token: deployed. Its invoke token is "let-me-in" (the spec holds its SHA-256 only).
  nlohmann::json guarded = probe;
  CommandResult digest =
      ::phos::testing::Run({"/bin/sh", "-c", "printf %s let-me-in | sha256sum | cut -d' ' -f1"});
  ASSERT_EQ(digest.exit_code, 0);
  guarded["invoke_token_sha256"] = digest.out.substr(0, 64);
  Answer deployed = Deploy(guarded, AdminHeader());
  ASSERT_EQ(deployed.status, 201) << deployed.body;

  const std::string invoke = endpoint() + "/v1/functions/probe/invoke";
  ExpectAuthRefusal(Curl({"-X", "POST", "--data-binary", "hello"}, invoke), 401, "invoke without a token");
  ExpectAuthRefusal(
      Curl({"-X", "POST", "--data-binary", "hello", "-H", "Authorization: Bearer let-me-out"}, invoke), 403,
      "invoke with a wrong token");
  Answer served =
      Curl({"-X", "POST", "--data-binary", "hello", "-H", "Authorization: Bearer let-me-in"}, invoke);
  EXPECT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.body, "hello");
  // The admin token passes too; phos-fn sends the invoke token of its --token-file.
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "admin").out, "admin");
  const std::string token_file = data_dir() + "/probe.token";
  std::ofstream(token_file) << "let-me-in\n";
  CommandResult by_file = ::phos::testing::Run({PHOS_PHOS_FN, "--endpoint", endpoint(), "--token-file",
                                                token_file, "invoke", "probe", "--data", "from-file"});
  EXPECT_EQ(by_file.exit_code, 0);
  EXPECT_EQ(by_file.out, "from-file");

  // The listing shows environment values and the digest only to the admin token's bearer.
  Answer open = Curl({}, endpoint() + "/v1/functions");
  ASSERT_EQ(open.status, 200);
  EXPECT_EQ(open.body.find("hunter2"), std::string::npos) << open.body;
  nlohmann::json shown = nlohmann::json::parse(open.body)["functions"][0];
  EXPECT_EQ(shown["env"]["PROBE_SECRET"], "***") << open.body;
  EXPECT_FALSE(shown.contains("invoke_token_sha256")) << open.body;
  Answer admin = Curl(AdminHeader(), endpoint() + "/v1/functions");
  EXPECT_NE(admin.body.find("hunter2"), std::string::npos) << admin.body;
  // The function itself still has its variable.
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "env:PROBE_SECRET").out, "hunter2");
  // A wrong token on an open route is no reason to refuse it, and shows no more.
  Answer wrong_list = Curl(Bearer("nope"), endpoint() + "/v1/functions");
  EXPECT_EQ(wrong_list.status, 200);
  EXPECT_EQ(wrong_list.body.find("hunter2"), std::string::npos);
  // /healthz and /metrics stay open.
  EXPECT_EQ(Curl({}, endpoint() + "/healthz").status, 200);
  EXPECT_EQ(Curl({}, endpoint() + "/metrics").status, 200);

  // A GPU session token is minted for the admin only; removal too.
  Answer session = Curl({"-X", "POST", "--data-binary", "{}", "-H", "Authorization: Bearer " + admin_token()},
                        endpoint() + "/v1/sessions");
  EXPECT_EQ(session.status, 201) << session.body;
  Answer removed = Curl({"-X", "DELETE", "-H", "Authorization: Bearer " + admin_token()},
                        endpoint() + "/v1/functions/probe");
  EXPECT_EQ(removed.status, 200) << removed.body;
}

TEST_F(AuthTest, DeploysNameOnlyFunctionsDirectoryFilesOrUploadedArtifacts) {
  // The /bin/sh deploy: refused before anything runs.
  const std::string marker = "/tmp/phosd-auth-id-" + std::to_string(getpid());
  fs::remove(marker);
  Answer sh =
      Deploy({{"name", "sh"}, {"executable", "/bin/sh"}, {"args", {"-c", "id > " + marker}}}, AdminHeader());
  EXPECT_EQ(sh.status, 400) << sh.body;
  EXPECT_NE(sh.body.find("not under a functions directory"), std::string::npos) << sh.body;
  // A link in a functions directory to a file outside it, and ".." out of one.
  fs::create_symlink("/bin/sh", functions_dir_ + "/sh");
  Answer linked =
      Deploy({{"name", "sh"}, {"executable", functions_dir_ + "/sh"}, {"args", {"-c", "id > " + marker}}},
             AdminHeader());
  EXPECT_EQ(linked.status, 400) << linked.body;
  Answer dotdot = Deploy({{"name", "sh"}, {"executable", functions_dir_ + "/../../bin/sh"}}, AdminHeader());
  EXPECT_EQ(dotdot.status, 400) << dotdot.body;
  Answer relative = Deploy({{"name", "sh"}, {"executable", "bin/sh"}}, AdminHeader());
  EXPECT_EQ(relative.status, 400) << relative.body;
  // Nothing ran and nothing was registered.
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(nlohmann::json::parse(Curl({}, endpoint() + "/v1/functions").body)["functions"].size(), 0u);

  // An artifact whose hash does not match its bytes is refused, and not stored.
  const std::string bytes_file = data_dir() + "/upload";
  std::ofstream(bytes_file) << "#!/bin/sh\nexit 0\n";
  Answer mismatch =
      Curl({"-X", "POST", "--data-binary", "@" + bytes_file, "-H",
            "X-Phos-Artifact-Hash: " + std::string(64, 'a'), "-H", "Authorization: Bearer " + admin_token()},
           endpoint() + "/v1/artifacts");
  EXPECT_EQ(mismatch.status, 400) << mismatch.body;
  EXPECT_NE(mismatch.body.find("mismatch"), std::string::npos) << mismatch.body;
  EXPECT_TRUE(fs::is_empty(data_dir() + "/artifacts"));
  // An unknown artifact cannot be deployed, nor a spec naming both.
  Answer unknown = Deploy({{"name", "x"}, {"artifact", std::string(64, 'b')}}, AdminHeader());
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  Answer both = Deploy({{"name", "x"}, {"artifact", std::string(64, 'b')}, {"executable", PHOS_PROBE_FN}},
                       AdminHeader());
  EXPECT_EQ(both.status, 400) << both.body;

  // mlp, uploaded (it is in the build's functions directory, but deployed as an artifact; larger
  // than --max-body-mib, which the artifacts route does not take), then invoked: the answer
  // matches the CPU reference.
  ASSERT_GT(fs::file_size(PHOS_MLP_FUNCTION), uintmax_t{1} << 20);
  CommandResult uploaded = PhosFn(
      {"deploy", "mlp-artifact", PHOS_MLP_FUNCTION, "--upload", "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(uploaded.exit_code, 0) << uploaded.out;
  EXPECT_NE(uploaded.out.find("as artifact "), std::string::npos) << uploaded.out;
  nlohmann::json listed = nlohmann::json::parse(Curl(AdminHeader(), endpoint() + "/v1/functions").body);
  ASSERT_EQ(listed["functions"].size(), 1u);
  const std::string executable = listed["functions"][0]["executable"].get<std::string>();
  EXPECT_EQ(fs::path(executable).parent_path(), fs::canonical(data_dir() + "/artifacts")) << executable;
  struct stat st {};
  ASSERT_EQ(stat(executable.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);

  CommandResult invoked = CurlPost("/v1/functions/mlp-artifact/invoke", R"({"seed": 7})");
  nlohmann::json j = nlohmann::json::parse(invoked.out, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("checksum") && j.contains("argmax")) << invoked.out;
  const mlp::Shape shape = mlp::ShapeForSize(16, 4, 1);
  std::vector<float> expected = mlp::Reference(42, shape, mlp::InputFromSeed(7, shape));
  double expected_sum = 0;
  for (float v : expected) expected_sum += v;
  EXPECT_NEAR(j["checksum"].get<double>(), expected_sum, 1e-3 * (1 + std::abs(expected_sum)));
  EXPECT_EQ(j["argmax"][0].get<int>(),
            static_cast<int>(std::max_element(expected.begin(), expected.end()) - expected.begin()));

  // An upload without the admin token is held to --max-body-mib before its body is read, and a
  // small one is refused for want of the token.
  Answer anonymous_big = Curl({"-X", "POST", "--data-binary", std::string("@") + PHOS_MLP_FUNCTION},
                              endpoint() + "/v1/artifacts");
  EXPECT_EQ(anonymous_big.status, 413) << anonymous_big.body;
  Answer anonymous_small = Curl({"-X", "POST", "--data-binary", "@" + bytes_file}, endpoint() + "/v1/artifacts");
  EXPECT_EQ(anonymous_small.status, 401) << anonymous_small.body;

  // Any other route takes bodies of --max-body-mib at most.
  const std::string big_file = data_dir() + "/big-request";
  std::ofstream(big_file) << std::string((1 << 20) + 1, ' ');
  Answer too_big = Curl({"-X", "POST", "--data-binary", "@" + big_file}, endpoint() + "/v1/functions/mlp-artifact/invoke");
  EXPECT_EQ(too_big.status, 413) << too_big.body;
}

// phosd started by the test itself: how it treats its listener and its token file.
class PhosdStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phosd-start-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // phosd with `args` that is expected to refuse to start: its exit code and what it said.
  CommandResult Refused(std::vector<std::string> args) {
    SpawnOptions options;
    options.argv = {PHOS_PHOSD, "--data-dir", dir_ + "/data", "--gpu", "sim", "--pool-min", "0"};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.stderr_to_stdout = true;
    Result<CommandOutput> r = RunCommand(options, std::chrono::milliseconds(60000));
    if (!r.ok()) {
      ADD_FAILURE() << "phosd did not refuse to start: " << r.status().ToString();
      return {};
    }
    return {r->status.ShellCode(), r->output};
  }

  // Starts phosd on loopback, waits for /healthz, stops it: the admin token it used.
  std::string StartAndStop() {
    const int port = FreePort();
    Result<Subprocess> phosd =
        Subprocess::Spawn({.argv = {PHOS_PHOSD, "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir",
                                    dir_ + "/data", "--gpu", "sim", "--pool-min", "0"}});
    if (!phosd.ok()) {
      ADD_FAILURE() << phosd.status().ToString();
      return "";
    }
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/healthz";
    EXPECT_TRUE(WaitUntil([&] {
      return ::phos::testing::Run({"/usr/bin/curl", "-sf", url}).exit_code == 0;
    }));
    std::string token = AdminToken(dir_ + "/data");
    Result<ExitStatus> how = phosd->Stop(kPhosdStopGrace, SIGTERM);
    EXPECT_TRUE(how.ok() && how->success());
    return token;
  }

  std::string dir_;
};

TEST_F(PhosdStartTest, TheAdminTokenIsKeptAcrossRestarts) {
  const std::string first = StartAndStop();
  EXPECT_EQ(first.size(), 64u);
  EXPECT_EQ(StartAndStop(), first);
}

TEST_F(PhosdStartTest, NonLoopbackListenNeedsAnAdminTokenFile) {
  for (const char* listen : {"0.0.0.0:0", "[::]:0"}) {
    CommandResult r = Refused({"--listen", listen});
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("--admin-token-file"), std::string::npos) << r.out;
  }
  // A token file others may read, or an empty one, is refused too.
  const std::string token_file = dir_ + "/token";
  std::ofstream(token_file) << "s3cret\n";
  chmod(token_file.c_str(), 0644);
  CommandResult readable = Refused({"--listen", "0.0.0.0:0", "--admin-token-file", token_file});
  EXPECT_EQ(readable.exit_code, 1) << readable.out;
  EXPECT_NE(readable.out.find("chmod 600"), std::string::npos) << readable.out;
  std::ofstream(token_file, std::ios::trunc) << "";
  chmod(token_file.c_str(), 0600);
  CommandResult empty = Refused({"--admin-token-file", token_file});
  EXPECT_EQ(empty.exit_code, 1) << empty.out;
  EXPECT_NE(empty.out.find("empty"), std::string::npos) << empty.out;
}

}  // namespace
}  // namespace phos::testing
