// Long-running jobs (docs/design.md D10): a function whose one instance phosd runs step by step,
// checkpointed every K steps while it runs, resumed from its newest checkpoint after its process or
// phosd was killed.
//
// The driver thread sends the instance the request "step" back to back; each answer is
// {"step": N, "loss": X}, appended to <data-dir>/jobs/<name>/losses.tsv. After every K-th step the
// step's invocation carries a checkpoint, which the instance that answered takes right away, before
// anything else (Invocation::then): the checkpoint is of the state right after that step, whichever
// instance served it. The driver does not wait for the copies: the next step goes out at once (a
// soft checkpoint copies while it runs). Committed checkpoints are kept in checkpoints.json (the
// newest `keep`; older versions are then dropped from the store), written before the store forgets
// any: a crash at any point leaves a listed checkpoint that is committed.
//
// Killed instance: its range adopted each checkpoint (CPU template and GPU snapshot), so the next
// instance restored there resumes after the checkpoint's step. Killed phosd: the restart deploys the
// function again in the range its checkpoints belong to (claimed before any other deploy), and the
// range restores the newest kept checkpoint's GPU state under the new deploy's process, once the two
// snapshots are seen to lay out the same buffers. That is the job's contract: its state lives on the
// device, allocated before its entry point.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "instance_manager_impl.h"
#include "phos/base/durable_file.h"
#include "phos/base/log.h"
#include "phos/base/unique_fd.h"

namespace phos::runtime {
namespace {

constexpr const char* kStepRequest = "step";
// How long the driver waits before the next step after a failed one (the instance being restored).
constexpr std::chrono::milliseconds kRetryDelay{100};

// A step's answer: {"step": N (>= 1), "loss": a number}. The loss is kept as the function wrote it.
Result<std::pair<int64_t, std::string>> ParseStep(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return Status::InvalidArgument("a step's answer must be a JSON object");
  auto step = j.find("step");
  auto loss = j.find("loss");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 1) {
    return Status::InvalidArgument("a step's answer needs 'step', an integer of at least 1");
  }
  if (loss == j.end() || !loss->is_number()) return Status::InvalidArgument("a step's answer needs 'loss', a number");
  // The number's text as sent, so that a resumed run's losses compare exactly.
  std::string text = loss->dump();
  return std::make_pair(step->get<int64_t>(), std::move(text));
}

}  // namespace

std::string InstanceManager::Impl::JobDir(const std::string& name) const {
  return options_.data_dir + "/jobs/" + name;
}

void InstanceManager::Impl::LoadJobLocked(Function& f) {
  const std::string path = JobDir(f.spec.name) + "/checkpoints.json";
  std::ifstream in(path);
  if (!in) return;  // never checkpointed
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  auto refuse = [&](const std::string& why) {
    PHOS_LOG(Error, "jobs", "'{}': {} is unusable ({}); the job starts over", f.spec.name, path, why);
    f.job_checkpoints.clear();
  };
  if (!j.is_object() || !j.contains("checkpoints") || !j["checkpoints"].is_array() || !j.contains("va_slot") ||
      !j["va_slot"].is_number_integer()) {
    return refuse("not {\"va_slot\": N, \"checkpoints\": [...]}");
  }
  for (const auto& c : j["checkpoints"]) {
    if (!c.is_object() || !c.contains("version") || !c["version"].is_number_unsigned() || !c.contains("step") ||
        !c["step"].is_number_integer()) {
      return refuse("a checkpoint is not {\"version\": N, \"step\": N}");
    }
    f.job_checkpoints.push_back({c["version"].get<uint64_t>(), c["step"].get<int64_t>()});
  }
  if (f.job_checkpoints.empty()) return;
  // The range the checkpoints belong to, before another function's deploy takes it.
  const int slot = j["va_slot"].get<int>();
  Result<int> claimed = options_.sessions->ClaimVaSlotAt(slot);
  if (!claimed.ok()) return refuse(fmt::format("its instance range {}: {}", slot, claimed.status().message()));
  f.job_va_slot = slot;
  f.job_va_slot_claimed = true;
  f.job_step = f.job_checkpoints.back().step;
  PHOS_LOG(Info, "jobs", "'{}': {} checkpoint(s) kept, the newest after step {} (v{})", f.spec.name,
           f.job_checkpoints.size(), f.job_step, f.job_checkpoints.back().version);
}

