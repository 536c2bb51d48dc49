// Three phosd as one cluster on loopback, with an etcd and an s3rver the test starts: a function
// deployed on node A is served on B and C with A's answer byte for byte, its GPU state fetched
// from the bucket; a new version deployed on B is followed by A; killing A leaves B and C serving,
// A dropping out of the cluster's node list; a removal on one node removes the function from all; a node
// answers /healthz ok only once it has joined. Skipped, saying why, without etcd or s3rver.
#include <signal.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../testing/etcd.h"
#include "../testing/s3rver.h"
#include "mlp_expect.h"
#include "phos/cluster/etcd.h"
#include "phos/base/subprocess.h"
#include "phos/http/client.h"
#include "phos/http/server.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr const char* kBucket = "phos-cluster";
constexpr const char* kRequest = R"({"seed": 5, "full": true})";

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::string why : {etcd_.Start(), s3rver_.Start(kBucket)}) {
      if (why.find("not installed") != std::string::npos) GTEST_SKIP() << why;
      ASSERT_EQ(why, "");
    }
  }

  // Node `name` of the cluster; its lease lasts 2 s, so that a killed node drops out soon.
  std::vector<std::string> NodeArgs(const std::string& name, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"--etcd",      etcd_.endpoint(), "--s3-endpoint", s3rver_.endpoint(),
                                     "--s3-bucket", kBucket,          "--node-name",   name,
                                     "--node-ttl-s", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  static std::vector<std::pair<std::string, std::string>> NodeEnv() {
    return {{"AWS_ACCESS_KEY_ID", "S3RVER"}, {"AWS_SECRET_ACCESS_KEY", "S3RVER"}};
  }
  void StartNode(PhosdNode* node, const std::string& name, const std::vector<std::string>& extra = {}) {
    node->Start(NodeArgs(name, extra), NodeEnv());
  }

  static http::ClientResponse Call(const PhosdNode& node, const std::string& method, const std::string& path,
                                   const std::string& body = "") {
    std::ifstream token_file(node.token_file());
    std::string token;
    std::getline(token_file, token);
    Result<http::ClientResponse> r = http::Fetch({.method = method,
                                                  .url = node.endpoint() + path,
                                                  .body = body,
                                                  .headers = {{"Authorization", "Bearer " + token}},
                                                  .timeout_ms = 240000});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : http::ClientResponse{};
  }
  static http::ClientResponse Invoke(const PhosdNode& node, const std::string& name = "mlp") {
    return Call(node, "POST", "/v1/functions/" + name + "/invoke", kRequest);
  }
  // The names of the nodes `node` sees alive.
  static std::vector<std::string> LiveNodes(const PhosdNode& node) {
    http::ClientResponse r = Call(node, "GET", "/v1/cluster/nodes");
    std::vector<std::string> names;
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_object() || !j.contains("nodes")) return names;
    for (const auto& n : j["nodes"]) names.push_back(n.value("node", ""));
    return names;
  }
  // Whether the registry holds a record of `function` (a deploy's, published after its upload).
  bool Recorded(const std::string& function) {
    Result<cluster::Etcd> etcd = cluster::Etcd::Make({.endpoints = {etcd_.endpoint()}});
    if (!etcd.ok()) return false;
    Result<std::optional<cluster::KeyValue>> kv = etcd->Get("/phos/functions/" + function);
    return kv.ok() && kv->has_value();
  }

  EtcdServer etcd_;
  S3rver s3rver_;
};

