// Deploy, list, describe, remove and checkpoint functions, and phosd's metrics: each a route of
// phosd's HTTP API (README, "HTTP"), called as phos-fn calls it.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "client.h"
#include "phos/http/digest.h"
#include "struct_versions.h"

namespace phos::capi {
namespace {

// `path`'s bytes into *bytes; PHOS_INVALID_ARGUMENT (recorded) when it cannot be read.
phos_status ReadFile(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail(PHOS_INVALID_ARGUMENT, "cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  *bytes = std::move(text).str();
  return PHOS_OK;
}

// Uploads the executable at `path` (POST /v1/artifacts with its SHA-256, which phosd checks) and
// returns the artifact's hash in *artifact.
phos_status Upload(const phos_client& client, const std::string& path, std::string* artifact) {
  std::string bytes;
  if (phos_status s = ReadFile(path, &bytes); s != PHOS_OK) return s;
  const std::string hash = http::Sha256Hex(bytes);
  http::ClientResponse answer;
  const std::string what = "upload " + path;
  phos_status s =
      Call(client,
           {.method = "POST",
            .url = "/v1/artifacts",
            .body = std::move(bytes),
            .headers = {{"Content-Type", "application/octet-stream"}, {"X-Phos-Artifact-Hash", hash}}},
           Route::kOther, what, &answer);
  if (s != PHOS_OK) return s;
  nlohmann::json j = nlohmann::json::parse(answer.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("artifact") || j["artifact"] != hash) {
    return Fail(PHOS_INTERNAL, what + ": unexpected answer: " + answer.body);
  }
  *artifact = hash;
  return PHOS_OK;
}

// The deploy's body, the function spec phosd parses (runtime::ParseFunctionSpecJson), as phos-fn
// deploy builds it.
phos_status DeploySpec(const phos_client& client, const phos_deploy_options& o, nlohmann::json* spec) {
  if (phos_status s = CheckName(o.name); s != PHOS_OK) return s;
  if (o.executable == nullptr || *o.executable == '\0') {
    return FailStatic(PHOS_INVALID_ARGUMENT, "phos_deploy: options.executable is required");
  }
  if (o.arg_count > 0 && o.args == nullptr) {
    return FailStatic(PHOS_INVALID_ARGUMENT, "phos_deploy: options.args is NULL but arg_count is not 0");
  }
  std::vector<std::string> args;
  for (size_t i = 0; i < o.arg_count; ++i) {
    if (o.args[i] == nullptr) {
      return Fail(PHOS_INVALID_ARGUMENT, "phos_deploy: options.args[" + std::to_string(i) + "] is NULL");
    }
    args.emplace_back(o.args[i]);
  }
  *spec = {{"name", o.name},
           {"args", args},
           {"instances", o.instances},
           {"max_instances", o.max_instances},
           {"gpus", o.gpus == 0 ? 1 : o.gpus}};
  if (o.upload != 0) {
    std::string artifact;
    if (phos_status s = Upload(client, o.executable, &artifact); s != PHOS_OK) return s;
    (*spec)["artifact"] = artifact;
  } else {
    // phosd resolves the path on its own machine; a relative one is taken from this process's
    // working directory, as phos-fn takes it.
    (*spec)["executable"] = std::filesystem::absolute(o.executable).lexically_normal().string();
  }
  if (o.sample_request != nullptr) (*spec)["sample_request"] = o.sample_request;
  return PHOS_OK;
}

// `j` as JSON text in *text; PHOS_INVALID_ARGUMENT (recorded) when a string the caller gave in it
// is not UTF-8, which JSON cannot carry.
phos_status Dump(const nlohmann::json& j, std::string_view what, std::string* text) {
  try {
    *text = j.dump();
  } catch (const nlohmann::json::type_error& e) {
    return Fail(PHOS_INVALID_ARGUMENT, std::string(what) + ": a string is not valid UTF-8: " + e.what());
  }
  return PHOS_OK;
}

// A 2xx answer's body as NUL-terminated text in *out, when `out` was given.
phos_status Answer(const http::ClientResponse& answer, char** out) {
  if (out == nullptr) return PHOS_OK;
  return ReturnString(answer.body, out);
}

}  // namespace
}  // namespace phos::capi

using phos::capi::Answer;
using phos::capi::Call;
using phos::capi::CheckName;
using phos::capi::CheckNotNull;
using phos::capi::CheckStructSize;
using phos::capi::Fail;
using phos::capi::Guard;
using phos::capi::ReturnString;
using phos::capi::Route;
using phos::http::ClientResponse;

extern "C" {

phos_status phos_deploy(phos_client* client, const phos_deploy_options* options, char** answer_json) {
  return Guard([&]() -> phos_status {
    if (answer_json != nullptr) *answer_json = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_deploy: client"); s != PHOS_OK) return s;
    if (phos_status s = CheckNotNull(options, "phos_deploy: options"); s != PHOS_OK) return s;
    if (phos_status s = CheckStructSize(options->struct_size, sizeof(phos::capi::v1::DeployOptions),
                                        "phos_deploy_options");
        s != PHOS_OK) {
      return s;
    }
    const std::string what = std::string("deploy '") + (options->name != nullptr ? options->name : "") + "'";
    nlohmann::json spec;
    if (phos_status s = phos::capi::DeploySpec(*client, *options, &spec); s != PHOS_OK) return s;
    phos::http::ClientRequest request{
        .method = "POST", .url = "/v1/functions", .headers = {{"Content-Type", "application/json"}}};
    if (phos_status s = phos::capi::Dump(spec, what, &request.body); s != PHOS_OK) return s;
    if (options->sample_timeout_ms > 0) {
      request.headers.emplace_back("X-Phos-Timeout-Ms", std::to_string(options->sample_timeout_ms));
    }
    ClientResponse answer;
    phos_status s = Call(*client, std::move(request), Route::kDeploy, what, &answer);
    if (s != PHOS_OK) return s;
    return Answer(answer, answer_json);
  });
}

phos_status phos_list(phos_client* client, char** json) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(json, "phos_list: json"); s != PHOS_OK) return s;
    *json = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_list: client"); s != PHOS_OK) return s;
    ClientResponse answer;
    if (phos_status s = Call(*client, {.url = "/v1/functions"}, Route::kOther, "list functions", &answer);
        s != PHOS_OK) {
      return s;
    }
    return Answer(answer, json);
  });
}