void InstanceManager::Impl::ResumeJobSlot(Function& f, Slot* slot) {
  std::deque<JobCheckpoint> kept;
  {
    std::lock_guard lock(mu_);
    kept = f.job_checkpoints;
  }
  // Newest first: a checkpoint that does not fit the new deploy is dropped with those after it.
  while (!kept.empty()) {
    const JobCheckpoint& c = kept.back();
    Status fits = options_.sessions->SameLayout(f.spec.name, c.version, slot->version);
    if (fits.ok()) break;
    PHOS_LOG(Error, "jobs", "'{}': checkpoint v{} (after step {}) is not resumed: {}", f.spec.name, c.version, c.step,
             fits.message());
    kept.pop_back();
  }
  std::lock_guard lock(mu_);
  f.job_checkpoints = kept;
  if (kept.empty()) {
    if (f.job_step != 0) PHOS_LOG(Error, "jobs", "'{}': no kept checkpoint fits; the job starts over", f.spec.name);
    f.job_step = 0;
    return;
  }
  // The deploy's process for the CPU side (the job keeps none of its state there).
  slot->version = kept.back().version;
  f.job_step = kept.back().step;
  PHOS_LOG(Info, "jobs", "'{}' resumes after step {} from checkpoint v{}", f.spec.name, f.job_step, slot->version);
}

void InstanceManager::Impl::KeepJobCheckpoint(const std::shared_ptr<Function>& f, const CheckpointOutcome& o,
                                             int64_t step) {
  const uint64_t version = o.version;
  nlohmann::json j;
  std::vector<uint64_t> versions;
  {
    std::lock_guard lock(mu_);
    if (f->removed || f->slots.empty()) return;
    f->job_checkpoints.push_back({version, step});
    while (f->job_checkpoints.size() > static_cast<size_t>(f->spec.job.keep)) f->job_checkpoints.pop_front();
    f->job_va_slot = f->slots.front().va_slot;
    j = {{"va_slot", f->job_va_slot}, {"checkpoints", nlohmann::json::array()}};
    for (const JobCheckpoint& c : f->job_checkpoints) j["checkpoints"].push_back({{"version", c.version}, {"step", c.step}});
    versions = VersionsLocked(*f);
  }
  // Listed first, forgotten by the store after: a crash between leaves a version nobody lists,
  // which the restart's deploy drops.
  Status saved = ReplaceFileDurably(JobDir(f->spec.name) + "/checkpoints.json", j.dump(2) + "\n", 0600);
  if (!saved.ok()) {
    PHOS_LOG(Error, "jobs", "'{}': checkpoint v{} after step {} not listed: {}", f->spec.name, version, step,
             saved.message());
    return;
  }
  options_.sessions->RetainOnly(f->spec.name, versions);
  PHOS_LOG(Info, "jobs", "'{}': checkpoint v{} after step {} kept (stall {} us, committed after {} us, {} buffers copied before a write)",
           f->spec.name, version, step, o.stall.count(), o.total.count(), o.copies.copied_before_write);
}

void InstanceManager::Impl::StartJobLocked(const std::shared_ptr<Function>& f, bool fresh) {
  if (f->spec.job.checkpoint_every <= 0 || f->job_driven) return;
  if (fresh) {
    std::error_code ec;
    std::filesystem::remove_all(JobDir(f->spec.name), ec);
  }
  f->job_driven = true;
  auto owner = std::make_shared<Instance>();  // the thread's, joined like a deploy's
  owner->id = ++next_instance_id_;
  live_.push_back(owner);
  owner->thread = std::thread([this, f, owner] {
    RunJob(f);
    std::lock_guard lock(mu_);
    f->job_driven = false;
    finished_.push_back(owner);
    supervisor_cv_.notify_all();
  });
}

