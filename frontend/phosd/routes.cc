#include "routes.h"

#include <fmt/core.h>
#include <prometheus/text_serializer.h>

#include <cctype>
#include <charconv>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "logs.h"
#include "nodes.h"
#include "openapi.h"
#include "phos/base/log.h"
#include "phos/store/manifest.h"

namespace phos::phosd {
namespace {

using http::Request;
using http::Responder;
using http::Response;
using runtime::InvokeOutcome;

// A route's handler; `admin` says whether the caller bore the admin token.
using Handler = std::function<void(Request request, Responder responder, bool admin)>;

Response Error(int status, const std::string& message, std::string_view code = {}) {
  return ErrorResponse(status, message, code);
}

int StatusFor(const Status& s);

// Adds a route that first checks what `access` asks of the caller. Every phosd route is added
// through here, and `access` has no default: a new route states who may call it.
// `max_body_bytes` as Router::Add takes it: 0 for the server's limit. A route's own limit applies
// to the callers its access admits (judged from the headers, before the body is read): an
// unauthenticated upload is held to the server's limit, then refused.
Status AddRoute(http::Router* router, const RouteOptions& options, Access access, std::string method,
                std::string pattern, Handler handler, size_t max_body_bytes = 0) {
  http::Router::BodyLimitApplies admitted;
  if (max_body_bytes != 0 && access == Access::kAdmin) {
    admitted = [policy = options.access](const Request& head) { return policy->IsAdmin(head); };
  }
  auto admit = [access, policy = options.access, manager = options.manager,
                handler = std::move(handler)](Request req, Responder out) {
    std::string invoke_token_sha256;
    if (access == Access::kInvoke) {
      std::optional<runtime::FunctionSpec> spec = manager->Spec(std::string(req.Param("name")));
      if (spec) invoke_token_sha256 = spec->invoke_token_sha256;
    }
    if (auto refused = policy->Check(req, access, invoke_token_sha256)) return out.Send(std::move(*refused));
    const bool admin = access == Access::kAdmin || policy->IsAdmin(req);
    handler(std::move(req), std::move(out), admin);
  };
  if (access != Access::kInvoke || options.cluster == nullptr) {
    return router->Add(std::move(method), std::move(pattern), std::move(admit), max_body_bytes, std::move(admitted));
  }
  // In a cluster, a function another node deployed is adopted here when first invoked — once its
  // record's invoke token admits the caller, so that no caller without it makes a node fetch and
  // deploy anything. The invocation then goes on as on the node that deployed it.
  return router->Add(
      std::move(method), std::move(pattern),
      [admit, policy = options.access, manager = options.manager, cluster = options.cluster](Request req,
                                                                                              Responder out) {
        const std::string name(req.Param("name"));
        if (manager->Spec(name)) return admit(std::move(req), std::move(out));
        auto held = std::make_shared<Request>(std::move(req));
        cluster->FindRecord(name, [=](Result<ClusterRecord> record) {
          if (!record.ok()) {
            if (record.status().code() == StatusCode::kNotFound) return admit(std::move(*held), out);
            return out.Send(Error(StatusFor(record.status()), record.status().message()));
          }
          if (auto refused = policy->Check(*held, Access::kInvoke, record->version.spec.invoke_token_sha256)) {
            return out.Send(std::move(*refused));
          }
          cluster->Serve(name, [=](Status served) {
            if (!served.ok() && served.code() != StatusCode::kNotFound) {
              return out.Send(Error(StatusFor(served), served.message()));
            }
            admit(std::move(*held), out);
          });
        });
      },
      max_body_bytes, std::move(admitted));
}

// A spec as GET /v1/functions shows it to a caller without the admin token: environment values
// (where secrets go) replaced by "***", and no invoke token digest.
void Redact(nlohmann::json* spec) {
  if (auto env = spec->find("env"); env != spec->end() && env->is_object()) {
    for (auto& [key, value] : env->items()) value = "***";
  }
  spec->erase("invoke_token_sha256");
}

// A deploy body naming "artifact" instead of "executable" gets the stored artifact's path as its
// executable. False (with the answer in *error) for a bad or unknown artifact.
bool ResolveArtifact(const Executables& executables, nlohmann::json* body, Response* error) {
  auto artifact = body->find("artifact");
  if (artifact == body->end()) return true;
  if (!artifact->is_string()) {
    *error = Error(400, "field 'artifact' must be a string (the hash POST /v1/artifacts answered)");
    return false;
  }
  if (body->contains("executable")) {
    *error = Error(400, "a function spec names 'executable' or 'artifact', not both");
    return false;
  }
  Result<std::string> path = executables.ArtifactPath(artifact->get<std::string>());
  if (!path.ok()) {
    *error = Error(path.status().code() == StatusCode::kNotFound ? 404 : 400, path.status().message());
    return false;
  }
  (*body)["executable"] = *path;
  body->erase("artifact");
  return true;
}

int StatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kFailedPrecondition: return 503;
    default: return 500;
  }
}

