#include "phos/runtime/instance_registry.h"
#include "phos/runtime/restore_mode.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace phos::runtime {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-registry-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// The registry as its serving versions' specs, each version 1.
Status Save(const std::string& path, const std::vector<FunctionSpec>& specs) {
  FunctionRegistry registry;
  for (const FunctionSpec& spec : specs) registry.serving.push_back({.number = 1, .spec = spec});
  return SaveFunctionRegistry(path, registry);
}
Result<std::vector<FunctionSpec>> LoadSpecs(const std::string& path) {
  PHOS_ASSIGN_OR_RETURN(FunctionRegistry registry, LoadFunctionRegistry(path));
  std::vector<FunctionSpec> specs;
  for (const FunctionVersion& v : registry.serving) specs.push_back(v.spec);
  return specs;
}

TEST_F(RegistryTest, SaveLoadRoundTrip) {
  FunctionSpec a{"echo", PHOS_PROBE_FN, {"--x", "1"}, {{"K", "v"}}, 2};
  FunctionSpec b{"other.fn-2", "/bin/true", {}, {}, 1};
  std::string path = dir_ + "/functions.json";
  ASSERT_TRUE(Save(path, {a, b}).ok());
  auto loaded = LoadSpecs(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].name, "echo");
  EXPECT_EQ((*loaded)[0].args, a.args);
  EXPECT_EQ((*loaded)[0].env, a.env);
  EXPECT_EQ((*loaded)[0].instances, 2);
  EXPECT_EQ((*loaded)[1].executable, "/bin/true");
}

TEST_F(RegistryTest, GpusRoundTripAndOldFilesWithoutItLoadAsOneGpu) {
  FunctionSpec wide{"wide", "/bin/true", {}, {}, 1};
  wide.gpus = 2;
  std::string path = dir_ + "/functions.json";
  ASSERT_TRUE(Save(path, {wide}).ok());
  auto loaded = LoadSpecs(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)[0].gpus, 2);
  std::ofstream(dir_ + "/old.json")
      << R"({"format_version": 1, "functions": [{"name": "a", "executable": "/bin/true", "instances": 1}]})";
  auto old = LoadSpecs(dir_ + "/old.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)[0].gpus, 1);
}

