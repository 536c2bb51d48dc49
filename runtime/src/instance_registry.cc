#include "phos/runtime/instance_registry.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "phos/base/durable_file.h"
#include "phos/ipc/wire.h"
#include "phos/runtime/instance_manager.h"

namespace phos::runtime {
namespace {

constexpr int kRegistryFormatVersion = 1;
constexpr int kMaxInstances = 64;
// phos's own limit: a device group's devices are the ranks of one communicator, as many as the
// wire format carries. Whether the node has that many is checked against its driver when the
// function is registered (InstanceManager).
constexpr int kMaxGpus = ipc::kMaxNcclRanks;
// Bounds of a spec's cgroup limits: far above any real function, low enough that no product in
// the cgroup files' units (bytes, microseconds) wraps.
constexpr int64_t kMaxMemoryMib = int64_t{1} << 20;
constexpr int64_t kMaxPids = 65536;
constexpr int64_t kMaxCpuMillis = int64_t{1} << 20;

// The fields of "limits", each 0..most.
struct LimitField {
  const char* name;
  int64_t most;
  int64_t FunctionSpec::Limits::*value;
};
constexpr LimitField kLimitFields[] = {
    {"memory_mib", kMaxMemoryMib, &FunctionSpec::Limits::memory_mib},
    {"pids", kMaxPids, &FunctionSpec::Limits::pids},
    {"cpu_millis", kMaxCpuMillis, &FunctionSpec::Limits::cpu_millis},
    {"session_device_mib", int64_t{1} << 20, &FunctionSpec::Limits::session_device_mib},  // 1 TiB
    {"session_buffers", int64_t{1} << 20, &FunctionSpec::Limits::session_buffers},
    {"session_handles", int64_t{1} << 20, &FunctionSpec::Limits::session_handles},
    {"session_module_mib", int64_t{1} << 20, &FunctionSpec::Limits::session_module_mib},
};
constexpr size_t kMaxRegistryBytes = 16u << 20;

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return false;
  }
  return name != "." && name != "..";
}

nlohmann::json ToJson(const FunctionSpec& spec) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : spec.env) env[k] = v;
  nlohmann::json j = {{"name", spec.name},
                      {"executable", spec.executable},
                      {"args", spec.args},
                      {"env", env},
                      {"instances", spec.instances},
                      {"gpus", spec.gpus},
                      {"max_instances", spec.max_instances},
                      {"network", spec.network}};
  // Limits of 0 are left out: a registry whose functions set none loads in a phosd that knows
  // fewer limit names.
  nlohmann::json& limits = j["limits"] = nlohmann::json::object();
  for (const LimitField& f : kLimitFields) {
    if (spec.limits.*f.value != 0) limits[f.name] = spec.limits.*f.value;
  }
  if (!spec.invoke_token_sha256.empty()) j["invoke_token_sha256"] = spec.invoke_token_sha256;
  // Left out at 0, as limits are: a registry that sets none loads in a phosd that knows fewer.
  if (spec.max_queue != 0) j["max_queue"] = spec.max_queue;
  if (spec.keep_alive_ms != 0) j["keep_alive_ms"] = spec.keep_alive_ms;
  if (spec.timeout_ms != 0) j["timeout_ms"] = spec.timeout_ms;
  if (!spec.warmup.empty()) j["warmup"] = spec.warmup;
  if (spec.job.checkpoint_every > 0) {
    j["job"] = {{"checkpoint_every", spec.job.checkpoint_every},
                {"keep", spec.job.keep},
                {"steps", spec.job.steps},
                {"mode", spec.job.mode}};
  }
  return j;
}

// `limits` of a spec: an object of integer fields (kLimitFields), each absent or in range.
Status LimitsFromJson(const nlohmann::json& j, FunctionSpec::Limits* limits) {
  if (!j.is_object()) return Status::InvalidArgument("field 'limits' must be an object");
  for (const auto& [key, value] : j.items()) {
    const LimitField* field = nullptr;
    for (const LimitField& f : kLimitFields) field = key == f.name ? &f : field;
    if (field == nullptr) return Status::InvalidArgument("field 'limits': unknown limit '" + key + "'");
    // Checked as JSON numbers first: a huge or negative number never reaches a cgroup file.
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > field->most) {
      return Status::InvalidArgument("field 'limits': '" + key + "' must be an integer 0.." +
                                     std::to_string(field->most));
    }
    limits->*field->value = value.get<int64_t>();
  }
  return Status::Ok();
}