// "first-byte" -> "First-Byte".
std::string HeaderWord(std::string_view stage) {
  std::string out(stage);
  bool start = true;
  for (char& c : out) {
    if (start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    start = c == '-';
  }
  return out;
}

Response InvokeResponse(InvokeOutcome o) {
  switch (o.kind) {
    case InvokeOutcome::Kind::kOk: {
      Response r = Response::Text(200, std::move(o.body));
      r.content_type = "application/octet-stream";
      // A response in pieces is sent with the stages as far as its first piece (first-byte).
      if (o.streamed) r.headers.emplace_back("X-Phos-Streamed", "1");
      // How the instance was brought up, and when each stage of it happened (docs/design.md, "Interfaces").
      r.headers.emplace_back("X-Phos-Restore-Mode", runtime::RestoreModeName(o.mode));
      for (const auto& [stage, us] : o.stages) {
        r.headers.emplace_back("X-Phos-Stage-" + HeaderWord(stage) + "-Us", std::to_string(us));
      }
      // Durations, not times from arrival: how long the restore waited for a range and a context.
      for (const auto& [wait, us] : o.waits) {
        r.headers.emplace_back("X-Phos-Stage-" + HeaderWord(wait) + "-Us", std::to_string(us));
      }
      if (o.speculation_misses >= 0) r.headers.emplace_back("X-Phos-Speculation-Misses", std::to_string(o.speculation_misses));
      // What a restore had brought in when the answer began, of how much: the read set's worth.
      if (o.loaded_bytes_at_first_byte >= 0) {
        r.headers.emplace_back("X-Phos-Loaded-Bytes-At-First-Byte", std::to_string(o.loaded_bytes_at_first_byte));
        r.headers.emplace_back("X-Phos-Snapshot-Bytes", std::to_string(o.snapshot_bytes));
        r.headers.emplace_back("X-Phos-Shared-Bytes", std::to_string(std::max<int64_t>(o.shared_bytes, 0)));
      }
      if (o.modules_loaded >= 0) r.headers.emplace_back("X-Phos-Modules-Loaded", std::to_string(o.modules_loaded));
      // The function moved: the node that served it.
      if (!o.node.empty()) r.headers.emplace_back("X-Phos-Node", o.node);
      return r;
    }
    case InvokeOutcome::Kind::kFunctionError:
      return Error(o.error.code() == StatusCode::kInvalidArgument ? 400 : 500, o.error.message(), "function_error");
    case InvokeOutcome::Kind::kInstanceLost: return Error(502, o.error.message());
    case InvokeOutcome::Kind::kTimeout: return Error(504, o.error.message());
    case InvokeOutcome::Kind::kUnknownFunction: return Error(404, o.error.message());
    case InvokeOutcome::Kind::kStopping: return Error(503, o.error.message());
    case InvokeOutcome::Kind::kOverloaded: {
      // A place in the queue frees as soon as an instance takes the next invocation.
      Response r = Error(429, o.error.message());
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
  }
  return Error(500, "unknown invocation outcome");
}

// X-Phos-Timeout-Ms: a positive integer, or absent (0: the default). False for anything else.
bool ParseTimeout(const Request& req, std::chrono::milliseconds* timeout, Response* error) {
  *timeout = std::chrono::milliseconds(0);
  const std::string* header = req.Header("X-Phos-Timeout-Ms");
  if (header == nullptr) return true;
  long long ms = 0;
  auto [end, ec] = std::from_chars(header->data(), header->data() + header->size(), ms);
  if (ec != std::errc() || end != header->data() + header->size() || ms <= 0) {
    *error = Error(400, "X-Phos-Timeout-Ms must be a positive integer, not '" + *header + "'");
    return false;
  }
  *timeout = std::chrono::milliseconds(ms);
  return true;
}

// The deploy's answer: the spec, and what became of its sample request and of the contexts its
// restores need.
nlohmann::json DeployAnswer(const std::string& spec_json, const runtime::DeployOutcome& d) {
  nlohmann::json j = nlohmann::json::parse(spec_json);
  if (d.sample_ran) {
    j["sample"] = {{"ok", d.sample.ok()}, {"first_touch_learned", d.first_touch_learned}};
    if (!d.sample.ok()) j["sample"]["error"] = d.sample.message();
  }
  j["contexts_ready"] = d.contexts_ready;
  j["version"] = d.version;
  if (d.warmed_up) {
    j["warmed_up"] = {{"pre_entry_bytes", d.pre_entry_bytes},
                      {"warmed_bytes", d.warmed_bytes},
                      {"warmup_us", d.warmup_time.count()}};
  }
  return j;
}

// What a version's state does not allow (another deploying, the one serving): 409, not the 503
// of a phosd that cannot serve now.
Response VersionError(const Status& s) {
  if (s.code() == StatusCode::kFailedPrecondition) return Error(409, s.message(), "conflict");
  return Error(StatusFor(s), s.message());
}

// A deploy's failure: a name taken, a spec refused; for a version (`versioned`), a function unknown
// or a conflict as VersionError says. Else 502: the deploy that failed (the function's start, its
// capture), not an instance lost.
Response DeployError(const Status& s, bool versioned) {
  switch (s.code()) {
    case StatusCode::kAlreadyExists: return Error(409, s.message(), "already_exists");
    case StatusCode::kInvalidArgument: return Error(400, s.message());
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
      if (versioned) return VersionError(s);
      [[fallthrough]];
    default: return Error(502, s.message(), "deploy_failed");
  }
}

nlohmann::json InstancesAnswer(const std::vector<runtime::InstanceStatus>& instances) {
  nlohmann::json list = nlohmann::json::array();
  for (const runtime::InstanceStatus& i : instances) {
    list.push_back({{"id", i.id},
                    {"state", i.state},
                    {"pid", i.pid},
                    {"mode", runtime::RestoreModeName(i.mode)},
                    {"restored", i.restored},
                    {"device", i.device}});
  }
  return nlohmann::json{{"instances", list}};
}

// A checkpoint's body: empty, or {"mode": "stop-the-world" | "soft-cow" | "soft-recopy"} (default
// stop-the-world). False (with the answer in *error) for anything else.
bool ParseCheckpointBody(const std::string& body, runtime::CheckpointMode* mode, Response* error) {
  *mode = runtime::CheckpointMode::kStopTheWorld;
  if (body.empty()) return true;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = Error(400, "a checkpoint's body is a JSON object, {\"mode\": ...}, or empty");
    return false;
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "mode") {
      *error = Error(400, "unknown field '" + key + "' in a checkpoint's body (it takes 'mode')");
      return false;
    }
  }
  if (auto m = j.find("mode"); m != j.end()) {
    std::optional<runtime::CheckpointMode> parsed =
        m->is_string() ? runtime::ParseCheckpointMode(m->get<std::string>()) : std::nullopt;
    if (!parsed) {
      *error = Error(400, "field 'mode' must be one of stop-the-world, soft-cow, soft-recopy");
      return false;
    }
    *mode = *parsed;
  }
  return true;
}