TEST_F(ClusterTest, DeployedOnAServesOnBAndCWithAsBytesAndOutlivesA) {
  PHOS_SKIP_WITHOUT_STABLE_DEVICE_ADDRESSES();  // B serves A's bytes only where the ranges lie alike
  PhosdNode a, b, c;
  StartNode(&a, "node-a");
  StartNode(&b, "node-b");
  StartNode(&c, "node-c");
  EXPECT_EQ(LiveNodes(b), (std::vector<std::string>{"node-a", "node-b", "node-c"}));

  CommandResult deployed =
      a.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out << a.Log();
  http::ClientResponse on_a = Invoke(a);
  ASSERT_EQ(on_a.status, 200) << on_a.body;
  ExpectMlpMatchesReference(on_a.body, 5, /*full=*/true);
  // Published once its snapshots are in the bucket.
  ASSERT_TRUE(WaitUntil([&] { return Recorded("mlp"); }, std::chrono::seconds(120))) << a.Log();

  // B has never seen it: adopted on its first invocation, which A's bytes answer.
  http::ClientResponse on_b = Invoke(b);
  ASSERT_EQ(on_b.status, 200) << on_b.body << b.Log();
  EXPECT_EQ(on_b.body, on_a.body);
  const std::string b_log = b.Log();
  EXPECT_NE(b_log.find("imported from the remote tier"), std::string::npos) << b_log;
  EXPECT_EQ(b_log.find("serves its own capture"), std::string::npos) << "B served its own GPU state, not A's:\n"
                                                                     << b_log;
  // Its deploy there is A's version.
  http::ClientResponse listed = Call(b, "GET", "/v1/functions/mlp/versions");
  EXPECT_NE(listed.body.find("\"version\":1"), std::string::npos) << listed.body;

  // A new version deployed on B (other weights): A, which serves the function, follows it.
  http::ClientResponse v2 = Call(b, "POST", "/v1/functions/mlp/versions",
                                 nlohmann::json{{"executable", PHOS_MLP_FUNCTION},
                                                {"instances", 1},
                                                {"args", {"--size-mib", "16", "--layers", "4", "--weight-seed", "7"}}}
                                     .dump());
  ASSERT_EQ(v2.status, 201) << v2.body << b.Log();
  http::ClientResponse v2_on_b = Invoke(b);
  ASSERT_EQ(v2_on_b.status, 200) << v2_on_b.body;
  EXPECT_NE(v2_on_b.body, on_a.body) << "version 2 computes with other weights";
  ASSERT_TRUE(WaitUntil([&] { return Call(a, "GET", "/v1/functions/mlp/versions").body.find(
                                         "\"state\":\"serving\",\"version\":2") != std::string::npos ||
                                     Invoke(a).body == v2_on_b.body; },
                        std::chrono::seconds(120)))
      << Call(a, "GET", "/v1/functions/mlp/versions").body << a.Log();
  EXPECT_EQ(Invoke(a).body, v2_on_b.body);

  // A dies; its lease expires, and B and C serve on — C from the bucket, A being gone.
  a.Kill();
  ASSERT_TRUE(WaitUntil([&] { return LiveNodes(b) == std::vector<std::string>{"node-b", "node-c"}; },
                        std::chrono::seconds(60)));
  http::ClientResponse on_c = Invoke(c);
  ASSERT_EQ(on_c.status, 200) << on_c.body << c.Log();
  EXPECT_EQ(on_c.body, v2_on_b.body);
  http::ClientResponse again = Invoke(b);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.body, v2_on_b.body);

  // A new deploy of the name on a node that never served it is refused: the cluster has it.
  PhosdNode d;
  StartNode(&d, "node-d");
  http::ClientResponse twice =
      Call(d, "POST", "/v1/functions",
           nlohmann::json{{"name", "mlp"}, {"executable", PHOS_MLP_FUNCTION}, {"args", {"--size-mib", "16"}}}.dump());
  EXPECT_EQ(twice.status, 409) << twice.body;
  EXPECT_NE(twice.body.find("deployed in the cluster (version 2, on node 'node-b')"), std::string::npos)
      << twice.body;

  // Removed on C: gone from the registry and from B, which watches it.
  http::ClientResponse removed = Call(c, "DELETE", "/v1/functions/mlp");
  EXPECT_EQ(removed.status, 200) << removed.body;
  EXPECT_FALSE(Recorded("mlp"));
  EXPECT_TRUE(WaitUntil([&] { return Call(b, "GET", "/v1/functions/mlp/versions").status == 404; },
                        std::chrono::seconds(60)))
      << b.Log();
  EXPECT_EQ(Invoke(b).status, 404);
}

