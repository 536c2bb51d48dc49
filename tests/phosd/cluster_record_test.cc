// The registry's records of functions (/phos/functions/<name> in etcd): what a node reads there is
// checked as any outside input before it adopts anything, and what it writes reads back the same.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_node.h"

namespace phos::phosd {
namespace {

ClusterRecord Sample() {
  ClusterRecord r;
  r.version.number = 3;
  r.version.spec.name = "mlp";
  r.version.spec.executable = "/opt/phos/functions/mlp";
  r.version.spec.args = {"--size-mib", "16"};
  r.version.spec.instances = 1;  // two instance ranges: one per instance it may run, and a spare
  r.version.executable_sha256 = std::string(64, 'a');
  r.version.deployed_at_ms = 1700000000000;
  r.node = "node-a";
  r.ranges = {{0, "manifests/mlp@3/node-a-7"}, {1, "manifests/mlp@3/node-a-8"}};
  return r;
}

TEST(ClusterRecordTest, AWrittenRecordReadsBackTheSame) {
  Result<ClusterRecord> read = ParseClusterRecord(ClusterRecordToJson(Sample()));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->version.number, 3u);
  EXPECT_EQ(read->version.spec.name, "mlp");
  EXPECT_EQ(read->version.spec.args, Sample().version.spec.args);
  EXPECT_EQ(read->version.executable_sha256, std::string(64, 'a'));
  EXPECT_EQ(read->node, "node-a");
  ASSERT_EQ(read->ranges.size(), 2u);
  EXPECT_EQ(read->ranges[1].va_slot, 1);
  EXPECT_EQ(read->ranges[1].manifest, "manifests/mlp@3/node-a-8");
}

// Each record is a valid one with one thing broken; each is refused with the field named.
TEST(ClusterRecordTest, HostileRecordsAreRefusedNamingWhatIsWrong) {
  const nlohmann::json good = nlohmann::json::parse(ClusterRecordToJson(Sample()));
  auto broken = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    return j.dump();
  };
  struct Case {
    std::string what;
    std::string json;
    std::string said;
  };
  const Case cases[] = {
      {"not JSON", "{\"format_version\": 1,", "not a JSON object"},
      {"an array", "[1, 2]", "not a JSON object"},
      {"a newer format", broken([](auto& j) { j["format_version"] = 2; }), "format_version"},
      {"no version", broken([](auto& j) { j.erase("version"); }), "'version'"},
      {"a version of no name", broken([](auto& j) { j["version"].erase("name"); }), "name"},
      {"a bad name", broken([](auto& j) { j["version"]["name"] = "../etc"; }), "name"},
      {"a zero version", broken([](auto& j) { j["version"]["version"] = 0; }), "'version'"},
      {"a bad digest", broken([](auto& j) { j["version"]["executable_sha256"] = "xyz"; }), "executable_sha256"},
      {"no digest", broken([](auto& j) { j["version"].erase("executable_sha256"); }), "executable_sha256"},
      {"a relative executable", broken([](auto& j) { j["version"]["executable"] = "bin/sh"; }), "absolute"},
      {"too many instances", broken([](auto& j) { j["version"]["instances"] = 100000; }), "instances"},
      {"no node", broken([](auto& j) { j.erase("node"); }), "'node'"},
      {"ranges not a list", broken([](auto& j) { j["ranges"] = "all"; }), "'ranges'"},
      {"a range missing", broken([](auto& j) { j["ranges"].erase(1); }), "'ranges'"},
      {"a negative range", broken([](auto& j) { j["ranges"][0]["va_slot"] = -1; }), "each range"},
      {"a range far out", broken([](auto& j) { j["ranges"][0]["va_slot"] = 1 << 20; }), "each range"},
      {"a manifest elsewhere", broken([](auto& j) { j["ranges"][0]["manifest"] = "chunks/00"; }), "each range"},
      {"a manifest not a string", broken([](auto& j) { j["ranges"][0]["manifest"] = 5; }), "each range"},
      {"an endless manifest key",
       broken([](auto& j) { j["ranges"][0]["manifest"] = "manifests/" + std::string(2000, 'x'); }), "each range"},
  };
  for (const Case& c : cases) {
    Result<ClusterRecord> read = ParseClusterRecord(c.json);
    ASSERT_FALSE(read.ok()) << c.what;
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(read.status().message().find(c.said), std::string::npos) << c.what << ": " << read.status().message();
  }
}

// The executable is the adopting node's to check: a path missing here is no malformed record.
TEST(ClusterRecordTest, AnExecutableThisNodeLacksIsLeftToTheAdoption) {
  ClusterRecord r = Sample();
  r.version.spec.executable = "/nonexistent/phos/function";
  EXPECT_TRUE(ParseClusterRecord(ClusterRecordToJson(r)).ok());
}

}  // namespace
}  // namespace phos::phosd