// `job` of a spec: an object of "checkpoint_every", "keep", "steps" (integers) and "mode" (a
// string), each optional; ranges are ValidateFunctionSpec's.
Status JobFromJson(const nlohmann::json& j, FunctionSpec::Job* job) {
  if (!j.is_object()) return Status::InvalidArgument("field 'job' must be an object");
  for (const auto& [key, value] : j.items()) {
    if (key == "mode") {
      if (!value.is_string()) return Status::InvalidArgument("field 'job': 'mode' must be a string");
      job->mode = value.get<std::string>();
      continue;
    }
    if (key != "checkpoint_every" && key != "keep" && key != "steps") {
      return Status::InvalidArgument("field 'job': unknown field '" + key + "'");
    }
    // Checked as JSON numbers first: a huge one is refused, not wrapped.
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (int64_t{1} << 40)) {
      return Status::InvalidArgument("field 'job': '" + key + "' must be a non-negative integer");
    }
    const int64_t n = value.get<int64_t>();
    if (key == "steps") {
      job->steps = n;
    } else {
      (key == "keep" ? job->keep : job->checkpoint_every) = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
    }
  }
  return Status::Ok();
}

Result<FunctionSpec> FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("function spec must be a JSON object");
  FunctionSpec spec;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return Status::InvalidArgument("field 'name' (string) is required");
  spec.name = name->get<std::string>();
  auto exe = j.find("executable");
  if (exe == j.end() || !exe->is_string()) {
    return Status::InvalidArgument("field 'executable' (string) is required");
  }
  spec.executable = exe->get<std::string>();
  if (auto args = j.find("args"); args != j.end()) {
    if (!args->is_array()) return Status::InvalidArgument("field 'args' must be an array of strings");
    for (const auto& a : *args) {
      if (!a.is_string()) return Status::InvalidArgument("field 'args' must be an array of strings");
      spec.args.push_back(a.get<std::string>());
    }
  }
  if (auto env = j.find("env"); env != j.end()) {
    if (!env->is_object()) return Status::InvalidArgument("field 'env' must be an object of strings");
    for (const auto& [k, v] : env->items()) {
      if (!v.is_string()) return Status::InvalidArgument("field 'env': value of '" + k + "' must be a string");
      spec.env.emplace_back(k, v.get<std::string>());
    }
  }
  if (auto n = j.find("instances"); n != j.end()) {
    if (!n->is_number_integer()) return Status::InvalidArgument("field 'instances' must be an integer");
    spec.instances = n->get<int>();
  }
  if (auto n = j.find("gpus"); n != j.end()) {
    if (!n->is_number_integer()) return Status::InvalidArgument("field 'gpus' must be an integer");
    spec.gpus = n->get<int>();
  }
  if (auto n = j.find("max_instances"); n != j.end()) {
    if (!n->is_number_integer()) return Status::InvalidArgument("field 'max_instances' must be an integer");
    spec.max_instances = n->get<int>();
  }
  // Checked as JSON integers here, their ranges by ValidateFunctionSpec.
  for (const auto& [field, value] : {std::pair<const char*, int64_t*>{"keep_alive_ms", &spec.keep_alive_ms},
                                     std::pair<const char*, int64_t*>{"timeout_ms", &spec.timeout_ms}}) {
    if (auto n = j.find(field); n != j.end()) {
      if (!n->is_number_integer()) return Status::InvalidArgument(std::string("field '") + field + "' must be an integer");
      *value = n->get<int64_t>();
    }
  }
  if (auto n = j.find("max_queue"); n != j.end()) {
    if (!n->is_number_integer() || n->get<int64_t>() < INT32_MIN || n->get<int64_t>() > INT32_MAX) {
      return Status::InvalidArgument("field 'max_queue' must be an integer");
    }
    spec.max_queue = n->get<int>();
  }
  if (auto t = j.find("invoke_token_sha256"); t != j.end()) {
    if (!t->is_string()) return Status::InvalidArgument("field 'invoke_token_sha256' must be a string");
    spec.invoke_token_sha256 = t->get<std::string>();
  }
  if (auto n = j.find("network"); n != j.end()) {
    if (!n->is_boolean()) return Status::InvalidArgument("field 'network' must be true or false");
    spec.network = n->get<bool>();
  }
  if (auto limits = j.find("limits"); limits != j.end()) PHOS_RETURN_IF_ERROR(LimitsFromJson(*limits, &spec.limits));
  if (auto warmup = j.find("warmup"); warmup != j.end()) {
    if (!warmup->is_array()) return Status::InvalidArgument("field 'warmup' must be an array of strings (requests)");
    for (const auto& w : *warmup) {
      if (!w.is_string()) return Status::InvalidArgument("field 'warmup' must be an array of strings (requests)");
      spec.warmup.push_back(w.get<std::string>());
    }
  }
  if (auto job = j.find("job"); job != j.end()) PHOS_RETURN_IF_ERROR(JobFromJson(*job, &spec.job));
  return spec;
}

}  // namespace

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ValidateFunctionSpec(const FunctionSpec& spec) {
  PHOS_RETURN_IF_ERROR(ValidateFunctionSpecFields(spec));
  if (access(spec.executable.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("function '" + spec.name + "': executable '" + spec.executable +
                                   "': " + std::strerror(errno));
  }
  return Status::Ok();
}

Status ValidateFunctionSpecFields(const FunctionSpec& spec) {
  if (!ValidName(spec.name)) {
    return Status::InvalidArgument("function name '" + spec.name + "': use 1-64 characters of [A-Za-z0-9_.-]");
  }
  if (spec.executable.empty() || spec.executable.front() != '/') {
    return Status::InvalidArgument("function '" + spec.name + "': executable '" + spec.executable +
                                   "' must be an absolute path");
  }
  for (const auto& [k, v] : spec.env) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return Status::InvalidArgument("function '" + spec.name + "': bad environment variable name '" + k + "'");
    }
  }
  if (spec.instances < 0 || spec.instances > kMaxInstances) {
    return Status::InvalidArgument("function '" + spec.name + "': instances must be 0.." +
                                   std::to_string(kMaxInstances) + ", not " + std::to_string(spec.instances));
  }
  const int least = spec.instances > 1 ? spec.instances : 1;
  if (spec.max_instances != 0 && (spec.max_instances < least || spec.max_instances > kMaxInstances)) {
    return Status::InvalidArgument("function '" + spec.name + "': max_instances must be 0 or " +
                                   std::to_string(least) + ".." + std::to_string(kMaxInstances) + ", not " +
                                   std::to_string(spec.max_instances));
  }
  struct Range {
    const char* field;
    int64_t value, most;
  };
  for (const Range& r : {Range{"max_queue", spec.max_queue, 100000}, Range{"keep_alive_ms", spec.keep_alive_ms, 86400000},
                         Range{"timeout_ms", spec.timeout_ms, 3600000}}) {
    if (r.value < 0 || r.value > r.most) {
      return Status::InvalidArgument(fmt::format("function '{}': {} must be 0..{}, not {}", spec.name, r.field, r.most,
                                                 r.value));
    }
  }
  if (spec.gpus < 1 || spec.gpus > kMaxGpus) {
    return Status::InvalidArgument("function '" + spec.name + "': gpus must be 1.." + std::to_string(kMaxGpus) +
                                   ", not " + std::to_string(spec.gpus));
  }
  if (!spec.invoke_token_sha256.empty() && !IsSha256Hex(spec.invoke_token_sha256)) {
    return Status::InvalidArgument("function '" + spec.name +
                                   "': invoke_token_sha256 must be a SHA-256 as 64 lowercase hex digits");
  }
  size_t warmup_bytes = 0;
  for (const std::string& w : spec.warmup) warmup_bytes += w.size();
  if (spec.warmup.size() > kMaxWarmupRequests || warmup_bytes > kMaxWarmupBytes) {
    return Status::InvalidArgument("function '" + spec.name + "': at most " + std::to_string(kMaxWarmupRequests) +
                                   " warm-up requests of " + std::to_string(kMaxWarmupBytes >> 20) +
                                   " MiB in all, not " + std::to_string(spec.warmup.size()) + " of " +
                                   std::to_string(warmup_bytes) + " bytes");
  }
  if (const FunctionSpec::Job& job = spec.job; job.checkpoint_every != 0) {
    const std::string what = "function '" + spec.name + "': a job";
    if (job.checkpoint_every < 0 || job.checkpoint_every > 1000000) {
      return Status::InvalidArgument(what + " checkpoints every 1..1000000 steps, not " +
                                     std::to_string(job.checkpoint_every));
    }
    if (job.keep < 1 || job.keep > kMaxJobCheckpointsKept) {
      return Status::InvalidArgument(what + " keeps 1.." + std::to_string(kMaxJobCheckpointsKept) +
                                     " checkpoints, not " + std::to_string(job.keep));
    }
    if (job.steps < 0) return Status::InvalidArgument(what + " runs a non-negative number of steps");
    if (!ParseCheckpointMode(job.mode)) {
      return Status::InvalidArgument(what + "'s checkpoint mode must be stop-the-world, soft-cow or soft-recopy, not '" +
                                     job.mode + "'");
    }
    if (spec.instances != 1 || spec.max_instances > 1) {
      return Status::InvalidArgument(what + " runs exactly one instance (instances 1, max_instances 0 or 1)");
    }
    if (!spec.warmup.empty()) return Status::InvalidArgument(what + " takes no warm-up requests");
  }
  for (const LimitField& f : kLimitFields) {
    const int64_t value = spec.limits.*f.value;
    if (value < 0 || value > f.most) {
      return Status::InvalidArgument("function '" + spec.name + "': limit " + f.name + " must be 0.." +
                                     std::to_string(f.most) + ", not " + std::to_string(value));
    }
  }
  return Status::Ok();
}