// A record someone wrote into etcd by hand naming a program outside the node's functions
// directories is not run: the node adopts only what a deploy there could name. The failed adoption
// is not tried again for each invocation (--adopt-retry-ms, an hour here), until a new record of
// the name comes.
TEST_F(ClusterTest, ARecordNamingAProgramOutsideTheFunctionsDirectoriesIsNotAdopted) {
  PhosdNode a;
  StartNode(&a, "node-a", {"--adopt-retry-ms", "3600000"});
  Result<cluster::Etcd> etcd = cluster::Etcd::Make({.endpoints = {etcd_.endpoint()}});
  ASSERT_TRUE(etcd.ok());
  const nlohmann::json record = {
      {"format_version", 1},
      {"version",
       {{"name", "evil"}, {"executable", "/bin/sh"}, {"args", {"-c", "touch /tmp/phos-cluster-evil"}},
        {"version", 1}, {"executable_sha256", std::string(64, 'a')}}},
      {"node", "elsewhere"},
      {"ranges", {{{"va_slot", 0}, {"manifest", "manifests/evil/elsewhere-1"}},
                  {{"va_slot", 1}, {"manifest", "manifests/evil/elsewhere-2"}}}}};
  ASSERT_TRUE(etcd->Put("/phos/functions/evil", record.dump()).ok());
  http::ClientResponse r = Call(a, "POST", "/v1/functions/evil/invoke", "{}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("executable '/bin/sh'"), std::string::npos) << r.body;
  EXPECT_FALSE(std::filesystem::exists("/tmp/phos-cluster-evil"));
  EXPECT_EQ(Call(a, "GET", "/v1/functions/evil/versions").status, 404) << "registered all the same";

  http::ClientResponse again = Call(a, "POST", "/v1/functions/evil/invoke", "{}");
  EXPECT_EQ(again.status, 400) << again.body;
  EXPECT_NE(again.body.find("executable '/bin/sh'"), std::string::npos) << again.body;
  EXPECT_NE(again.body.find("failed 1 time(s) in a row; not tried again for"), std::string::npos) << again.body;

  // A new record: tried at once (and refused for the same reason).
  nlohmann::json next = record;
  next["version"]["version"] = 2;
  ASSERT_TRUE(etcd->Put("/phos/functions/evil", next.dump()).ok());
  http::ClientResponse retried;
  EXPECT_TRUE(WaitUntil([&] {
    retried = Call(a, "POST", "/v1/functions/evil/invoke", "{}");
    return retried.body.find("not tried again") == std::string::npos;
  })) << retried.body;
  EXPECT_EQ(retried.status, 400) << retried.body;
  EXPECT_NE(retried.body.find("executable '/bin/sh'"), std::string::npos) << retried.body;
  EXPECT_FALSE(std::filesystem::exists("/tmp/phos-cluster-evil"));
}

// A function deleted from the cluster while a node that served it was down is removed from that
// node when it comes back; one the registry still records (deployed there) stays.
TEST_F(ClusterTest, ADeletionMadeWhileANodeWasDownIsAppliedWhenItComesBack) {
  PhosdNode a, b;
  StartNode(&a, "node-a");
  StartNode(&b, "node-b");
  for (auto [node, name] : {std::pair<PhosdNode*, const char*>{&a, "mlp"}, {&b, "kept"}}) {
    CommandResult deployed = node->PhosFn(
        {"deploy", name, PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib", "16", "--layers", "4"});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out << node->Log();
    ASSERT_TRUE(WaitUntil([&] { return Recorded(name); }, std::chrono::seconds(120))) << node->Log();
  }
  http::ClientResponse adopted = Invoke(b);
  ASSERT_EQ(adopted.status, 200) << adopted.body << b.Log();

  b.Stop();
  http::ClientResponse removed = Call(a, "DELETE", "/v1/functions/mlp");
  ASSERT_EQ(removed.status, 200) << removed.body;
  ASSERT_FALSE(Recorded("mlp"));
  ASSERT_NO_FATAL_FAILURE(b.Resume(NodeArgs("node-b"), NodeEnv()));
  EXPECT_TRUE(WaitUntil([&] { return Call(b, "GET", "/v1/functions/mlp/versions").status == 404; },
                        std::chrono::seconds(60)))
      << b.Log();
  EXPECT_EQ(Invoke(b).status, 404);
  EXPECT_TRUE(WaitUntil([&] {
    return b.Log().find("'mlp' was removed from the cluster while this node was away: removed here") !=
           std::string::npos;
  })) << b.Log();
  EXPECT_EQ(Call(b, "GET", "/v1/functions/kept/versions").status, 200);
  EXPECT_TRUE(Recorded("kept"));
  EXPECT_FALSE(Recorded("mlp")) << "brought back by node-b";
}

// The deletion removes the registration of the name node-b noted, not whatever serves the name
// when the node comes back: here node-b's kept file names another registration of mlp than the
// one it serves (as when the name was deployed on it afresh before it learned of the deletion),
// and mlp stays. A file of names only (an earlier phosd's) removes whichever deploy serves them.
TEST_F(ClusterTest, ADeletionMadeWhileANodeWasDownRemovesOnlyTheRegistrationItNoted) {
  PhosdNode a, b;
  StartNode(&a, "node-a");
  StartNode(&b, "node-b");
  for (const char* name : {"mlp", "older"}) {
    CommandResult deployed = a.PhosFn(
        {"deploy", name, PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib", "16", "--layers", "4"});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out << a.Log();
    ASSERT_TRUE(WaitUntil([&] { return Recorded(name); }, std::chrono::seconds(120))) << a.Log();
    http::ClientResponse adopted = Invoke(b, name);
    ASSERT_EQ(adopted.status, 200) << adopted.body << b.Log();
  }
  const std::string kept_file = b.data_dir() + "/cluster-recorded.json";
  ASSERT_TRUE(WaitUntil([&] {
    std::ifstream in(kept_file);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    return j.is_object() && j["recorded"].is_object() && j["recorded"].contains("mlp") && j["recorded"].contains("older");
  })) << b.Log();

  b.Stop();
  for (const char* name : {"mlp", "older"}) {
    http::ClientResponse removed = Call(a, "DELETE", std::string("/v1/functions/") + name);
    ASSERT_EQ(removed.status, 200) << removed.body;
  }
  {
    std::ifstream in(kept_file);
    nlohmann::json j = nlohmann::json::parse(in);
    const int64_t at = j["recorded"]["mlp"]["registered_at_ms"].get<int64_t>();
    ASSERT_GT(at, 0);
    j["recorded"]["mlp"]["registered_at_ms"] = at - 1;  // another registration of the name
    std::ofstream(kept_file) << j.dump();
  }
  ASSERT_NO_FATAL_FAILURE(b.Resume(NodeArgs("node-b"), NodeEnv()));
  EXPECT_TRUE(WaitUntil([&] { return Call(b, "GET", "/v1/functions/older/versions").status == 404; },
                        std::chrono::seconds(60)))
      << b.Log();
  EXPECT_TRUE(WaitUntil([&] { return b.Log().find("'mlp' was removed from the cluster while this node was away, but "
                                                  "another deploy of it serves here") != std::string::npos; }))
      << b.Log();
  EXPECT_EQ(Call(b, "GET", "/v1/functions/mlp/versions").status, 200);

  // An earlier phosd's file, names only: a deletion removes whatever serves the name.
  b.Stop();
  std::ofstream(kept_file) << R"({"recorded": ["mlp"]})";
  ASSERT_NO_FATAL_FAILURE(b.Resume(NodeArgs("node-b"), NodeEnv()));
  EXPECT_TRUE(WaitUntil([&] { return Call(b, "GET", "/v1/functions/mlp/versions").status == 404; },
                        std::chrono::seconds(60)))
      << b.Log();
}

// A name is one node's at a time: a second phosd claiming a live node's name does not start.
TEST_F(ClusterTest, ASecondNodeOfALiveNodesNameIsRefused) {
  PhosdNode a;
  StartNode(&a, "twin");
  CommandResult r = ::phos::testing::Run(
      {"/bin/sh", "-c",
       "AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \"$0\" --gpu sim --listen 127.0.0.1:0 --data-dir "
       "\"$(mktemp -d)\" --etcd \"$1\" --s3-endpoint \"$2\" --s3-bucket \"$3\" --node-name twin 2>&1",
       PHOS_PHOSD, etcd_.endpoint(), s3rver_.endpoint(), kBucket});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("a live node of the cluster is named 'twin' already"), std::string::npos) << r.out;
}

// A node listens before it joins (its record names the port it listens on), and answers /healthz
// 503 until it has joined: a readiness probe must not route to a node the others cannot see yet.
// Its etcd here answers its version and holds the lease grant, joining's first call, while the
// test asks; then refuses it, and the node, not joined, exits.
TEST_F(ClusterTest, ANodeIsNotHealthyUntilItHasJoined) {
  std::mutex mu;
  std::condition_variable granting;
  std::optional<http::Responder> grant;
  http::Router router;
  ASSERT_TRUE(router.Add("GET", "/version", [](http::Request, http::Responder out) {
    out.Send(http::Response::Json(200, R"({"etcdserver": "3.5.0", "etcdcluster": "3.5.0"})"));
  }).ok());
  ASSERT_TRUE(router.Add("POST", "/v3/lease/grant", [&](http::Request, http::Responder out) {
    std::lock_guard lock(mu);
    grant = out;
    granting.notify_all();
  }).ok());
  http::ServerOptions options;
  options.listen = "127.0.0.1:0";
  Result<std::unique_ptr<http::Server>> held_etcd = http::Server::Start(options, std::move(router));
  ASSERT_TRUE(held_etcd.ok()) << held_etcd.status().ToString();

  char dir[] = "/tmp/phosd-joining-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  SpawnOptions spawn;
  spawn.argv = {PHOS_PHOSD,    "--gpu",       "sim",      "--listen", listen, "--data-dir", dir, "--etcd",
                "http://127.0.0.1:" + std::to_string((*held_etcd)->port()), "--s3-endpoint", s3rver_.endpoint(),
                "--s3-bucket", kBucket,       "--node-name", "joining"};
  spawn.env = NodeEnv();
  spawn.stdout_file = std::string(dir) + ".log";
  spawn.stderr_to_stdout = true;
  Result<Subprocess> phosd = Subprocess::Spawn(spawn);
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(granting.wait_for(lock, std::chrono::seconds(120), [&] { return grant.has_value(); }))
        << "the node never asked for its lease";
  }
  // Joining, so listening: not ready.
  CommandResult asked = ::phos::testing::Run({"/usr/bin/curl", "-s", "-w", " %{http_code}", "http://" + listen + "/healthz"});
  EXPECT_EQ(asked.out, "starting\n 503");

  {
    std::lock_guard lock(mu);
    grant->Send(http::Response::Json(500, R"({"error": "held by the test", "code": 14})"));
  }
  Result<ExitStatus> how = phosd->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_FALSE(how->success()) << "a node that could not join must not serve";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(std::string(dir) + ".log", ec);
}

}  // namespace
}  // namespace phos::testing