void InstanceManager::Impl::RunJob(const std::shared_ptr<Function>& f) {
  const std::string& name = f->spec.name;
  const FunctionSpec::Job job = f->spec.job;
  const CheckpointMode mode = ParseCheckpointMode(job.mode).value_or(CheckpointMode::kSoftCow);
  const std::string dir = JobDir(name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  UniqueFd losses(open((dir + "/losses.tsv").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (ec || !losses.valid()) {
    PHOS_LOG(Error, "jobs", "'{}' does not run: {}: {}", name, dir, ec ? ec.message() : std::strerror(errno));
    return;
  }
  // The step the newest checkpoint was asked after. While one copies, none is asked: the first
  // step after it ends that is K or more past the last asks for the next.
  int64_t checkpointed = 0;
  auto copying = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mu_);
    checkpointed = f->job_checkpoints.empty() ? 0 : f->job_checkpoints.back().step;
  }
  while (true) {
    int64_t step = 0;
    {
      std::unique_lock lock(mu_);
      f->cv.wait(lock, [&] {
        return stopping_ || f->removed ||
               (f->deploy == DeployState::kDeployed && (job.steps == 0 || f->job_step < job.steps));
      });
      if (stopping_ || f->removed) break;
      step = f->job_step;
    }
    // The step about to run completes K since the last checkpoint: the instance checkpoints after it.
    // The step's answer, parsed once, as the invocation is answered: before the checkpoint the
    // instance takes next is answered, and before this thread reads it.
    auto answer = std::make_shared<Result<std::pair<int64_t, std::string>>>(Status::Internal("no answer"));
    auto outcome = std::make_shared<std::promise<InvokeOutcome>>();
    std::future<InvokeOutcome> answered = outcome->get_future();
    const Clock::time_point now = Clock::now();
    Invocation inv{kStepRequest, now + options_.invoke_timeout, nullptr, now, RestoreMode::kAuto, {}, std::nullopt};
    inv.done = [answer, outcome](InvokeOutcome o) {
      if (o.kind == InvokeOutcome::Kind::kOk) *answer = ParseStep(o.body);
      outcome->set_value(std::move(o));
    };
    const bool checkpoint = step + 1 - checkpointed >= job.checkpoint_every && !copying->load();
    if (checkpoint) {
      copying->store(true);
      PendingCheckpoint then;
      then.mode = mode;
      then.done = [this, f, answer, copying](CheckpointOutcome o) {
        copying->store(false);
        const int64_t after = answer->ok() ? (*answer)->first : 0;
        if (o.status.ok() && after > 0) {
          KeepJobCheckpoint(f, o, after);
        } else if (!o.status.ok()) {
          PHOS_LOG(Warn, "jobs", "'{}': checkpoint after step {} not taken: {}", f->spec.name, after,
                   o.status.message());
        }
      };
      inv.then = std::move(then);
    }
    Submit(name, std::move(inv));
    InvokeOutcome o = answered.get();
    auto retry_later = [&] {
      std::unique_lock lock(mu_);
      f->cv.wait_for(lock, kRetryDelay, [&] { return stopping_ || f->removed; });
    };
    if (o.kind == InvokeOutcome::Kind::kUnknownFunction || o.kind == InvokeOutcome::Kind::kStopping) break;
    if (o.kind != InvokeOutcome::Kind::kOk) {
      // A checkpoint asked with it goes with the instance, answered or not.
      if (checkpoint) copying->store(false);
      PHOS_LOG_EVERY_SEC(Warn, "jobs", 1, "'{}': step {} failed, sent again: {}", name, step + 1, o.error.message());
      retry_later();
      continue;
    }
    const Result<std::pair<int64_t, std::string>>& parsed = *answer;
    if (!parsed.ok()) {
      PHOS_LOG_EVERY_SEC(Error, "jobs", 1, "'{}': step {}: {}", name, step + 1, parsed.status().message());
      retry_later();
      continue;
    }
    const std::string line = fmt::format("{}\t{}\n", parsed->first, parsed->second);
    if (write(losses.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      PHOS_LOG_EVERY_SEC(Error, "jobs", 1, "'{}': {}/losses.tsv: {}", name, dir, std::strerror(errno));
    }
    if (checkpoint) checkpointed = parsed->first;
    std::lock_guard lock(mu_);
    f->job_step = parsed->first;
    if (job.steps != 0 && f->job_step >= job.steps) {
      PHOS_LOG(Info, "jobs", "'{}' finished: step {} of {}", name, f->job_step, job.steps);
    }
  }
  bool removed = false;
  {
    std::lock_guard lock(mu_);
    removed = f->removed;
  }
  if (removed) std::filesystem::remove_all(dir, ec);
}

Result<JobStatus> InstanceManager::Impl::Job(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = functions_.find(ServingKeyLocked(name));
  if (it == functions_.end()) return Status::NotFound("no function '" + name + "'");
  const Function& f = *it->second;
  if (f.spec.job.checkpoint_every <= 0) return Status::FailedPrecondition("'" + name + "' is not a job");
  JobStatus s;
  s.step = f.job_step;
  s.steps = f.spec.job.steps;
  s.finished = s.steps != 0 && s.step >= s.steps;
  for (const JobCheckpoint& c : f.job_checkpoints) s.checkpoints.push_back({c.version, c.step});
  s.losses_path = JobDir(name) + "/losses.tsv";
  return s;
}

}  // namespace phos::runtime
