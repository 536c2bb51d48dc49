// phos-fn: the command line client of phosd's HTTP API.
//   phos-fn [--endpoint URL] deploy NAME EXECUTABLE [--instances N] [--max-instances N] [--gpus N]
//                                   [--max-queue N] [--keep-alive-ms MS] [--timeout-ms MS]
//                                   [--sample STRING | @FILE] [--sample-timeout-ms N] [--upload]
//                                   [--invoke-token-sha256 HEX] [--warmup STRING | @FILE [--warmup-count N]]
//                                   [--job --checkpoint-every K [--keep-checkpoints N] [--steps T]
//                                    [--checkpoint-mode MODE]] [-- ARGS...]
//   phos-fn [--endpoint URL] invoke NAME [--data STRING | --data @FILE] [--timeout-ms N]
//                                   [--restore-mode MODE] [--timings]
//   phos-fn [--endpoint URL] ls [--json]
//   phos-fn [--endpoint URL] instances NAME [--json]
//   phos-fn [--endpoint URL] describe NAME
//   phos-fn [--endpoint URL] checkpoint NAME [--instance ID] [--mode stop-the-world|soft-cow|soft-recopy]
//   phos-fn [--endpoint URL] migrate NAME (--device N | --node URL --node-token-file FILE) [--instance ID]
//   phos-fn [--endpoint URL] logs NAME [-f] [--tail BYTES]
//   phos-fn [--endpoint URL] job NAME [--json]
//   phos-fn [--endpoint URL] rm NAME
//   phos-fn [--endpoint URL] run [--gpus N] -- PROGRAM [ARGS...]
//   phos-fn check PROGRAM | --table
// Default endpoint: $PHOS_ENDPOINT, else http://127.0.0.1:7070 (unix:///PATH: phosd's Unix socket). Every call bears the token of
// --token-file FILE, else $PHOS_TOKEN (Authorization: Bearer): the admin token for deploy, rm, run,
// instances, checkpoint, migrate, logs, job and an unredacted ls; a function's invoke token (or the admin token) for invoke. check talks to
// no phosd: it reads PROGRAM and phos's libraries (docs/compatibility.md).
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "deploy_progress.h"
#include "top.h"
#include "new_project.h"
#include "phos/base/layout.h"
#include "phos/base/version.h"
#include "phos/http/client.h"
#include "phos/http/digest.h"
#include "phos/surface/check.h"
#include "phos/surface/compatibility_table.h"
#include "phos/surface/library_search.h"

namespace {

using phos::http::ClientRequest;
using phos::http::ClientResponse;

// The bearer token every call carries; empty: none.
std::string g_token;
// phosd's Unix socket, when --endpoint is unix:///PATH; empty: TCP.
std::string g_unix_socket;
// The progress line on screen while a deploy's call is under way (nullptr: none): it goes before
// an error is printed, so the error is not written over.
phos::fn_cli::DeployProgress* g_progress = nullptr;

// The response on success (2xx); otherwise prints why to stderr and returns nothing.
std::optional<ClientResponse> Call(ClientRequest request) {
  if (!g_token.empty()) request.headers.emplace_back("Authorization", "Bearer " + g_token);
  request.unix_socket = g_unix_socket;
  auto response = phos::http::Fetch(request);
  if (g_progress != nullptr && (!response.ok() || response->status < 200 || response->status >= 300)) g_progress->Stop();
  if (!response.ok()) {
    std::cerr << "phos-fn: " << response.status().message() << "\n";
    return std::nullopt;
  }
  if (response->status < 200 || response->status >= 300) {
    const std::string message = phos::http::ParseErrorBody(response->body).message;
    std::cerr << "phos-fn: " << request.method << " " << request.url << ": HTTP " << response->status << ": "
              << message << (message.empty() || message.back() != '\n' ? "\n" : "");
    return std::nullopt;
  }
  return std::move(response).value();
}

// POSTs `body` to `action` (checkpoint, migrate) of function `name`'s instance `instance` (0:
// phosd picks one): the answer's JSON when it names the instance and `field`; otherwise says why on
// stderr and returns nothing.
std::optional<nlohmann::json> PostToInstance(const std::string& endpoint, const std::string& name, uint64_t instance,
                                             const std::string& action, const nlohmann::json& body,
                                             const char* field) {
  const std::string url = endpoint + "/v1/functions/" + name +
                          (instance != 0 ? "/instances/" + std::to_string(instance) : std::string()) + "/" + action;
  auto r = Call({.method = "POST", .url = url, .body = body.dump(), .headers = {{"Content-Type", "application/json"}}});
  if (!r) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains(field) || !j.contains("instance")) {
    std::cerr << "phos-fn: unexpected answer: " << r->body << "\n";
    return std::nullopt;
  }
  return j;
}

// The directory holding the frontend's libcudart.so.13 symlink (lib/phos/frontend), found
// relative to this executable (bin/phos-fn); "" when /proc/self/exe cannot be read.
std::string FrontendLibDir() {
  const std::filesystem::path lib = phos::layout::LibDirOfExecutable();
  return lib.empty() ? "" : (lib / phos::layout::kFrontend).string();
}