Result<FunctionSpec> ParseFunctionSpecJson(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("function spec is not valid JSON");
  return FromJson(j);
}

std::string FunctionSpecToJson(const FunctionSpec& spec) { return ToJson(spec).dump(); }

namespace {

// A registry entry: the spec's fields, and its version's.
nlohmann::json VersionToJson(const FunctionVersion& v) {
  nlohmann::json j = ToJson(v.spec);
  j["version"] = v.number;
  if (!v.executable_sha256.empty()) j["executable_sha256"] = v.executable_sha256;
  if (v.deployed_at_ms != 0) j["deployed_at_ms"] = v.deployed_at_ms;
  return j;
}

Result<FunctionVersion> VersionFromJson(const nlohmann::json& j) {
  FunctionVersion v;
  PHOS_ASSIGN_OR_RETURN(v.spec, FromJson(j));
  if (auto n = j.find("version"); n != j.end()) {
    if (!n->is_number_unsigned() || n->get<uint64_t>() == 0) {
      return Status::InvalidArgument("function '" + v.spec.name + "': field 'version' must be a positive integer");
    }
    v.number = n->get<uint64_t>();
  }
  if (auto h = j.find("executable_sha256"); h != j.end()) {
    if (!h->is_string() || !IsSha256Hex(h->get<std::string>())) {
      return Status::InvalidArgument("function '" + v.spec.name + "': field 'executable_sha256' must be a SHA-256");
    }
    v.executable_sha256 = h->get<std::string>();
  }
  if (auto t = j.find("deployed_at_ms"); t != j.end()) {
    if (!t->is_number_integer()) {
      return Status::InvalidArgument("function '" + v.spec.name + "': field 'deployed_at_ms' must be an integer");
    }
    v.deployed_at_ms = t->get<int64_t>();
  }
  return v;
}

}  // namespace