// A checkpoint's or a migration's failure: a mode not built is 501, an instance that ended or a
// phosd stopping 503, the rest as StatusFor says.
Response InstanceActionError(const Status& s) {
  const int status = s.code() == StatusCode::kNotSupported ? 501 : s.code() == StatusCode::kUnavailable ? 503 : StatusFor(s);
  return Error(status, s.message());
}

// The checkpoint's answer: 201 with the snapshot version and the instance's stall.
Response CheckpointResponse(const std::string& function, const runtime::CheckpointOutcome& o) {
  if (!o.status.ok()) return InstanceActionError(o.status);
  nlohmann::json j = {{"function", function},
                      {"instance", o.instance},
                      {"mode", runtime::CheckpointModeName(o.mode)},
                      {"version", o.version},
                      {"stall_us", o.stall.count()},
                      {"total_us", o.total.count()}};
  if (o.mode == runtime::CheckpointMode::kSoftCow) j["copied_before_write"] = o.copies.copied_before_write;
  if (o.mode == runtime::CheckpointMode::kSoftRecopy) {
    j["recopied"] = o.copies.recopied;
    j["recopied_bytes"] = o.copies.recopied_bytes;
  }
  if (o.mode != runtime::CheckpointMode::kStopTheWorld) j["missed_writes"] = o.copies.missed_writes;
  return Response::Json(201, j.dump() + "\n");
}

// A migration's body: {"device": N} (a device of this node), or {"node": "http://HOST:PORT",
// "token": "<its admin token>"} (another phosd). False (with the answer in *error) for anything
// else; the device's range is the instance manager's to check, the node's endpoint HttpPeer's.
struct MigrationBody {
  int device = -1;
  std::string node;
  std::string token;
};
bool ParseMigrationBody(const std::string& body, MigrationBody* out, Response* error) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = Error(400, "a migration's body is a JSON object, {\"device\": N} or {\"node\": URL, \"token\": T}");
    return false;
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "device" && key != "node" && key != "token") {
      *error = Error(400, "unknown field '" + key + "' in a migration's body (it takes 'device', or 'node' and 'token')");
      return false;
    }
  }
  if (j.contains("node")) {
    if (j.contains("device") || !j["node"].is_string() || !j.contains("token") || !j["token"].is_string()) {
      *error = Error(400, "a move to another node names it ('node', a string) and its admin token ('token'), and no "
                          "'device'");
      return false;
    }
    out->node = j["node"].get<std::string>();
    out->token = j["token"].get<std::string>();
    return true;
  }
  auto d = j.find("device");
  if (d == j.end() || !d->is_number_integer() || d->get<int64_t>() < 0 || d->get<int64_t>() > 1024) {
    *error = Error(400, "field 'device' must be the index of one of this node's devices");
    return false;
  }
  out->device = d->get<int>();
  return true;
}

// The migration's answer: 200 with where the instance went, the checkpoint it was restored from
// and the time it served nothing.
Response MigrationResponse(const std::string& function, const runtime::MigrationOutcome& o) {
  if (!o.status.ok()) return InstanceActionError(o.status);
  nlohmann::json j = {{"function", function},
                      {"instance", o.instance},
                      {"from", o.from},
                      {"to", o.to},
                      {"node", o.node},
                      {"node_instance", o.node_instance},
                      {"node_version", o.node_version},
                      {"sent_chunks", o.sent_chunks},
                      {"sent_bytes", o.sent_bytes},
                      {"version", o.version},
                      {"downtime_us", o.downtime.count()},
                      {"committing_us", o.committing.count()},
                      {"releasing_us", o.releasing.count()},
                      {"restoring_us", o.restoring.count()},
                      {"total_us", o.total.count()},
                      {"recopied", o.copies.recopied},
                      {"recopied_bytes", o.copies.recopied_bytes},
                      {"missed_writes", o.copies.missed_writes}};
  return Response::Json(200, j.dump() + "\n");
}

// An instance id from the route's {id}, or 0 when the route has none. False (with the answer in
// *error) for anything but a positive integer.
bool ParseInstanceId(const Request& req, uint64_t* instance, Response* error) {
  *instance = 0;
  std::string_view id = req.Param("id");
  if (id.empty()) return true;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), *instance);
  if (ec != std::errc() || end != id.data() + id.size() || *instance == 0) {
    *error = Error(400, "an instance id is a positive integer, not '" + std::string(id) + "'");
    return false;
  }
  return true;
}

}  // namespace