phos_status phos_describe(phos_client* client, const char* name, char** json) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(json, "phos_describe: json"); s != PHOS_OK) return s;
    *json = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_describe: client"); s != PHOS_OK) return s;
    if (phos_status s = CheckName(name); s != PHOS_OK) return s;
    const std::string what = std::string("describe '") + name + "'";
    ClientResponse list;
    phos_status listed_functions = Call(*client, {.url = "/v1/functions"}, Route::kOther, what, &list);
    if (listed_functions != PHOS_OK) return listed_functions;
    nlohmann::json functions = nlohmann::json::parse(list.body, nullptr, false);
    if (functions.is_discarded() || !functions.is_object() || !functions.contains("functions") ||
        !functions["functions"].is_array()) {
      return Fail(PHOS_INTERNAL, what + ": unexpected answer to GET /v1/functions: " + list.body);
    }
    nlohmann::json entry;
    for (const nlohmann::json& f : functions["functions"]) {
      if (f.is_object() && f.value("name", "") == name) entry = f;
    }
    if (entry.is_null()) return Fail(PHOS_NOT_FOUND, what + ": no function '" + name + "' is deployed");
    ClientResponse instances;
    if (phos_status s = Call(*client, {.url = std::string("/v1/functions/") + name + "/instances"},
                             Route::kOther, what, &instances);
        s != PHOS_OK) {
      return s;
    }
    nlohmann::json listed = nlohmann::json::parse(instances.body, nullptr, false);
    if (listed.is_discarded() || !listed.is_object() || !listed.contains("instances")) {
      return Fail(PHOS_INTERNAL, what + ": unexpected answer to GET /v1/functions/" + name +
                                     "/instances: " + instances.body);
    }
    nlohmann::json described = {{"function", std::move(entry)},
                                {"instances", std::move(listed["instances"])}};
    return ReturnString(described.dump(), json);
  });
}

phos_status phos_remove(phos_client* client, const char* name) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(client, "phos_remove: client"); s != PHOS_OK) return s;
    if (phos_status s = CheckName(name); s != PHOS_OK) return s;
    ClientResponse answer;
    return Call(*client, {.method = "DELETE", .url = std::string("/v1/functions/") + name}, Route::kOther,
                std::string("remove '") + name + "'", &answer);
  });
}

phos_status phos_checkpoint(phos_client* client, const char* name, uint64_t instance, const char* mode,
                            char** answer_json) {
  return Guard([&]() -> phos_status {
    if (answer_json != nullptr) *answer_json = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_checkpoint: client"); s != PHOS_OK) return s;
    if (phos_status s = CheckName(name); s != PHOS_OK) return s;
    std::string url = std::string("/v1/functions/") + name;
    if (instance != 0) url += "/instances/" + std::to_string(instance);
    url += "/checkpoint";
    const std::string what = std::string("checkpoint '") + name + "'";
    // phosd checks the mode; an empty body is its default, stop-the-world.
    std::string body;
    if (mode != nullptr) {
      if (phos_status s = phos::capi::Dump({{"mode", mode}}, what, &body); s != PHOS_OK) return s;
    }
    ClientResponse answer;
    phos_status s = Call(*client,
                         {.method = "POST",
                          .url = std::move(url),
                          .body = std::move(body),
                          .headers = {{"Content-Type", "application/json"}}},
                         Route::kOther, what, &answer);
    if (s != PHOS_OK) return s;
    return Answer(answer, answer_json);
  });
}

phos_status phos_stats(phos_client* client, char** text) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(text, "phos_stats: text"); s != PHOS_OK) return s;
    *text = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_stats: client"); s != PHOS_OK) return s;
    ClientResponse answer;
    if (phos_status s = Call(*client, {.url = "/metrics"}, Route::kOther, "read phosd's metrics", &answer);
        s != PHOS_OK) {
      return s;
    }
    return Answer(answer, text);
  });
}

}  // extern "C"