std::string FunctionVersionToJson(const FunctionVersion& version) { return VersionToJson(version).dump(); }

Result<FunctionVersion> ParseFunctionVersionJson(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("function version is not valid JSON");
  return VersionFromJson(j);
}

Result<FunctionRegistry> LoadFunctionRegistry(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return FunctionRegistry{};
    return Status::FromErrno(errno, "open " + path);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxRegistryBytes) return Status::Corruption(path + ": larger than 16 MiB");
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format_version") || !j.contains("functions") ||
      !j["format_version"].is_number_integer() || !j["functions"].is_array() ||
      (j.contains("versions") && !j["versions"].is_array())) {
    return Status::Corruption(path + ": not a function registry");
  }
  int version = j["format_version"].get<int>();
  if (version != kRegistryFormatVersion) {
    return Status::Corruption(path + ": format version " + std::to_string(version) + ", this phosd reads " +
                              std::to_string(kRegistryFormatVersion));
  }
  FunctionRegistry registry;
  for (const auto& [field, into] : {std::pair{"functions", &registry.serving}, std::pair{"versions", &registry.kept}}) {
    if (!j.contains(field)) continue;
    for (const auto& entry : j[field]) {
      Result<FunctionVersion> v = VersionFromJson(entry);
      if (!v.ok()) return v.status().WithContext(path);
      const std::string name = v->spec.name;
      into->push_back(std::move(v).value());
      auto registered = entry.find("registered_at_ms");
      if (into != &registry.serving || registered == entry.end()) continue;
      if (!registered->is_number_integer() || registered->get<int64_t>() <= 0) {
        return Status::InvalidArgument("function '" + name +
                                       "': field 'registered_at_ms' must be a positive integer")
            .WithContext(path);
      }
      registry.registered_at_ms[name] = registered->get<int64_t>();
    }
  }
  return registry;
}

Status SaveFunctionRegistry(const std::string& path, const FunctionRegistry& registry) {
  nlohmann::json j = {{"format_version", kRegistryFormatVersion},
                      {"functions", nlohmann::json::array()},
                      {"versions", nlohmann::json::array()}};
  for (const FunctionVersion& v : registry.serving) {
    nlohmann::json entry = VersionToJson(v);
    if (auto registered = registry.registered_at_ms.find(v.spec.name);
        registered != registry.registered_at_ms.end()) {
      entry["registered_at_ms"] = registered->second;
    }
    j["functions"].push_back(std::move(entry));
  }
  for (const FunctionVersion& v : registry.kept) j["versions"].push_back(VersionToJson(v));
  // 0600: specs hold their functions' environments, secrets included.
  return ReplaceFileDurably(path, j.dump(2) + "\n", 0600);
}

}  // namespace phos::runtime