TEST_F(RegistryTest, MaxInstancesRoundTripsAndIsValidated) {
  FunctionSpec spec{"burst", "/bin/true", {}, {}, 2};
  EXPECT_EQ(MaxInstances(spec), 2);  // 0: as many as the warm count
  spec.max_instances = 5;
  EXPECT_EQ(MaxInstances(spec), 5);
  EXPECT_TRUE(ValidateFunctionSpec(spec).ok());
  std::string path = dir_ + "/functions.json";
  ASSERT_TRUE(Save(path, {spec}).ok());
  auto loaded = LoadSpecs(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)[0].max_instances, 5);
  spec.max_instances = 1;  // below the warm count
  EXPECT_EQ(ValidateFunctionSpec(spec).code(), StatusCode::kInvalidArgument);
  spec.max_instances = 65;
  EXPECT_EQ(ValidateFunctionSpec(spec).code(), StatusCode::kInvalidArgument);
  auto bad = ParseFunctionSpecJson(R"({"name": "x", "executable": "/bin/true", "max_instances": "many"})");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, NetworkAndLimitsRoundTripAndAreValidated) {
  auto parsed = ParseFunctionSpecJson(
      R"({"name": "web", "executable": "/bin/true", "network": true,
          "limits": {"memory_mib": 512, "pids": 64, "cpu_millis": 1500, "session_device_mib": 2048,
                     "session_buffers": 100, "session_handles": 16, "session_module_mib": 64}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->network);
  EXPECT_EQ(parsed->limits.memory_mib, 512);
  EXPECT_EQ(parsed->limits.pids, 64);
  EXPECT_EQ(parsed->limits.cpu_millis, 1500);
  std::string path = dir_ + "/functions.json";
  ASSERT_TRUE(Save(path, {*parsed}).ok());
  auto loaded = LoadSpecs(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE((*loaded)[0].network);
  EXPECT_EQ((*loaded)[0].limits.memory_mib, 512);
  EXPECT_EQ((*loaded)[0].limits.cpu_millis, 1500);
  EXPECT_EQ((*loaded)[0].limits.session_device_mib, 2048);
  EXPECT_EQ((*loaded)[0].limits.session_buffers, 100);
  EXPECT_EQ((*loaded)[0].limits.session_handles, 16);
  EXPECT_EQ((*loaded)[0].limits.session_module_mib, 64);
  // Absent: no network, no limits.
  auto plain = ParseFunctionSpecJson(R"({"name": "x", "executable": "/bin/true"})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->network);
  EXPECT_EQ(plain->limits.memory_mib, 0);
  for (const char* bad : {R"("network": 1)", R"("limits": 5)", R"("limits": {"memory_mib": -1})",
                          R"("limits": {"pids": 65537})", R"("limits": {"cpu_millis": 1.5})",
                          R"("limits": {"memory_mib": 18446744073709551615})", R"("limits": {"swap": 1})",
                          R"("limits": {"session_device_mib": 1048577})", R"("limits": {"session_handles": -2})"}) {
    auto refused = ParseFunctionSpecJson(std::string(R"({"name": "x", "executable": "/bin/true", )") + bad + "}");
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  FunctionSpec spec{"big", "/bin/true", {}, {}, 1};
  spec.limits.memory_mib = (int64_t{1} << 20) + 1;  // a registry edited by hand
  EXPECT_EQ(ValidateFunctionSpec(spec).code(), StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, VersionsAndRegistrationsRoundTripAndOldFilesServeVersionOne) {
  const std::string digest(64, 'a');
  FunctionRegistry registry;
  registry.serving.push_back({.number = 3, .spec = {"echo", "/bin/true", {}, {{"V", "3"}}, 1},
                              .executable_sha256 = digest, .deployed_at_ms = 1700000000000});
  registry.kept.push_back({.number = 1, .spec = {"echo", "/bin/true", {}, {{"V", "1"}}, 1}});
  registry.registered_at_ms["echo"] = 1690000000000;
  std::string path = dir_ + "/functions.json";
  ASSERT_TRUE(SaveFunctionRegistry(path, registry).ok());
  auto loaded = LoadFunctionRegistry(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->serving.size(), 1u);
  EXPECT_EQ(loaded->serving[0].number, 3u);
  EXPECT_EQ(loaded->serving[0].executable_sha256, digest);
  EXPECT_EQ(loaded->serving[0].deployed_at_ms, 1700000000000);
  ASSERT_EQ(loaded->kept.size(), 1u);
  EXPECT_EQ(loaded->kept[0].number, 1u);
  EXPECT_EQ(loaded->kept[0].spec.env, registry.kept[0].spec.env);
  EXPECT_EQ(loaded->registered_at_ms, registry.registered_at_ms);
  std::ofstream(dir_ + "/old.json")
      << R"({"format_version": 1, "functions": [{"name": "a", "executable": "/bin/true"}]})";
  auto old = LoadFunctionRegistry(dir_ + "/old.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  ASSERT_EQ(old->serving.size(), 1u);
  EXPECT_EQ(old->serving[0].number, 1u);
  EXPECT_TRUE(old->kept.empty());
  EXPECT_TRUE(old->registered_at_ms.empty());
  // A registry edited by hand: a version that is no positive integer, a digest that is none.
  for (const char* bad :
       {R"("version": 0)", R"("version": -2)", R"("version": "2")", R"("executable_sha256": "abc")",
        R"("deployed_at_ms": "now")", R"("registered_at_ms": 0)", R"("registered_at_ms": "now")"}) {
    std::ofstream(dir_ + "/bad.json") << R"({"format_version": 1, "functions": [{"name": "a", "executable": "/bin/true", )"
                                      << bad << "}]}";
    EXPECT_FALSE(LoadFunctionRegistry(dir_ + "/bad.json").ok()) << bad;
  }
  std::ofstream(dir_ + "/bad.json") << R"({"format_version": 1, "functions": [], "versions": {}})";
  EXPECT_EQ(LoadFunctionRegistry(dir_ + "/bad.json").status().code(), StatusCode::kCorruption);
}

TEST(RestoreModeTest, NamesRoundTripAndUnknownNamesAreRefused) {
  for (RestoreMode m : {RestoreMode::kAuto, RestoreMode::kColdBoot, RestoreMode::kStopTheWorld, RestoreMode::kEager,
                        RestoreMode::kNoPool,
                        RestoreMode::kNoOrder, RestoreMode::kPhos, RestoreMode::kWarm}) {
    std::optional<RestoreMode> parsed = ParseRestoreMode(RestoreModeName(m));
    ASSERT_TRUE(parsed.has_value()) << RestoreModeName(m);
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(ParseRestoreMode("fast").has_value());
  EXPECT_FALSE(ParseRestoreMode("").has_value());
  EXPECT_FALSE(ParseRestoreMode("PHOS").has_value());
}

TEST_F(RegistryTest, MissingFileIsEmptyBrokenOrNewerIsRefused) {
  auto empty = LoadSpecs(dir_ + "/absent.json");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  std::ofstream(dir_ + "/broken.json") << "{not json";
  EXPECT_EQ(LoadSpecs(dir_ + "/broken.json").status().code(), StatusCode::kCorruption);
  std::ofstream(dir_ + "/newer.json") << R"({"format_version": 9, "functions": []})";
  auto newer = LoadSpecs(dir_ + "/newer.json");
  EXPECT_EQ(newer.status().code(), StatusCode::kCorruption);
  EXPECT_NE(newer.status().message().find("format version 9"), std::string::npos);
}

TEST(FunctionSpecTest, ParseAndValidate) {
  auto spec = ParseFunctionSpecJson(std::string(R"({"name":"e","executable":")") + PHOS_PROBE_FN +
                                    R"(","args":["a"],"env":{"A":"1"},"instances":3})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->instances, 3);
  EXPECT_TRUE(ValidateFunctionSpec(*spec).ok());

  EXPECT_EQ(ParseFunctionSpecJson("[").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFunctionSpecJson(R"({"executable":"/bin/true"})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFunctionSpecJson(R"({"name":"a","executable":"/bin/true","args":[1]})").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFunctionSpecJson(R"({"name":"a","executable":"/bin/true","instances":"2"})").status().code(),
            StatusCode::kInvalidArgument);

  FunctionSpec bad{"a/b", "/bin/true", {}, {}, 1};
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  bad = {"a", "relative/exe", {}, {}, 1};
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  bad = {"a", "/nonexistent/exe", {}, {}, 1};
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  bad = {"a", "/bin/true", {}, {}, -1};
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  // No warm instance (it scales to zero): valid, and it may still run one at a time.
  FunctionSpec to_zero{"a", "/bin/true", {}, {}, 0};
  EXPECT_TRUE(ValidateFunctionSpec(to_zero).ok());
  EXPECT_EQ(MaxInstances(to_zero), 1);
  EXPECT_EQ(InstanceRanges(to_zero), 2);
  to_zero.max_instances = 1;
  EXPECT_TRUE(ValidateFunctionSpec(to_zero).ok());
  bad = {"a", "/bin/true", {}, {{"A=B", "x"}}, 1};
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  bad = {"a", "/bin/true", {}, {}, 1};
  bad.gpus = 0;
  EXPECT_EQ(ValidateFunctionSpec(bad).code(), StatusCode::kInvalidArgument);
  // Beyond phos's own limit (the ranks of one communicator), whatever the node.
  bad.gpus = 73;
  Status too_many = ValidateFunctionSpec(bad);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("gpus must be 1..72"), std::string::npos) << too_many.message();
  bad.gpus = 72;
  EXPECT_TRUE(ValidateFunctionSpec(bad).ok());
  EXPECT_EQ(ParseFunctionSpecJson(R"({"name":"a","executable":"/bin/true","gpus":"2"})").status().code(),
            StatusCode::kInvalidArgument);
}

// Warm-up requests (post-warm-up snapshots): strings, kept with the spec, within their bounds.
TEST(FunctionSpecTest, WarmUpRequestsAreStringsWithinTheirBoundsAndKept) {
  auto spec = ParseFunctionSpecJson(std::string(R"({"name":"w","executable":")") + PHOS_PROBE_FN +
                                    R"(","warmup":["one","two"]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->warmup, (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(ValidateFunctionSpec(*spec).ok());
  auto again = ParseFunctionSpecJson(FunctionSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->warmup, spec->warmup);
  // Without warm-up requests, the JSON names none (a registry read by a phosd that knows none).
  spec->warmup.clear();
  EXPECT_EQ(FunctionSpecToJson(*spec).find("warmup"), std::string::npos);
  for (const char* bad : {R"("warmup":"one")", R"("warmup":[1])", R"("warmup":[["one"]])"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseFunctionSpecJson(std::string(R"({"name":"w","executable":"/bin/true",)") + bad + "}");
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
  FunctionSpec many{"w", PHOS_PROBE_FN, {}, {}, 1};
  many.warmup.assign(kMaxWarmupRequests, "x");
  EXPECT_TRUE(ValidateFunctionSpec(many).ok());
  many.warmup.push_back("x");
  EXPECT_EQ(ValidateFunctionSpec(many).code(), StatusCode::kInvalidArgument);
  FunctionSpec large{"w", PHOS_PROBE_FN, {}, {}, 1};
  large.warmup = {std::string(kMaxWarmupBytes, 'x'), "y"};
  Status too_large = ValidateFunctionSpec(large);
  EXPECT_EQ(too_large.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_large.message().find("warm-up requests"), std::string::npos) << too_large.message();
}

TEST(FunctionSpecTest, AJobRoundTripsAndItsBoundsAreChecked) {
  auto spec = ParseFunctionSpecJson(std::string(R"({"name":"j","executable":")") + PHOS_PROBE_FN +
                                    R"(","job":{"checkpoint_every":5,"keep":3,"steps":100,"mode":"soft-recopy"}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->job.checkpoint_every, 5);
  EXPECT_EQ(spec->job.keep, 3);
  EXPECT_EQ(spec->job.steps, 100);
  EXPECT_EQ(spec->job.mode, "soft-recopy");
  EXPECT_TRUE(ValidateFunctionSpec(*spec).ok());
  // One instance range: its checkpoints belong to it.
  EXPECT_EQ(InstanceRanges(*spec), 1);
  auto again = ParseFunctionSpecJson(FunctionSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->job.checkpoint_every, 5);
  EXPECT_EQ(again->job.steps, 100);
  EXPECT_EQ(again->job.mode, "soft-recopy");
  // Not a job: no "job" in its JSON, and a spare range.
  FunctionSpec plain{"p", PHOS_PROBE_FN, {}, {}, 1};
  EXPECT_EQ(FunctionSpecToJson(plain).find("\"job\""), std::string::npos);
  EXPECT_EQ(InstanceRanges(plain), 2);
  for (const char* bad : {R"("job":5)", R"("job":{"checkpoint_every":"5"})", R"("job":{"checkpoint_every":-1})",
                          R"("job":{"keep":1e3})", R"("job":{"steps":99999999999999999})", R"("job":{"mode":3})",
                          R"("job":{"sideways":1})"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseFunctionSpecJson(std::string(R"({"name":"j","executable":"/bin/true",)") + bad + "}");
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
  auto refused = [&](auto change, const char* says) {
    FunctionSpec job = *spec;
    change(job);
    Status s = ValidateFunctionSpec(job);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << says;
    EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
  };
  refused([](FunctionSpec& j) { j.job.checkpoint_every = 1000001; }, "checkpoints every 1..1000000 steps");
  refused([](FunctionSpec& j) { j.job.keep = 0; }, "keeps 1..16 checkpoints");
  refused([](FunctionSpec& j) { j.job.keep = kMaxJobCheckpointsKept + 1; }, "keeps 1..16 checkpoints");
  refused([](FunctionSpec& j) { j.job.mode = "sideways"; }, "checkpoint mode must be");
  refused([](FunctionSpec& j) { j.instances = 2; }, "runs exactly one instance");
  refused([](FunctionSpec& j) { j.max_instances = 4; }, "runs exactly one instance");
  refused([](FunctionSpec& j) { j.warmup = {"x"}; }, "takes no warm-up requests");
}

}  // namespace
}  // namespace phos::runtime