Status AddRoutes(http::Router* router, RouteOptions options) {
  if (options.manager == nullptr || options.access == nullptr || options.executables == nullptr) {
    return Status::InvalidArgument("phosd routes need an instance manager, an access policy and executables");
  }
  runtime::InstanceManager* manager = options.manager;
  runtime::GpuSessions* sessions = options.sessions;
  const Executables* executables = options.executables;
  ClusterNode* cluster = options.cluster;
  auto add = [&](Access access, std::string method, std::string pattern, Handler handler, size_t max_body_bytes = 0) {
    return AddRoute(router, options, access, std::move(method), std::move(pattern), std::move(handler),
                    max_body_bytes);
  };

  PHOS_RETURN_IF_ERROR(add(Access::kOpen, "GET", "/healthz", [ready = options.ready](Request, Responder out, bool) {
    if (ready != nullptr && !ready->load()) return out.Send(Response::Text(503, "starting\n"));
    out.Send(Response::Text(200, "ok\n"));
  }));

  // Open: load balancers and Prometheus scrape it without a token. It names the deployed functions.
  PHOS_RETURN_IF_ERROR(add(Access::kOpen, "GET", "/metrics", [metrics = options.metrics,
                                                            refresh = options.refresh_metrics](Request, Responder out,
                                                                                               bool) {
    if (refresh) refresh();
    Response r =
        Response::Text(200, metrics != nullptr ? prometheus::TextSerializer().Serialize(metrics->Collect()) : "");
    r.content_type = "text/plain; version=0.0.4";
    out.Send(std::move(r));
  }));

  // This API's OpenAPI document (docs/openapi.yaml), as JSON.
  PHOS_RETURN_IF_ERROR(add(Access::kOpen, "GET", "/openapi.json", [](Request, Responder out, bool) {
    out.Send(Response::Json(200, kOpenApiJson));
  }));

  // Upload an executable: the body is its bytes, X-Phos-Artifact-Hash (optional) their SHA-256.
  // Answered (201) with {"artifact": "<sha256>"} once it is stored; a deploy may then name it.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/artifacts", [executables](Request req, Responder out, bool) {
    // Hex digits in either case, as sha256sum and other tools print them.
    std::string expected;
    if (const std::string* header = req.Header("X-Phos-Artifact-Hash")) expected = *header;
    for (char& c : expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    executables->StoreArtifactAsync(std::move(req.body), std::move(expected),
                                    [out](Result<std::string> stored) {
      if (!stored.ok()) {
        return out.Send(Error(stored.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                              stored.status().message()));
      }
      out.Send(Response::Json(201, nlohmann::json{{"artifact", *stored}}.dump() + "\n"));
    });
  }, executables->options().max_artifact_bytes));

  // Deploy: answered once the function's snapshots are committed (or it failed to get there). The
  // body is a function spec (naming an "executable" under a functions directory, or an uploaded
  // "artifact"), plus an optional "sample_request" (a string) to record the order in which the
  // function first touches its buffers; X-Phos-Timeout-Ms is the sample's deadline. The answer
  // (201) is the spec with its "version", "sample": {"ok", "first_touch_learned", "error"} when a
  // sample ran, "contexts_ready", and with the spec's "warmup" requests "warmed_up":
  // {"pre_entry_bytes", "warmed_bytes", "warmup_us"} (docs/design.md D10). POST
  // /v1/functions/{name}/versions takes the same body (its "name", if any, the route's) and deploys
  // it as a new version of a registered function (D18).
  auto deploy = [manager, executables, cluster](Request req, Responder out, bool) {
    const std::string versioned(req.Param("name"));  // empty: a new function
    std::chrono::milliseconds sample_timeout;
    if (Response bad; !ParseTimeout(req, &sample_timeout, &bad)) return out.Send(std::move(bad));
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    std::string sample;
    if (body.is_object()) {
      if (auto it = body.find("sample_request"); it != body.end()) {
        if (!it->is_string()) return out.Send(Error(400, "field 'sample_request' must be a string"));
        sample = it->get<std::string>();
        body.erase(it);
      }
      if (!versioned.empty()) {
        auto name = body.find("name");
        if (name != body.end() && *name != versioned) {
          return out.Send(Error(400, "a new version of '" + versioned + "' keeps its name"));
        }
        body["name"] = versioned;
      }
      if (Response bad; !ResolveArtifact(*executables, &body, &bad)) return out.Send(std::move(bad));
    }
    Result<runtime::FunctionSpec> spec = runtime::ParseFunctionSpecJson(body.is_object() ? body.dump() : req.body);
    if (!spec.ok()) return out.Send(Error(400, spec.status().message()));
    // The file instances will run is the one checked: its real path, no link left to retarget.
    Result<std::string> executable = executables->Resolve(spec->executable);
    if (!executable.ok()) return out.Send(Error(400, executable.status().message()));
    spec->executable = *executable;
    auto answer = [out, json = runtime::FunctionSpecToJson(*spec), versioned = !versioned.empty()](
                      runtime::DeployOutcome outcome) {
      if (!outcome.status.ok()) return out.Send(DeployError(outcome.status, versioned));
      out.Send(Response::Json(201, DeployAnswer(json, outcome).dump() + "\n"));
    };
    auto run = [manager, spec = *spec, sample = std::move(sample), sample_timeout, answer = std::move(answer),
                versioned = !versioned.empty()]() mutable {
      if (!versioned) return manager->Deploy(spec, std::move(sample), sample_timeout, std::move(answer));
      manager->DeployVersion(spec, std::move(sample), sample_timeout, std::move(answer));
    };
    if (cluster == nullptr || manager->Spec(spec->name)) return run();
    // A name the cluster knows is one function on every node: a new deploy of it is refused as on
    // the node that has it, and a new version of it deploys here over the version adopted first.
    const std::string name = spec->name;
    auto shared_run = std::make_shared<decltype(run)>(std::move(run));
    cluster->FindRecord(name, [=, versioned = !versioned.empty()](Result<ClusterRecord> record) {
      if (!record.ok() && record.status().code() != StatusCode::kNotFound) {
        return out.Send(Error(StatusFor(record.status()), record.status().message()));
      }
      if (!record.ok()) return (*shared_run)();
      if (!versioned) {
        return out.Send(DeployError(Status::AlreadyExists(fmt::format(
                                        "function '{}' is deployed in the cluster (version {}, on node '{}'); deploy "
                                        "it as a new version",
                                        name, record->version.number, record->node)),
                                    false));
      }
      cluster->Serve(name, [=](Status served) {
        if (!served.ok()) return out.Send(DeployError(served, true));
        (*shared_run)();
      });
    });
  };
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions", deploy));
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/versions", deploy));

  // A function's versions, oldest first: each one's number, state ("serving", "deploying", "kept"),
  // when it was deployed, its executable and that file's SHA-256 then, and its spec.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "GET", "/v1/functions/{name}/versions", [manager](Request req, Responder out,
                                                                                            bool) {
    const std::string name(req.Param("name"));
    Result<std::vector<runtime::VersionStatus>> versions = manager->Versions(name);
    if (!versions.ok()) return out.Send(Error(StatusFor(versions.status()), versions.status().message()));
    nlohmann::json list = nlohmann::json::array();
    for (const runtime::VersionStatus& v : *versions) {
      list.push_back({{"version", v.version.number},
                      {"state", v.state},
                      {"deployed_at_ms", v.version.deployed_at_ms},
                      {"executable", v.version.spec.executable},
                      {"executable_sha256", v.version.executable_sha256},
                      {"spec", nlohmann::json::parse(runtime::FunctionSpecToJson(v.version.spec))}});
    }
    out.Send(Response::Json(200, nlohmann::json{{"name", name}, {"versions", list}}.dump() + "\n"));
  }));

  // Serve a kept version again: the body is empty or {"version": N} (default: the newest one older
  // than the serving one). Answered as a deploy is, once it serves.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/rollback", [manager](Request req, Responder out,
                                                                                              bool) {
    uint64_t version = 0;
    if (!req.body.empty()) {
      nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
      if (j.is_discarded() || !j.is_object() || j.size() > 1 || (j.size() == 1 && !j.contains("version")) ||
          (j.contains("version") && (!j["version"].is_number_unsigned() || j["version"].get<uint64_t>() == 0))) {
        return out.Send(Error(400, "a rollback's body is empty or {\"version\": N}, N a positive integer"));
      }
      if (j.contains("version")) version = j["version"].get<uint64_t>();
    }
    const std::string name(req.Param("name"));
    manager->Rollback(name, version, [out, manager, name](runtime::DeployOutcome outcome) {
      if (!outcome.status.ok()) return out.Send(DeployError(outcome.status, /*versioned=*/true));
      std::optional<runtime::FunctionSpec> spec = manager->Spec(name);
      nlohmann::json spec_json = spec ? nlohmann::json::parse(runtime::FunctionSpecToJson(*spec)) : nlohmann::json{};
      out.Send(Response::Json(200, DeployAnswer(spec_json.dump(), outcome).dump() + "\n"));
    });
  }));

  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "DELETE", "/v1/functions/{name}/versions/{version}",
                           [manager](Request req, Responder out, bool) {
    const std::string name(req.Param("name"));
    std::string_view text = req.Param("version");
    uint64_t version = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), version);
    if (ec != std::errc() || end != text.data() + text.size() || version == 0) {
      return out.Send(Error(400, "a version is a positive integer, not '" + std::string(text) + "'"));
    }
    Status deleted = manager->DeleteVersion(name, version);
    if (!deleted.ok()) return out.Send(VersionError(deleted));
    out.Send(Response::Json(200, nlohmann::json{{"name", name}, {"deleted_version", version}}.dump() + "\n"));
  }));

  // Open, but environment values are shown only to the admin token's bearer (Redact).
  PHOS_RETURN_IF_ERROR(add(Access::kOpen, "GET", "/v1/functions", [manager](Request, Responder out, bool admin) {
    nlohmann::json list = nlohmann::json::array();
    for (const runtime::FunctionStatus& f : manager->List()) {
      nlohmann::json j = nlohmann::json::parse(runtime::FunctionSpecToJson(f.spec));
      if (!admin) Redact(&j);
      j["state"] = {{"starting", f.starting}, {"idle", f.idle}, {"busy", f.busy}, {"ending", f.ending},
                    {"queued", f.queued}};
      if (!f.moved_to.empty() && admin) {
        j["moved_to"] = f.moved_to;
        j["forwarding"] = f.forwarding;
      }
      if (!f.deploy_stage.empty()) j["deploy_stage"] = f.deploy_stage;
      j["version"] = f.version;
      if (f.deploying_version != 0) j["deploying_version"] = f.deploying_version;
      list.push_back(std::move(j));
    }
    out.Send(Response::Json(200, nlohmann::json{{"functions", list}}.dump() + "\n"));
  }));

  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "DELETE", "/v1/functions/{name}", [manager, cluster,
                                                                                work = options.blocking_work](
                                                                                   Request req, Responder out, bool) {
    const std::string name(req.Param("name"));
    auto removed_answer = [out, name] {
      out.Send(Response::Json(200, nlohmann::json{{"removed", name}}.dump() + "\n"));
    };
    if (cluster == nullptr || work == nullptr) {
      Status removed = manager->Remove(name);
      if (!removed.ok()) return out.Send(Error(StatusFor(removed), removed.message()));
      return removed_answer();
    }
    // In a cluster the record goes too, and with it the function from every node (each watches).
    work->Post([=] {
      Status removed = manager->Remove(name);
      // Whether the registry had it decides only between 200 and 404; the delete is sent anyway
      // (a record this node cannot read, or etcd not answering, is no reason to keep it).
      Result<ClusterRecord> recorded = cluster->Record(name);
      if (Status forgot = cluster->Forget(name); !forgot.ok()) {
        return out.Send(Error(503, (removed.ok() ? "removed here; not from the cluster: " : "not removed from the "
                                                                                             "cluster: ") +
                                       forgot.message()));
      }
      if (!removed.ok() && !(removed.code() == StatusCode::kNotFound &&
                             recorded.status().code() != StatusCode::kNotFound)) {
        return out.Send(Error(StatusFor(removed), removed.message()));
      }
      removed_answer();
    });
  }));

  // The cluster's live nodes (docs/design.md D19): each one's name, endpoint, device kind and count.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "GET", "/v1/cluster/nodes", [cluster, work = options.blocking_work](
                                                                            Request, Responder out, bool) {
    if (cluster == nullptr || work == nullptr) return out.Send(Error(503, "this node is not part of a cluster (--etcd)"));
    work->Post([=] {
      Result<nlohmann::json> nodes = cluster->Nodes();
      if (!nodes.ok()) return out.Send(Error(StatusFor(nodes.status()), nodes.status().message()));
      out.Send(Response::Json(200, nlohmann::json{{"node", cluster->node()}, {"nodes", *nodes}}.dump() + "\n"));
    });
  }));

  PHOS_RETURN_IF_ERROR(
      add(Access::kInvoke, "POST", "/v1/functions/{name}/invoke", [manager](Request req, Responder out, bool) {
        std::chrono::milliseconds timeout;
        if (Response bad; !ParseTimeout(req, &timeout, &bad)) return out.Send(std::move(bad));
        runtime::RestoreMode mode = runtime::RestoreMode::kAuto;
        if (const std::string* header = req.Header("X-Phos-Restore-Mode")) {
          std::optional<runtime::RestoreMode> parsed = runtime::ParseRestoreMode(*header);
          if (!parsed) {
            return out.Send(Error(400, "X-Phos-Restore-Mode must be one of auto, cold-boot, stop-the-world, no-pool, "
                                       "no-order, eager, phos, warm; not '" + *header + "'"));
          }
          mode = *parsed;
        }
        // A function that answers in pieces gets each forwarded as an HTTP chunk as it arrives.
        auto on_piece = [out](std::string piece, const InvokeOutcome* head) {
          if (head != nullptr) {
            InvokeOutcome first = *head;
            first.streamed = true;
            out.Begin(InvokeResponse(std::move(first)));
          }
          out.Chunk(std::move(piece));
        };
        manager->Invoke(std::string(req.Param("name")),
                        {.request = std::move(req.body),
                         .timeout = timeout,
                         .mode = mode,
                         .on_piece = on_piece,
                         .request_id = req.id},
                        [out](InvokeOutcome o) {
                          if (!o.streamed) return out.Send(InvokeResponse(std::move(o)));
                          if (o.kind != InvokeOutcome::Kind::kOk) {
                            PHOS_LOG(Warn, "http", "a response sent in pieces was cut short: {}", o.error.message());
                            return out.Abort();
                          }
                          out.Chunk(std::move(o.body));
                          out.End();
                        });
      }));

  // A function's instances: id, state, pid, how each was brought up. Admin: pids and states are
  // the operator's to see.
  PHOS_RETURN_IF_ERROR(
      add(Access::kAdmin, "GET", "/v1/functions/{name}/instances", [manager](Request req, Responder out, bool) {
        Result<std::vector<runtime::InstanceStatus>> instances = manager->Instances(std::string(req.Param("name")));
        if (!instances.ok()) return out.Send(Error(StatusFor(instances.status()), instances.status().message()));
        out.Send(Response::Json(200, InstancesAnswer(*instances).dump() + "\n"));
      }));

  // A function's logs, its processes' standard output and error: the last ?tail= bytes (default
  // 64 KiB) of each of its log files, headed "==> FILE <==", and with ?follow=1 what they gain,
  // streamed until the client goes away or the function is removed. Admin: logs hold what the
  // function printed, secrets included.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "GET", "/v1/functions/{name}/logs",
                           [manager, followers = options.log_followers,
                            work = options.blocking_work](Request req, Responder out, bool) {
    bool follow = false;
    uint64_t tail = 64 * 1024;
    for (std::string_view rest = req.query; !rest.empty();) {
      const size_t amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      const size_t eq = pair.find('=');
      const std::string_view key = pair.substr(0, eq);
      const std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      if (key == "follow") {
        follow = value == "1" || value == "true";
      } else if (key == "tail") {
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), tail);
        if (ec != std::errc() || end != value.data() + value.size() || tail > kMaxLogTailBytes) {
          return out.Send(Error(400, fmt::format("tail is a number of bytes, at most {}", kMaxLogTailBytes)));
        }
      } else if (!key.empty()) {
        return out.Send(Error(400, "unknown parameter '" + std::string(key) + "' (it takes follow and tail)"));
      }
    }
    std::string function(req.Param("name"));
    Result<std::vector<std::string>> files = manager->LogFiles(function);
    if (!files.ok()) return out.Send(Error(StatusFor(files.status()), files.status().message()));
    if (!follow) {
      if (work == nullptr) return out.Send(Error(503, "this phosd reads no logs"));
      // Up to `tail` bytes of each file: read off the server's loop.
      return work->Post([out, files = std::move(files).value(), tail] {
        LogOffsets read;
        out.Send(Response::Text(200, TailLogs(files, tail, &read)));
      });
    }
    if (followers == nullptr) return out.Send(Error(503, "this phosd does not follow logs"));
    if (!out.Begin(Response::Text(200, ""))) return;
    followers->Follow(
        [manager, function]() -> std::optional<std::vector<std::string>> {
          Result<std::vector<std::string>> now = manager->LogFiles(function);
          if (!now.ok()) return std::nullopt;
          return std::move(now).value();
        },
        out, tail);
  }));

  // What becomes of instances, as it happens: one JSON object per line (EventStream), the first
  // {"event": "subscribed"}, for as long as the client listens.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "GET", "/v1/events", [events = options.events](Request, Responder out, bool) {
    if (events == nullptr) return out.Send(Error(503, "this phosd streams no events"));
    events->Subscribe(std::move(out));
  }));

  // Where a job stands (docs/design.md D10): {"step", "steps", "finished", "checkpoints":
  // [{"version", "step"}], "losses": the path of its losses file}. Admin, as instances are.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "GET", "/v1/functions/{name}/job", [manager](Request req, Responder out, bool) {
    Result<runtime::JobStatus> job = manager->Job(std::string(req.Param("name")));
    if (!job.ok()) return out.Send(Error(StatusFor(job.status()), job.status().message()));
    nlohmann::json kept = nlohmann::json::array();
    for (const runtime::JobStatus::Kept& c : job->checkpoints) kept.push_back({{"version", c.version}, {"step", c.step}});
    nlohmann::json j = {{"step", job->step},
                        {"steps", job->steps},
                        {"finished", job->finished},
                        {"checkpoints", kept},
                        {"losses", job->losses_path}};
    out.Send(Response::Json(200, j.dump() + "\n"));
  }));

  // Checkpoint a running instance (docs/design.md D10): the named one, or (without an id) an
  // idle one of the function. Answered once the new snapshot version is committed and the
  // instance's range restores from it (201), with the time the instance served nothing.
  auto checkpoint = [manager](Request req, Responder out, bool) {
    runtime::CheckpointMode mode;
    if (Response bad; !ParseCheckpointBody(req.body, &mode, &bad)) return out.Send(std::move(bad));
    uint64_t instance = 0;
    if (Response bad; !ParseInstanceId(req, &instance, &bad)) return out.Send(std::move(bad));
    std::string function(req.Param("name"));
    manager->Checkpoint(function, instance, mode, [out, function](runtime::CheckpointOutcome o) {
      out.Send(CheckpointResponse(function, o));
    });
  };
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/checkpoint", checkpoint));
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/instances/{id}/checkpoint", checkpoint));

  // Move a running instance to another device of this node, or to another node (docs/design.md
  // D10): the named one, or (without an id) an idle one of the function. Answered once it serves
  // again there (200), with the time it served nothing; requests sent meanwhile wait for it (to
  // another node: they are forwarded there, as every later one is).
  auto migrate = [manager, store = options.store](Request req, Responder out, bool) {
    MigrationBody body;
    if (Response bad; !ParseMigrationBody(req.body, &body, &bad)) return out.Send(std::move(bad));
    uint64_t instance = 0;
    if (Response bad; !ParseInstanceId(req, &instance, &bad)) return out.Send(std::move(bad));
    runtime::MigrationTarget target{.device = body.device};
    if (!body.node.empty()) {
      if (store == nullptr) return out.Send(Error(503, "this phosd keeps no snapshots to send"));
      Result<std::shared_ptr<HttpPeer>> peer = HttpPeer::Make(body.node, body.token, store);
      if (!peer.ok()) return out.Send(Error(400, peer.status().message()));
      target.node = *peer;
    }
    std::string function(req.Param("name"));
    manager->Migrate(function, instance, std::move(target), [out, function](runtime::MigrationOutcome o) {
      out.Send(MigrationResponse(function, o));
    });
  };
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/migrate", migrate));
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/instances/{id}/migrate", migrate));

  // The receiving side of a move from another node (nodes.h): which chunks this node lacks, a
  // chunk, and the snapshot that references them, restored in the function's instance range.
  // Admin: the sending node bears this node's admin token. The store's work runs off the loop.
  store::Store* store = options.store;
  TaskThreads* blocking_work = options.blocking_work;
  auto no_store = [store, blocking_work](const Responder& out) {
    if (store != nullptr && blocking_work != nullptr) return false;
    out.Send(Error(503, "this phosd keeps no snapshots"));
    return true;
  };
  // Body: {"chunks": ["<32 hex digits>", ...]} (at most kMaxChunksAskedAtOnce). Answer: {"missing":
  // [...]}, those of them this node does not hold.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/chunks/missing", [=](Request req, Responder out, bool) {
    if (no_store(out)) return;
    nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
    if (!j.is_object() || !j.contains("chunks") || !j["chunks"].is_array() || j["chunks"].size() > kMaxChunksAskedAtOnce) {
      return out.Send(Error(400, fmt::format("the body is {{\"chunks\": [chunk ids]}}, at most {} of them",
                                             kMaxChunksAskedAtOnce)));
    }
    std::vector<store::ChunkId> ids;
    for (const nlohmann::json& hex : j["chunks"]) {
      Result<store::ChunkId> id = hex.is_string() ? store::ChunkId::FromHex(hex.get<std::string>())
                                                  : Result<store::ChunkId>(Status::InvalidArgument("not a string"));
      if (!id.ok()) return out.Send(Error(400, "a chunk id is 32 hex digits: " + id.status().message()));
      ids.push_back(*id);
    }
    blocking_work->Post([store, out, ids = std::move(ids)] {
      Result<std::vector<store::ChunkId>> missing = store->MissingChunks(ids);
      if (!missing.ok()) return out.Send(Error(500, missing.status().message()));
      nlohmann::json list = nlohmann::json::array();
      for (const store::ChunkId& id : *missing) list.push_back(id.ToHex());
      out.Send(Response::Json(200, nlohmann::json{{"missing", list}}.dump() + "\n"));
    });
  }));
  // Body: the chunk's bytes, checked against its id. 201 once stored (durably, referenced by no
  // snapshot until one that names it is committed here).
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "PUT", "/v1/chunks/{id}", [=](Request req, Responder out, bool) {
    if (no_store(out)) return;
    Result<store::ChunkId> id = store::ChunkId::FromHex(req.Param("id"));
    if (!id.ok()) return out.Send(Error(400, "a chunk id is 32 hex digits: " + id.status().message()));
    blocking_work->Post([store, out, id = *id, bytes = std::move(req.body)] {
      Status put = store->PutChunk(id, bytes);
      if (!put.ok()) return out.Send(Error(put.code() == StatusCode::kInvalidArgument ? 400 : 500, put.message()));
      out.Send(Response::Json(201, nlohmann::json{{"chunk", id.ToHex()}}.dump() + "\n"));
    });
  }, store != nullptr ? store->options().chunk_bytes : 0));
  // Body: a snapshot's manifest (its binary envelope) whose chunks this node holds. It becomes a
  // version of the function here and instance range {range} restores from it, under this node's
  // deploy of the function; answered (201) with {"version", "instance"} once the instance restored
  // there is ready. A snapshot whose layout is not the range's is refused (409) and deleted.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/functions/{name}/ranges/{range}/snapshot",
                           [=](Request req, Responder out, bool) {
    if (no_store(out)) return;
    int range = -1;
    std::string_view text = req.Param("range");
    if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), range);
        ec != std::errc() || end != text.data() + text.size() || range < 0) {
      return out.Send(Error(400, "an instance range is a non-negative integer, not '" + std::string(text) + "'"));
    }
    std::string function(req.Param("name"));
    if (!manager->Spec(function)) return out.Send(Error(404, "no function '" + function + "' on this node"));
    blocking_work->Post([=, bytes = std::move(req.body)] {
      Result<store::Manifest> manifest = store::DecodeManifest(bytes);
      if (!manifest.ok()) return out.Send(Error(400, "the snapshot's manifest: " + manifest.status().message()));
      // The sending node's CPU state means nothing here: the range's own template is restored.
      manifest->cpu_state = {};
      Result<uint64_t> version = store->CommitImported(function, std::move(manifest).value());
      if (!version.ok()) {
        // 412: chunks it was sent are gone (collected before the commit), so the sender sends again.
        return out.Send(Error(version.status().code() == StatusCode::kNotFound ? 412 : 400, version.status().message()));
      }
      manager->AdoptSnapshot(function, range, *version, [=, v = *version](runtime::MigrationOutcome o) {
        if (o.status.ok()) {
          return out.Send(Response::Json(
              201, nlohmann::json{{"function", function}, {"version", v}, {"instance", o.instance}}.dump() + "\n"));
        }
        // Refused before the range took it (version 0): nothing restores from it, it goes (on the
        // store's thread: this may be a manager's). Taken, it stays the range's though the
        // instance failed: the range's next restore starts from it.
        if (o.version == 0) {
          blocking_work->Post([store, function, v] { store->DeleteVersion(function, v).IgnoreError(); });
        }
        const int status = o.status.code() == StatusCode::kFailedPrecondition ? 409 : InstanceActionError(o.status).status;
        out.Send(Error(status, o.status.message()));
      });
    });
  }));

  // Body: empty, or {"gpus": N} (1 to the node's device count; default 1) for a program that uses
  // several devices. Admin: a session token runs GPU work in phosd.
  PHOS_RETURN_IF_ERROR(add(Access::kAdmin, "POST", "/v1/sessions", [sessions](Request req, Responder out, bool) {
    if (sessions == nullptr) return out.Send(Error(503, "this phosd has no GPU sessions"));
    int gpus = 1;
    if (!req.body.empty()) {
      nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) return out.Send(Error(400, "session request is not a JSON object"));
      if (auto g = body.find("gpus"); g != body.end()) {
        const int devices = sessions->DeviceCount();
        if (!g->is_number_integer() || g->get<int>() < 1 || g->get<int>() > devices) {
          return out.Send(Error(400, "field 'gpus' must be an integer 1.." + std::to_string(devices) +
                                         " (this node's devices)"));
        }
        gpus = g->get<int>();
      }
    }
    nlohmann::json j = {
        {"token", sessions->IssueExternalToken(gpus)}, {"gpu_socket", sessions->SocketPath()}, {"gpus", gpus}};
    out.Send(Response::Json(201, j.dump() + "\n"));
  }));
  return Status::Ok();
}

}  // namespace phos::phosd