int Run(const std::string& endpoint, int gpus, const std::vector<std::string>& program) {
  const std::string frontend = FrontendLibDir();
  if (frontend.empty()) {
    std::cerr << "phos-fn: cannot find phos's libraries: /proc/self/exe cannot be read\n";
    return 1;
  }
  auto session = Call({.method = "POST", .url = endpoint + "/v1/sessions", .body = nlohmann::json{{"gpus", gpus}}.dump(),
                       .headers = {{"Content-Type", "application/json"}}});
  if (!session) return 1;
  nlohmann::json j = nlohmann::json::parse(session->body, nullptr, false);
  if (j.is_discarded() || !j.contains("token") || !j.contains("gpu_socket")) {
    std::cerr << "phos-fn: unexpected session answer: " << session->body << "\n";
    return 1;
  }
  setenv("PHOS_GPU_SOCKET", j["gpu_socket"].get<std::string>().c_str(), 1);
  setenv("PHOS_INSTANCE_TOKEN", j["token"].get<std::string>().c_str(), 1);
  setenv("LD_LIBRARY_PATH", phos::surface::RunLibraryPath(frontend).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::perror(("phos-fn: exec " + program[0]).c_str());
  return 127;
}

// The bytes of `path`; false (said on stderr) when it cannot be read.
bool ReadFile(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "phos-fn: cannot read " << path << "\n";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *bytes = ss.str();
  return true;
}

// `phos-fn check`: whether PROGRAM runs on phos's libraries (0), or what stops it (1); or the
// table of docs/compatibility.md. 2 when PROGRAM or phos's libraries cannot be read, or the
// loader's cache and search path cannot be learnt.
int Check(const std::string& program, bool table) {
  namespace surface = phos::surface;
  auto fail = [](const phos::Status& status) {
    std::cerr << "phos-fn: check: " << status.message() << "\n";
    return 2;
  };
  phos::Result<surface::Surface> s = surface::Surface::Load(FrontendLibDir());
  if (!s.ok()) return fail(s.status());
  if (table) {
    std::cout << surface::CompatibilityTable(*s);
    return 0;
  }
  // The program run finds: execvp searches PATH for a name without a slash.
  phos::Result<std::string> path = surface::FindProgram(program, std::getenv("PATH"));
  if (!path.ok()) return fail(path.status());
  phos::Result<surface::LoaderEnvironment> env = surface::LoaderEnvironment::ForPhosRun(FrontendLibDir());
  if (!env.ok()) return fail(env.status().WithContext("the loader's library search"));
  phos::Result<surface::CheckReport> report = surface::CheckProgram(*path, *s, *env);
  if (!report.ok()) return fail(report.status());
  std::cout << surface::FormatReport(*report);
  return surface::ExitCode(report->verdict());
}

// "@FILE" becomes the file's bytes; false (said on stderr) when it cannot be read.
bool ReadAtFile(std::string* value) {
  if (value->empty() || value->front() != '@') return true;
  return ReadFile(value->substr(1), value);
}

// The first word of `token_file` into *token; false (said on stderr) when there is none.
bool ReadToken(const std::string& token_file, std::string* token) {
  std::string text;
  if (!ReadFile(token_file, &text)) return false;
  std::istringstream words(text);
  words >> *token;
  if (token->empty()) {
    std::cerr << "phos-fn: " << token_file << " holds no token\n";
    return false;
  }
  return true;
}

// --token-file's first word, else $PHOS_TOKEN; false (said on stderr) when the file cannot be read.
bool LoadToken(const std::string& token_file) {
  if (token_file.empty()) {
    const char* env = std::getenv("PHOS_TOKEN");
    g_token = env != nullptr ? env : "";
    return true;
  }
  return ReadToken(token_file, &g_token);
}

// Uploads `executable` (POST /v1/artifacts, with its SHA-256 for phosd to check); its hash, or
// nothing (said on stderr).
std::optional<std::string> Upload(const std::string& endpoint, const std::string& executable,
                                  phos::fn_cli::DeployProgress* progress) {
  std::string bytes;
  if (!ReadFile(executable, &bytes)) return std::nullopt;
  const std::string hash = phos::http::Sha256Hex(bytes);
  auto r = Call({.method = "POST", .url = endpoint + "/v1/artifacts", .body = std::move(bytes),
                 .headers = {{"Content-Type", "application/octet-stream"}, {"X-Phos-Artifact-Hash", hash}},
                 .on_upload_progress = [progress](uint64_t sent, uint64_t total) { progress->Uploaded(sent, total); }});
  progress->Stop();  // its line goes before what is printed next
  if (!r) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("artifact") || !j["artifact"].is_string() || j["artifact"] != hash) {
    std::cerr << "phos-fn: unexpected artifact answer: " << r->body << "\n";
    return std::nullopt;
  }
  std::cout << "uploaded " << executable << " as artifact " << hash << "\n";
  return hash;
}

// "mode phos  lease 0.412 ms  cpu-resume 1.020 ms ..." from the X-Phos-* response headers.
void PrintTimings(const ClientResponse& r) {
  std::string line = "mode ?";
  for (const auto& [name, value] : r.headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "x-phos-restore-mode") line = "mode " + value + line.substr(6);
    const std::string prefix = "x-phos-stage-";
    if (lower.rfind(prefix, 0) == 0 && lower.size() > prefix.size() + 3) {
      std::string stage = lower.substr(prefix.size(), lower.size() - prefix.size() - 3);  // drop "-us"
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.3f", std::atof(value.c_str()) / 1000.0);
      line += "  " + stage + " " + ms + " ms";
    }
  }
  std::cerr << line << "\n";
}

// What became of the deploy's sample request, and whether its contexts are ready (the answer's
// "sample" and "contexts_ready"): part of the deploy's result, on standard output.
void PrintDeployReport(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (auto sample = j.find("sample"); sample != j.end() && sample->is_object()) {
    bool learned = sample->value("first_touch_learned", false);
    if (sample->value("ok", false)) {
      std::cout << "sample request served" << (learned ? "; first-touch order learned" : "") << "\n";
    } else {
      std::cout << "sample request failed: " << sample->value("error", std::string("unknown error"))
                << (learned ? "\n" : "; the first-touch order will be learned from the first invocation\n");
    }
  }
  if (auto warmed = j.find("warmed_up"); warmed != j.end() && warmed->is_object()) {
    std::printf("warmed up in %.3f ms before the snapshot: %llu bytes at the entry point, %llu after the warm-up\n",
                warmed->value("warmup_us", 0.0) / 1000.0,
                static_cast<unsigned long long>(warmed->value("pre_entry_bytes", uint64_t{0})),
                static_cast<unsigned long long>(warmed->value("warmed_bytes", uint64_t{0})));
  }
  if (!j.value("contexts_ready", true)) {
    std::cout << "phosd is still making the contexts this function's cold starts lease\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"phos-fn: deploy, invoke and list phos functions; run and check unmodified CUDA programs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("phos-fn ") + phos::kVersion + "\nHTTP API v1");
  const char* env_endpoint = std::getenv("PHOS_ENDPOINT");
  std::string endpoint = env_endpoint != nullptr ? env_endpoint : "http://127.0.0.1:7070";
  app.add_option("--endpoint", endpoint,
                 "phosd's URL, http://HOST:PORT, or unix:///PATH for its Unix socket (default: $PHOS_ENDPOINT or "
                 "http://127.0.0.1:7070)");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "File holding the token calls bear (phosd's admin.token, or a function's invoke token); "
                 "default: $PHOS_TOKEN");

  std::string name;
  std::string executable;
  bool json = false;  // --json: phosd's answer as JSON, for programs
  int instances = 1;
  int gpus = 1;
  std::vector<std::string> extra;
  auto* deploy = app.add_subcommand("deploy", "Register a function and start its warm instances");
  bool new_version = false;
  deploy->add_flag("--new-version", new_version,
                   "Deploy a registered function anew, as its next version: the serving one serves until this one "
                   "is deployed, and is kept to roll back to");
  deploy->add_option("name", name, "Function name")->required();
  deploy->add_option("executable", executable, "Function executable")->required()->check(CLI::ExistingFile);
  deploy->add_option("--instances", instances, "Warm instances (0: none while no request comes: scale to zero)")
      ->check(CLI::Range(0, 64));
  int max_instances = 0;
  deploy->add_option("--max-instances", max_instances,
                     "Most instances at once, warm ones included (0: --instances); each has its own snapshot")
      ->check(CLI::Range(0, 64));
  deploy->add_option("--gpus", gpus, "Devices each instance uses (more than 1: a device group with NCCL)")
      ->check(CLI::Range(1, 8));
  int max_queue = 0;
  deploy->add_option("--max-queue", max_queue,
                     "Invocations that may wait for an instance; one more is refused at once (HTTP 429, Retry-After) "
                     "(0: no bound)")
      ->check(CLI::Range(0, 100000));
  long long fn_keep_alive_ms = 0;
  deploy->add_option("--keep-alive-ms", fn_keep_alive_ms,
                     "Idle time after which an instance beyond the warm ones ends (0: phosd's --keep-alive-ms)")
      ->check(CLI::Range(0LL, 86400000LL));
  long long fn_timeout_ms = 0;
  deploy->add_option("--timeout-ms", fn_timeout_ms,
                     "An invocation's deadline when its caller gives none (0: phosd's --invoke-timeout-ms)")
      ->check(CLI::Range(0LL, 3600000LL));
  std::string sample;
  deploy->add_option("--sample", sample,
                     "A request run once deployed, to record the order in which the function first touches its "
                     "buffers (or @FILE)");
  long sample_timeout_ms = 0;
  deploy->add_option("--sample-timeout-ms", sample_timeout_ms, "The sample request's deadline (default: phosd's)")
      ->check(CLI::PositiveNumber);
  bool upload = false;
  deploy->add_flag("--upload", upload,
                   "Upload the executable to phosd (an artifact it keeps, by SHA-256) instead of naming its path, "
                   "which must then lie under one of phosd's --functions-dir");
  std::string invoke_token_sha256;
  deploy->add_option("--invoke-token-sha256", invoke_token_sha256,
                     "SHA-256 (hex) of the token invocations of this function must bear (default: invoke is open)");
  std::string warmup;
  deploy->add_option("--warmup", warmup,
                     "A request run on each freshly deployed instance before its snapshot is taken, so that cold "
                     "starts begin warmed up (or @FILE)");
  int warmup_count = 1;
  deploy->add_option("--warmup-count", warmup_count, "How many times the warm-up request runs")
      ->check(CLI::Range(1, 64));
  bool job = false;
  int checkpoint_every = 0;
  int keep_checkpoints = 2;
  long long job_steps = 0;
  std::string job_mode = "soft-cow";
  deploy->add_flag("--job", job,
                   "A long-running job: phosd runs its one instance a step per request, checkpoints it while it runs "
                   "and resumes it from its newest checkpoint after a crash");
  deploy->add_option("--checkpoint-every", checkpoint_every, "A job's steps between checkpoints")
      ->check(CLI::Range(1, 1000000));
  deploy->add_option("--keep-checkpoints", keep_checkpoints, "How many of a job's newest checkpoints are kept")
      ->check(CLI::Range(1, 16));
  deploy->add_option("--steps", job_steps, "The step a job stops after (default: it runs until removed)")
      ->check(CLI::NonNegativeNumber);
  deploy->add_option("--checkpoint-mode", job_mode, "How a job's checkpoints are taken")
      ->check(CLI::IsMember({"stop-the-world", "soft-cow", "soft-recopy"}));
  std::vector<std::string> env;
  deploy->add_flag("--json", json, "Print phosd's JSON answer");
  deploy->add_option("--env", env, "An environment variable of the function's processes, NAME=VALUE (repeatable)");
  deploy->add_option("args", extra, "Arguments for the function (after --)");

  std::string data;
  long timeout_ms = 0;
  auto* invoke = app.add_subcommand("invoke", "Invoke a function; its response goes to stdout");
  invoke->add_option("name", name, "Function name")->required();
  invoke->add_option("--data", data, "Request body, or @FILE to read it from a file");
  invoke->add_option("--timeout-ms", timeout_ms, "Invocation deadline")->check(CLI::PositiveNumber);
  std::string restore_mode;
  invoke->add_option("--restore-mode", restore_mode, "How a new instance is brought up for this invocation")
      ->check(CLI::IsMember({"auto", "cold-boot", "stop-the-world", "eager", "no-pool", "no-order", "phos", "warm"}));
  bool timings = false;
  invoke->add_flag("--timings", timings, "Print the restore mode and stage timings (ms) to stderr");

  auto* ls = app.add_subcommand("ls", "List functions and their instances");
  ls->add_flag("--json", json, "Print phosd's JSON");

  auto* list_instances = app.add_subcommand("instances", "List a function's instances: id, state, pid, how each came up");
  list_instances->add_option("name", name, "Function name")->required();
  list_instances->add_flag("--json", json, "Print phosd's JSON");

  auto* describe = app.add_subcommand("describe", "A function's spec, the state of its instances, and where it moved");
  describe->add_option("name", name, "Function name")->required();

  uint64_t instance = 0;
  std::string checkpoint_mode = "stop-the-world";
  auto* checkpoint = app.add_subcommand(
      "checkpoint", "Checkpoint a running instance: a new snapshot of the function that its next restores start from");
  checkpoint->add_option("name", name, "Function name")->required();
  checkpoint->add_option("--instance", instance, "The instance's id (phos-fn instances); default: an idle one")
      ->check(CLI::PositiveNumber);
  checkpoint->add_option("--mode", checkpoint_mode, "How the instance's GPU state is copied while it runs")
      ->check(CLI::IsMember({"stop-the-world", "soft-cow", "soft-recopy"}));
  checkpoint->add_flag("--json", json, "Print phosd's JSON answer");

  int device = -1;
  auto* migrate = app.add_subcommand(
      "migrate", "Move a running instance to another device, or to another phosd: it keeps serving until a short final "
                 "stop");
  migrate->add_option("name", name, "Function name")->required();
  std::string node, node_token_file;
  auto* to_device =
      migrate->add_option("--device", device, "The device it moves to (phos-fn instances shows where each runs)")
          ->check(CLI::NonNegativeNumber);
  auto* to_node = migrate->add_option("--node", node,
                                      "The phosd it moves to (http://HOST:PORT), where the function is deployed too; "
                                      "this phosd forwards the function's requests there from then on");
  auto* node_token = migrate->add_option("--node-token-file", node_token_file, "That phosd's admin token file")
                         ->needs(to_node);
  to_node->needs(node_token);
  to_device->excludes(to_node);
  migrate->add_option("--instance", instance, "The instance's id (phos-fn instances); default: an idle one")
      ->check(CLI::PositiveNumber);
  migrate->add_flag("--json", json, "Print phosd's JSON answer");

  bool follow = false;
  uint64_t tail_bytes = 64 * 1024;
  auto* logs = app.add_subcommand("logs", "A function's logs: what its processes printed (the last bytes of each)");
  logs->add_option("name", name, "Function name")->required();
  logs->add_flag("-f,--follow", follow, "Print what they print from now on too, until interrupted");
  logs->add_option("--tail", tail_bytes, "Bytes of each log file to print first")->check(CLI::Range(0, 16 << 20));

  auto* job_status = app.add_subcommand("job", "Where a job stands: its step, its kept checkpoints, its losses' file");
  job_status->add_option("name", name, "Function name")->required();
  job_status->add_flag("--json", json, "Print phosd's JSON");

  uint64_t delete_version = 0;
  auto* versions = app.add_subcommand("versions", "A function's versions: which one serves, which are kept to roll back to");
  versions->add_option("name", name, "Function name")->required();
  versions->add_option("--delete", delete_version, "Forget kept version N")->check(CLI::PositiveNumber);
  versions->add_flag("--json", json, "Print phosd's JSON");

  uint64_t rollback_to = 0;
  auto* rollback = app.add_subcommand(
      "rollback", "Serve an earlier version of a function again (deployed anew from its spec, if its executable is "
                  "still the program it was)");
  rollback->add_option("name", name, "Function name")->required();
  rollback->add_option("--to", rollback_to, "The version (default: the newest one older than the serving one)")
      ->check(CLI::PositiveNumber);
  rollback->add_flag("--json", json, "Print phosd's JSON");

  auto* events = app.add_subcommand(
      "events", "What becomes of instances (started, restored, evicted, ended), as it happens, until interrupted");
  events->add_flag("--json", json, "Print phosd's JSON lines");

  bool once = false;
  long interval_ms = 1000;
  auto* top = app.add_subcommand(
      "top", "Each function's instances, and invocations by how their instance came up with their time to the first "
             "byte, refreshed until interrupted");
  top->add_flag("--once", once, "Print one frame and exit");
  top->add_option("--interval-ms", interval_ms, "Time between frames")->check(CLI::Range(100L, 3600000L));
  top->add_flag("--json", json, "Each frame as one line of JSON");

  auto* rm = app.add_subcommand("rm", "Remove a function");
  rm->add_option("name", name, "Function name")->required();
  rm->add_flag("--json", json, "Print phosd's JSON answer");

  auto* run = app.add_subcommand("run", "Run an unmodified CUDA program with its GPU work in phosd");
  run->add_option("--gpus", gpus, "Devices the program uses (more than 1: a device group with NCCL)")
      ->check(CLI::Range(1, 8));
  run->add_option("program", extra, "PROGRAM [ARGS...] (after --)")->required();

  std::string program;
  bool table = false;
  auto* check = app.add_subcommand("check", "Whether an unmodified CUDA program runs on phos's libraries (phos-fn run): "
                                            "each CUDA function it imports, served, refused or lacking");
  check->add_option("program", program,
                    "The program (an ELF executable or library; a name without a slash is looked up in PATH, as "
                    "run does)");
  check->add_flag("--table", table, "Print docs/compatibility.md: every function of NVIDIA's libraries and its state");

  std::string new_dir;
  auto* new_project = app.add_subcommand(
      "new", "Write a function project to start from (CMake, find_package(phos), a kernel, a handler, a test)");
  new_project->add_option("name", name, "The function's name: a letter, then letters, digits, '_' or '-'")->required();
  new_project->add_option("--dir", new_dir, "Where to write it (must not exist); default: ./NAME");

  app.footer(
      "Exit codes: 0 done; 1 phosd refused or failed the call, or could not be reached (why is on standard "
      "error); 2 the command line was wrong. run ends as the program it ran; check is 0 when the program runs, 1 "
      "when it would not, 2 when it cannot be read.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help is no error; a wrong command line is 2 whichever rule it broke.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*check) {
    if (table == !program.empty()) {
      std::cerr << "phos-fn: check: give a PROGRAM or --table\n";
      return 2;
    }
    return Check(program, table);
  }
  if (*new_project) {
    const std::filesystem::path dir = new_dir.empty() ? std::filesystem::path(name) : std::filesystem::path(new_dir);
    if (phos::Status s = phos::fn_cli::WriteNewProject(name, dir); !s.ok()) {
      std::cerr << "phos-fn: new: " << s.message() << "\n";
      return s.code() == phos::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << "wrote " << dir.string() << ": cmake -S " << dir.string() << " -B " << (dir / "build").string()
              << " && cmake --build " << (dir / "build").string() << " && ctest --test-dir "
              << (dir / "build").string() << "\n";
    return 0;
  }
  phos::Result<phos::http::Endpoint> parsed_endpoint = phos::http::ParseEndpoint(endpoint);
  if (!parsed_endpoint.ok()) {
    std::cerr << "phos-fn: " << parsed_endpoint.status().message() << "\n";
    return 2;
  }
  endpoint = parsed_endpoint->base_url;
  g_unix_socket = parsed_endpoint->unix_socket;
  if (!LoadToken(token_file)) return 1;

  if (*deploy) {
    if (!ReadAtFile(&sample) || !ReadAtFile(&warmup)) return 1;
    nlohmann::json spec = {{"name", name}, {"args", extra}, {"instances", instances}, {"gpus", gpus},
                           {"max_instances", max_instances}};
    if (!warmup.empty()) spec["warmup"] = std::vector<std::string>(static_cast<size_t>(warmup_count), warmup);
    for (const std::string& variable : env) {
      const size_t eq = variable.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "phos-fn: deploy: --env takes NAME=VALUE, not '" << variable << "'\n";
        return 2;
      }
      spec["env"][variable.substr(0, eq)] = variable.substr(eq + 1);
    }
    if (max_queue > 0) spec["max_queue"] = max_queue;
    if (fn_keep_alive_ms > 0) spec["keep_alive_ms"] = fn_keep_alive_ms;
    if (fn_timeout_ms > 0) spec["timeout_ms"] = fn_timeout_ms;
    if (job != (checkpoint_every > 0)) {
      std::cerr << "phos-fn: deploy: --job and --checkpoint-every go together\n";
      return 2;
    }
    if (job) {
      spec["job"] = {{"checkpoint_every", checkpoint_every},
                     {"keep", keep_checkpoints},
                     {"steps", job_steps},
                     {"mode", job_mode}};
    }
    // On a terminal, a line on standard error says what the deploy is doing.
    const bool tty = isatty(STDERR_FILENO) == 1;
    if (upload) {
      phos::fn_cli::DeployProgress uploading(tty, name, nullptr);
      g_progress = &uploading;
      std::optional<std::string> artifact = Upload(endpoint, executable, &uploading);
      g_progress = nullptr;
      if (!artifact) return 1;
      spec["artifact"] = *artifact;
    } else {
      spec["executable"] = std::filesystem::absolute(executable).lexically_normal().string();
    }
    if (!invoke_token_sha256.empty()) spec["invoke_token_sha256"] = invoke_token_sha256;
    if (!sample.empty()) spec["sample_request"] = sample;
    ClientRequest request{.method = "POST",
                          .url = endpoint + "/v1/functions" + (new_version ? "/" + name + "/versions" : ""),
                          .body = spec.dump(),
                          .headers = {{"Content-Type", "application/json"}}};
    if (sample_timeout_ms > 0) request.headers.emplace_back("X-Phos-Timeout-Ms", std::to_string(sample_timeout_ms));
    phos::fn_cli::DeployProgress deploying(tty, name, [&endpoint, &name]() -> std::string {
      ClientRequest list{.url = endpoint + "/v1/functions", .unix_socket = g_unix_socket, .timeout_ms = 1000};
      if (!g_token.empty()) list.headers.emplace_back("Authorization", "Bearer " + g_token);
      phos::Result<ClientResponse> r = phos::http::Fetch(list);
      if (!r.ok() || r->status != 200) return "";
      nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
      if (!j.is_object() || !j.contains("functions") || !j["functions"].is_array()) return "";
      for (const nlohmann::json& f : j["functions"]) {
        if (f.is_object() && f.value("name", "") == name) return f.value("deploy_stage", "");
      }
      return "";
    });
    deploying.Show("sending the spec");
    deploying.Watch();
    g_progress = &deploying;
    auto r = Call(request);
    g_progress = nullptr;
    deploying.Stop();
    if (!r) return 1;
    if (json) {
      std::cout << r->body;
      return 0;
    }
    nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
    const uint64_t version = answer.is_object() ? answer.value("version", uint64_t{0}) : 0;
    std::cout << "deployed " << name << " version " << version << " (" << instances << " warm instance"
              << (instances == 1 ? "" : "s") << ")\n";
    PrintDeployReport(r->body);
    return 0;
  }
  if (*versions) {
    if (delete_version != 0) {
      auto r = Call({.method = "DELETE",
                     .url = endpoint + "/v1/functions/" + name + "/versions/" + std::to_string(delete_version)});
      if (!r) return 1;
      if (json) {
        std::cout << r->body;
      } else {
        std::cout << "deleted version " << delete_version << " of " << name << "\n";
      }
      return 0;
    }
    auto r = Call({.url = endpoint + "/v1/functions/" + name + "/versions"});
    if (!r) return 1;
    if (json) {
      std::cout << r->body;
      return 0;
    }
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("versions") || !j["versions"].is_array()) {
      std::cerr << "phos-fn: unexpected answer: " << r->body << "\n";
      return 1;
    }
    std::printf("%-8s %-10s %-20s %-14s %s\n", "VERSION", "STATE", "DEPLOYED (UTC)", "SHA-256", "EXECUTABLE");
    for (const auto& v : j["versions"]) {
      const time_t at = static_cast<time_t>(v.value("deployed_at_ms", int64_t{0}) / 1000);
      char when[32] = "?";
      struct tm tm {};
      if (at > 0 && gmtime_r(&at, &tm) != nullptr) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
      std::printf("%-8llu %-10s %-20s %-14s %s\n", static_cast<unsigned long long>(v.value("version", uint64_t{0})),
                  v.value("state", "?").c_str(), when, v.value("executable_sha256", "").substr(0, 12).c_str(),
                  v.value("executable", "").c_str());
    }
    return 0;
  }
  if (*rollback) {
    ClientRequest request{.method = "POST", .url = endpoint + "/v1/functions/" + name + "/rollback",
                          .headers = {{"Content-Type", "application/json"}}};
    if (rollback_to != 0) request.body = nlohmann::json{{"version", rollback_to}}.dump();
    auto r = Call(request);
    if (!r) return 1;
    if (json) {
      std::cout << r->body;
      return 0;
    }
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    std::cout << "rolled " << name << " back: version " << (j.is_object() ? j.value("version", uint64_t{0}) : 0)
              << " serves\n";
    return 0;
  }
  if (*invoke) {
    if (!ReadAtFile(&data)) return 1;
    ClientRequest request{.method = "POST", .url = endpoint + "/v1/functions/" + name + "/invoke", .body = data};
    if (timeout_ms > 0) request.headers.emplace_back("X-Phos-Timeout-Ms", std::to_string(timeout_ms));
    if (!restore_mode.empty()) request.headers.emplace_back("X-Phos-Restore-Mode", restore_mode);
    // An answer in pieces is printed piece by piece as it comes.
    request.on_body = [](std::string_view piece) { std::cout << piece << std::flush; };
    auto r = Call(request);
    if (!r) return 1;
    if (timings) PrintTimings(*r);
    return 0;
  }
  if (*ls) {
    auto r = Call({.url = endpoint + "/v1/functions"});
    if (!r) return 1;
    if (json) {
      std::cout << r->body;
      return 0;
    }
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) {
      std::cerr << "phos-fn: unexpected answer: " << r->body << "\n";
      return 1;
    }
    std::printf("%-24s %7s %9s %8s %6s %6s %6s  %s\n", "NAME", "VERSION", "INSTANCES", "STARTING", "IDLE", "BUSY",
                "QUEUED", "EXECUTABLE");
    for (const auto& f : j["functions"]) {
      std::string version = std::to_string(f.value("version", uint64_t{1}));
      if (f.contains("deploying_version")) version += "+" + std::to_string(f.value("deploying_version", uint64_t{0}));
      std::printf("%-24s %7s %9d %8d %6d %6d %6d  %s\n", f["name"].get<std::string>().c_str(), version.c_str(),
                  f["instances"].get<int>(),
                  f["state"]["starting"].get<int>(), f["state"]["idle"].get<int>(), f["state"]["busy"].get<int>(),
                  f["state"]["queued"].get<int>(), f["executable"].get<std::string>().c_str());
    }
    for (const auto& f : j["functions"]) {
      if (f.contains("moved_to") && f["moved_to"].is_string()) {
        std::printf("%s moved to %s: its requests here are forwarded there (%d unanswered)\n",
                    f["name"].get<std::string>().c_str(), f["moved_to"].get<std::string>().c_str(),
                    f.value("forwarding", 0));
      }
    }
    return 0;
  }
  if (*describe) {
    // phosd's entry for the function (GET /v1/functions) and its instances, as one JSON object.
    auto listed = Call({.url = endpoint + "/v1/functions"});
    if (!listed) return 1;
    nlohmann::json functions = nlohmann::json::parse(listed->body, nullptr, false);
    nlohmann::json entry;
    if (functions.is_object() && functions.contains("functions") && functions["functions"].is_array()) {
      for (const auto& f : functions["functions"]) {
        if (f.is_object() && f.value("name", "") == name) entry = f;
      }
    }
    if (entry.is_null()) {
      std::cerr << "phos-fn: describe: no function '" << name << "'\n";
      return 1;
    }
    auto instances = Call({.url = endpoint + "/v1/functions/" + name + "/instances"});
    if (!instances) return 1;
    nlohmann::json j = {{"function", entry}, {"instances", nlohmann::json::parse(instances->body, nullptr, false)
                                                               .value("instances", nlohmann::json::array())}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (*list_instances) {
    auto r = Call({.url = endpoint + "/v1/functions/" + name + "/instances"});
    if (!r) return 1;
    if (json) {
      std::cout << r->body;
      return 0;
    }
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("instances")) {
      std::cerr << "phos-fn: unexpected answer: " << r->body << "\n";
      return 1;
    }
    std::printf("%-6s %-9s %-8s %-15s %-8s %s\n", "ID", "STATE", "PID", "MODE", "RESTORED", "DEVICE");
    for (const auto& i : j["instances"]) {
      std::printf("%-6llu %-9s %-8d %-15s %-8s %d\n", static_cast<unsigned long long>(i["id"].get<uint64_t>()),
                  i["state"].get<std::string>().c_str(), i["pid"].get<int>(), i["mode"].get<std::string>().c_str(),
                  i["restored"].get<bool>() ? "yes" : "no", i.value("device", 0));
    }
    return 0;
  }
  if (*checkpoint) {
    auto answer = PostToInstance(endpoint, name, instance, "checkpoint", {{"mode", checkpoint_mode}}, "version");
    if (!answer) return 1;
    const nlohmann::json& j = *answer;
    if (json) {
      std::cout << j.dump() << "\n";
      return 0;
    }
    std::printf("checkpointed instance %llu of %s as snapshot v%llu (%s; the instance stalled %.3f ms)\n",
                static_cast<unsigned long long>(j["instance"].get<uint64_t>()), name.c_str(),
                static_cast<unsigned long long>(j["version"].get<uint64_t>()), j.value("mode", "?").c_str(),
                j.value("stall_us", 0.0) / 1000.0);
    if (j.contains("recopied")) {
      std::printf("copied again at the final stop: %llu buffers, %llu bytes\n",
                  static_cast<unsigned long long>(j.value("recopied", uint64_t{0})),
                  static_cast<unsigned long long>(j.value("recopied_bytes", uint64_t{0})));
    }
    return 0;
  }
  if (*migrate) {
    if (node.empty() && device < 0) {
      std::cerr << "phos-fn: migrate needs --device N or --node URL\n";
      return 2;
    }
    nlohmann::json body = {{"device", device}};
    if (!node.empty()) {
      std::string token;
      if (!ReadToken(node_token_file, &token)) return 1;
      body = {{"node", node}, {"token", token}};
    }
    auto answer = PostToInstance(endpoint, name, instance, "migrate", body, "to");
    if (!answer) return 1;
    const nlohmann::json& j = *answer;
    if (json) {
      std::cout << j.dump() << "\n";
      return 0;
    }
    if (!node.empty()) {
      std::printf("moved instance %llu of %s to %s (instance %llu there, snapshot v%llu; %llu chunks sent, %llu bytes; "
                  "it served nothing for %.3f ms); requests for %s here are forwarded there\n",
                  static_cast<unsigned long long>(j["instance"].get<uint64_t>()), name.c_str(), node.c_str(),
                  static_cast<unsigned long long>(j.value("node_instance", uint64_t{0})),
                  static_cast<unsigned long long>(j.value("node_version", uint64_t{0})),
                  static_cast<unsigned long long>(j.value("sent_chunks", uint64_t{0})),
                  static_cast<unsigned long long>(j.value("sent_bytes", uint64_t{0})),
                  j.value("downtime_us", 0.0) / 1000.0, name.c_str());
      return 0;
    }
    std::printf("moved instance %llu of %s from device %d to device %d (snapshot v%llu; it served nothing for %.3f ms; "
                "%llu bytes copied again at the final stop)\n",
                static_cast<unsigned long long>(j["instance"].get<uint64_t>()), name.c_str(), j.value("from", -1),
                j.value("to", -1), static_cast<unsigned long long>(j.value("version", uint64_t{0})),
                j.value("downtime_us", 0.0) / 1000.0, static_cast<unsigned long long>(j.value("recopied_bytes", uint64_t{0})));
    return 0;
  }
  if (*logs) {
    ClientRequest request{.url = endpoint + "/v1/functions/" + name + "/logs?tail=" + std::to_string(tail_bytes) +
                                 (follow ? "&follow=1" : "")};
    // Followed logs arrive as phosd reads them: each piece printed as it comes.
    request.on_body = [](std::string_view piece) { std::cout << piece << std::flush; };
    return Call(std::move(request)) ? 0 : 1;
  }
  if (*job_status) {
    auto r = Call({.method = "GET", .url = endpoint + "/v1/functions/" + name + "/job"});
    if (!r) return 1;
    nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
    if (json) {
      std::cout << r->body;
      return 0;
    }
    if (j.is_discarded() || !j.contains("step") || !j.contains("checkpoints")) {
      std::cerr << "phos-fn: unexpected answer: " << r->body << "\n";
      return 1;
    }
    const long long steps = j.value("steps", 0LL);
    std::printf("%s: step %lld%s%s\n", name.c_str(), j.value("step", 0LL),
                steps > 0 ? (" of " + std::to_string(steps)).c_str() : "", j.value("finished", false) ? " (finished)" : "");
    for (const auto& c : j["checkpoints"]) {
      std::printf("checkpoint v%llu after step %lld\n", static_cast<unsigned long long>(c.value("version", uint64_t{0})),
                  c.value("step", 0LL));
    }
    std::printf("losses: %s\n", j.value("losses", "").c_str());
    return 0;
  }
  if (*events) {
    // One line per event as phosd sends it (GET /v1/events: JSON lines), each printed as it comes.
    std::string pending;
    ClientRequest request{.url = endpoint + "/v1/events"};
    request.on_body = [&pending, json](std::string_view piece) {
      pending.append(piece);
      for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
        const std::string line = pending.substr(0, eol);
        if (json) {
          std::cout << line << std::endl;
          continue;
        }
        nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
        if (!e.is_object() || !e.contains("event") || !e["event"].is_string() || e["event"] == "subscribed") continue;
        try {  // a field of another type: the line is skipped
          const time_t at = static_cast<time_t>(e.value("time_ms", int64_t{0}) / 1000);
          char when[16] = "?";
          struct tm tm {};
          if (at > 0 && gmtime_r(&at, &tm) != nullptr) std::strftime(when, sizeof(when), "%H:%M:%S", &tm);
          std::cout << when << " " << e["event"].get<std::string>() << " " << e.value("function", "?") << " v"
                    << e.value("version", uint64_t{0}) << " instance " << e.value("instance", uint64_t{0}) << " ("
                    << e.value("mode", "?") << ")" << std::endl;
        } catch (const nlohmann::json::exception&) {
        }
      }
    };
    return Call(std::move(request)) ? 0 : 1;
  }
  if (*top) {
    const bool tty = isatty(STDOUT_FILENO) == 1;
    while (true) {
      auto functions = Call({.url = endpoint + "/v1/functions"});
      auto metrics = functions ? Call({.url = endpoint + "/metrics"}) : std::nullopt;
      if (!metrics) return 1;
      nlohmann::json frame = phos::fn_cli::TopFrame(nlohmann::json::parse(functions->body, nullptr, false),
                                                    phos::http::ParseMetricsText(metrics->body));
      if (json) {
        std::cout << frame.dump() << std::endl;
      } else {
        if (tty && !once) std::cout << "\033[H\033[2J";  // the frame replaces the last one
        std::cout << phos::fn_cli::RenderTop(frame) << std::flush;
      }
      if (once) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
  }
  if (*rm) {
    auto r = Call({.method = "DELETE", .url = endpoint + "/v1/functions/" + name});
    if (!r) return 1;
    std::cout << (json ? r->body : "removed " + name + "\n");
    return 0;
  }
  return Run(endpoint, gpus, extra);
}
