// Versions (docs/design.md D18): each deploy of a function's name is a version, run as a Function
// of its own under a key of its own. A new version deploys beside the one serving and takes the
// name once deployed; the one it replaced ends once idle and is kept (its spec and executable's
// digest) to roll back to, which deploys it anew.
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <fstream>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "instance_manager_impl.h"
#include "phos/base/log.h"

namespace phos::runtime {

std::string VersionKey(const std::string& name, uint64_t serial) {
  return serial <= 1 ? name : name + "@" + std::to_string(serial);
}

std::string FileSha256Hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return "";
  std::array<char, 1 << 16> buffer;
  while (in) {
    in.read(buffer.data(), buffer.size());
    if (in.gcount() > 0 && EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(in.gcount())) != 1) return "";
  }
  if (in.bad()) return "";
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest;
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest.data(), &size) != 1) return "";
  return fmt::format("{:02x}", fmt::join(digest.begin(), digest.begin() + size, ""));
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FunctionVersion InstanceManager::Impl::VersionOf(const Function& f) {
  FunctionVersion v{.number = f.number, .spec = f.spec, .executable_sha256 = f.executable_sha256,
                    .deployed_at_ms = f.deployed_at_ms};
  v.spec.name = f.name;
  return v;
}

std::shared_ptr<Function> InstanceManager::Impl::AddVersionLocked(FunctionVersion version, const std::string& key) {
  auto f = std::make_shared<Function>();
  f->name = version.spec.name;
  f->spec = std::move(version.spec);
  f->spec.name = key;
  f->number = version.number;
  f->executable_sha256 = std::move(version.executable_sha256);
  f->deployed_at_ms = version.deployed_at_ms;
  functions_[key] = f;
  if (options_.sessions != nullptr) options_.sessions->SetFunctionLimits(key, f->spec.limits);
  return f;
}

std::shared_ptr<Function> InstanceManager::Impl::AddFunctionLocked(const FunctionSpec& spec) {
  versions_[spec.name] = VersionTable{.serving = spec.name, .registered_at_ms = NewStampLocked()};
  std::shared_ptr<Function> f =
      AddVersionLocked({.number = 1, .spec = spec, .deployed_at_ms = NewStampLocked()}, spec.name);
  f->announce = true;
  return f;
}

int64_t InstanceManager::Impl::NewStampLocked() {
  last_stamp_ms_ = std::max(UnixMillis(), last_stamp_ms_ + 1);
  return last_stamp_ms_;
}

Status InstanceManager::Impl::HeldLocked(const std::string& name, const VersionTable& table,
                                         const HeldFunction& held) const {
  // Any version of the name will do: each carries the name's registration.
  auto is_held = [&](uint64_t number, int64_t deployed_at_ms) {
    return held.SameAs(
        {.registered_at_ms = table.registered_at_ms, .number = number, .deployed_at_ms = deployed_at_ms});
  };
  if (std::any_of(table.kept.begin(), table.kept.end(),
                  [&](const FunctionVersion& k) { return is_held(k.number, k.deployed_at_ms); })) {
    return Status::Ok();
  }
  for (const std::string& key : {table.serving, table.deploying}) {
    auto it = functions_.find(key);
    if (it != functions_.end() && is_held(it->second->number, it->second->deployed_at_ms)) {
      return Status::Ok();
    }
  }
  if (held.registered_at_ms != 0) {
    return Status::FailedPrecondition(fmt::format("'{}' was registered afresh (at {} ms, not {} ms)", name,
                                                  table.registered_at_ms, held.registered_at_ms));
  }
  return Status::FailedPrecondition(
      fmt::format("'{}' holds no version {} deployed at {} ms", name, held.number, held.deployed_at_ms));
}

Status InstanceManager::Impl::CheckName(const std::string& name) {
  return name.find('@') == std::string::npos ? Status::Ok() : Status::NotFound("no function '" + name + "'");
}

void InstanceManager::Impl::DeployVersion(FunctionSpec spec, std::string sample_request,
                                          std::chrono::milliseconds sample_timeout,
                                          std::function<void(DeployOutcome)> done) {
  if (Status valid = Validate(spec); !valid.ok()) return done(DeployFailed(valid));
  // Its executable's digest is taken by the deploy (RunDeploy), off the caller's thread.
  DeployReplacement(FunctionVersion{.number = 0, .spec = std::move(spec)}, std::move(sample_request), sample_timeout,
                    std::move(done));
}

void InstanceManager::Impl::Rollback(const std::string& name, uint64_t number,
                                     std::function<void(DeployOutcome)> done) {
  std::optional<FunctionVersion> target;
  uint64_t serving = 0;
  {
    std::lock_guard lock(mu_);
    auto v = versions_.find(name);
    if (v == versions_.end()) return done(DeployFailed(Status::NotFound("no function '" + name + "'")));
    serving = functions_.at(v->second.serving)->number;
    for (const FunctionVersion& kept : v->second.kept) {
      const bool wanted = number != 0 ? kept.number == number : kept.number < serving;
      if (wanted && (target == std::nullopt || kept.number > target->number)) target = kept;
    }
  }
  if (number == serving) {
    return done(DeployFailed(Status::FailedPrecondition(fmt::format("version {} serves '{}' already", number, name))));
  }
  if (target == std::nullopt) {
    return done(DeployFailed(number != 0 ? Status::NotFound(fmt::format("'{}' keeps no version {}", name, number))
                                         : Status::FailedPrecondition(fmt::format(
                                               "'{}' keeps no version older than the serving one ({})", name, serving))));
  }
  if (Status valid = Validate(target->spec); !valid.ok()) return done(DeployFailed(valid));
  // Without snapshots nothing deploys it: its executable is checked here (ExecutableChanged).
  if (!SnapshotsEnabled()) {
    if (Status changed = ExecutableChanged(*target, FileSha256Hex(target->spec.executable)); !changed.ok()) {
      return done(DeployFailed(changed));
    }
  }
  PHOS_LOG(Info, "instances", "'{}' rolls back from version {} to version {}", name, serving, target->number);
  DeployReplacement(std::move(*target), "", std::chrono::milliseconds(0), std::move(done));
}

Status InstanceManager::Impl::ExecutableChanged(const FunctionVersion& version, const std::string& digest) {
  // The program the version ran, or none: a rollback that ran another would not be one.
  if (version.executable_sha256.empty() || digest == version.executable_sha256) return Status::Ok();
  return Status::FailedPrecondition(fmt::format(
      "version {} of '{}' ran {} with SHA-256 {}; that file is {} now: deploy it as a new version instead",
      version.number, version.spec.name, version.spec.executable, version.executable_sha256,
      digest.empty() ? "unreadable" : "another program (" + digest + ")"));
}

void InstanceManager::Impl::Adopt(AdoptedVersion adopted, std::function<void(DeployOutcome)> done) {
  const std::string name = adopted.version.spec.name;
  const uint64_t number = adopted.version.number;
  if (!SnapshotsEnabled()) {
    return done(DeployFailed(Status::FailedPrecondition("this node keeps no snapshots: it serves no other node's")));
  }
  if (number == 0 || adopted.import == nullptr) {
    return done(DeployFailed(Status::InvalidArgument("an adopted version needs its number and its snapshots")));
  }
  if (Status valid = Validate(adopted.version.spec); !valid.ok()) return done(DeployFailed(valid));
  if (adopted.version.spec.job.checkpoint_every > 0) {
    return done(DeployFailed(Status::FailedPrecondition("'" + name + "' is a job: it runs on the node it was deployed on")));
  }
  auto shared = std::make_shared<const AdoptedVersion>(std::move(adopted));
  Status refused;
  bool replace = false;  // deployed over the version serving, below
  {
    std::lock_guard lock(mu_);
    auto v = versions_.find(name);
    if (stopping_) {
      refused = Status::Unavailable("phosd is shutting down");
    } else if (v != versions_.end() && functions_.at(v->second.serving)->number == number) {
      // Served already.
    } else if (v == versions_.end()) {
      // New here: registered under the version's own number, as Open registers a loaded one.
      const std::string key = VersionKey(name, number);
      FunctionSpec confined = shared->version.spec;
      confined.name = key;
      if (options_.sandbox == nullptr || (refused = options_.sandbox->PrepareFunction(confined)).ok()) {
        versions_[name] = VersionTable{
            .serving = key, .last = number, .serial = number, .registered_at_ms = NewStampLocked()};
        std::shared_ptr<Function> f = AddVersionLocked(shared->version, key);
        f->expected_sha256 = f->executable_sha256;
        f->adopted = shared;
        refused = SaveLocked();
        if (refused.ok()) {
          f->deployed_callbacks.push_back(std::move(done));
          StartDeployLocked(f, "", std::chrono::milliseconds(0));
          PHOS_LOG(Info, "instances", "adopting version {} of '{}' from the cluster ({})", number, name,
                   f->spec.executable);
          return;
        }
        ForgetLocked(key);
        if (options_.sandbox != nullptr) options_.sandbox->RemoveFunction(key);
      }
      refused = refused.WithContext("register function '" + name + "'");
    } else {
      replace = true;
    }
  }
  if (!refused.ok()) return done(DeployFailed(refused));
  if (!replace) {
    DeployOutcome served;
    served.version = number;
    served.contexts_ready = true;
    return done(std::move(served));
  }
  DeployReplacement(shared->version, "", std::chrono::milliseconds(0), std::move(done), shared);
}

void InstanceManager::Impl::DeployReplacement(FunctionVersion version, std::string sample_request,
                                              std::chrono::milliseconds sample_timeout,
                                              std::function<void(DeployOutcome)> done,
                                              std::shared_ptr<const AdoptedVersion> adopted) {
  const std::string name = version.spec.name;
  Status refused;
  std::shared_ptr<Function> f;
  // Without snapshots there is nothing to deploy: the new version serves at once (its instances
  // spawned), swapped in under the same lock that added it.
  TakeDown replaced;
  bool drop_now = false;
  std::vector<std::function<void(DeployOutcome)>> callbacks;
  {
    std::lock_guard lock(mu_);
    auto v = versions_.find(name);
    std::shared_ptr<Function> serving = v != versions_.end() ? functions_.at(v->second.serving) : nullptr;
    if (stopping_) {
      refused = Status::Unavailable("phosd is shutting down");
    } else if (serving == nullptr) {
      refused = Status::NotFound("no function '" + name + "' to deploy a new version of");
    } else if (!v->second.deploying.empty()) {
      refused = Status::FailedPrecondition(fmt::format("version {} of '{}' is deploying; wait for it",
                                                       functions_.at(v->second.deploying)->number, name));
    } else if (serving->deploy == DeployState::kDeploying) {
      refused = Status::FailedPrecondition("'" + name + "' is still deploying; wait for it");
    } else if (serving->spec.job.checkpoint_every > 0 || version.spec.job.checkpoint_every > 0) {
      refused = Status::FailedPrecondition("'" + name + "' is a job: a job has no versions (remove it and deploy it again)");
    } else if (serving->moved_to != nullptr) {
      refused = Status::FailedPrecondition("'" + name + "' moved to " + serving->moved_to->Name() +
                                           ": deploy its new version there");
    } else {
      VersionTable& table = v->second;
      const std::string key = VersionKey(name, table.serial + 1);
      FunctionSpec confined = version.spec;
      confined.name = key;
      if (options_.sandbox != nullptr && !(refused = options_.sandbox->PrepareFunction(confined)).ok()) {
        refused = refused.WithContext("deploy a version of '" + name + "'");
      } else {
        ++table.serial;
        // A new version; a rollback keeps its number, as another node's version does its own, and
        // its executable must be the one it ran.
        const bool numbered = version.number != 0;
        if (!numbered) version.number = ++table.last;
        table.last = std::max(table.last, version.number);
        table.deploying = key;
        f = AddVersionLocked(std::move(version), key);
        if (numbered) f->expected_sha256 = f->executable_sha256;
        f->replacing = true;
        f->adopted = adopted;
        f->announce = adopted == nullptr;
        if (adopted == nullptr) f->deployed_at_ms = NewStampLocked();
        f->deployed_callbacks.push_back(std::move(done));
        if (SnapshotsEnabled()) {
          StartDeployLocked(f, std::move(sample_request), sample_timeout);
          PHOS_LOG(Info, "instances", "deploying version {} of '{}' ({})", f->number, name, f->spec.executable);
          return;
        }
        callbacks.swap(f->deployed_callbacks);
        replaced = SwapInLocked(f, &drop_now);
        supervisor_cv_.notify_all();
      }
    }
  }
  if (!refused.ok()) return done(DeployFailed(refused));
  FinishTakeDown(replaced, "", drop_now);
  DeployOutcome report;
  report.version = f->number;
  report.contexts_ready = true;
  for (auto& cb : callbacks) cb(report);
}

TakeDown InstanceManager::Impl::SwapInLocked(const std::shared_ptr<Function>& f, bool* drop_now) {
  VersionTable& table = versions_.at(f->name);
  std::shared_ptr<Function> old = functions_.at(table.serving);
  functions_.erase(table.serving);
  f->replacing = false;
  table.serving = f->spec.name;
  table.deploying.clear();
  // What waited for the old version is served by the new, in its order, before what comes next.
  for (auto it = old->queue.rbegin(); it != old->queue.rend(); ++it) f->queue.push_front(std::move(*it));
  old->queue.clear();
  f->cv.notify_all();
  table.kept.erase(std::remove_if(table.kept.begin(), table.kept.end(),
                                  [&](const FunctionVersion& k) { return k.number == f->number; }),
                   table.kept.end());
  table.kept.push_back(VersionOf(*old));
  std::sort(table.kept.begin(), table.kept.end(),
            [](const FunctionVersion& a, const FunctionVersion& b) { return a.number < b.number; });
  while (table.kept.size() > static_cast<size_t>(std::max(options_.kept_versions, 0))) table.kept.pop_front();
  old->replaced = true;
  TakeDown down = TakeDownLocked(old);
  *drop_now = old->instances.empty();
  if (Status saved = SaveLocked(); !saved.ok()) {
    // It serves all the same; a restarted phosd would serve the version the registry last held.
    PHOS_LOG(Error, "instances", "version {} of '{}' serves but is not recorded: {}", f->number, f->name,
             saved.message());
  }
  PHOS_LOG(Info, "instances", "version {} of '{}' serves; version {} ends once idle", f->number, f->name, old->number);
  return down;
}

Result<std::vector<VersionStatus>> InstanceManager::Impl::Versions(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto v = versions_.find(name);
  if (v == versions_.end()) return Status::NotFound("no function '" + name + "'");
  std::vector<VersionStatus> out;
  const uint64_t deploying = v->second.deploying.empty() ? 0 : functions_.at(v->second.deploying)->number;
  const int64_t registered = v->second.registered_at_ms;
  for (const FunctionVersion& kept : v->second.kept) {
    // A rollback to it: listed as deploying.
    if (kept.number != deploying) out.push_back({kept, "kept", registered});
  }
  out.push_back({VersionOf(*functions_.at(v->second.serving)), "serving", registered});
  if (deploying != 0) {
    out.push_back({VersionOf(*functions_.at(v->second.deploying)), "deploying", registered});
  }
  std::stable_sort(out.begin(), out.end(), [](const VersionStatus& a, const VersionStatus& b) {
    return a.version.number < b.version.number;
  });
  return out;
}

Status InstanceManager::Impl::DeleteVersion(const std::string& name, uint64_t number) {
  std::lock_guard lock(mu_);
  auto v = versions_.find(name);
  if (v == versions_.end()) return Status::NotFound("no function '" + name + "'");
  VersionTable& table = v->second;
  for (const std::string& key : {table.serving, table.deploying}) {
    if (!key.empty() && functions_.at(key)->number == number) {
      return Status::FailedPrecondition(fmt::format(
          "version {} of '{}' {}: roll back or deploy another first, or remove the function", number, name,
          key == table.serving ? "serves it" : "is deploying"));
    }
  }
  auto it = std::find_if(table.kept.begin(), table.kept.end(),
                         [&](const FunctionVersion& k) { return k.number == number; });
  if (it == table.kept.end()) return Status::NotFound(fmt::format("'{}' keeps no version {}", name, number));
  FunctionVersion forgotten = *it;
  table.kept.erase(it);
  if (Status saved = SaveLocked(); !saved.ok()) {
    table.kept.insert(std::upper_bound(table.kept.begin(), table.kept.end(), forgotten,
                                       [](const FunctionVersion& a, const FunctionVersion& b) {
                                         return a.number < b.number;
                                       }),
                      forgotten);
    return saved.WithContext(fmt::format("delete version {} of '{}'", number, name));
  }
  PHOS_LOG(Info, "instances", "version {} of '{}' deleted", number, name);
  return Status::Ok();
}

}  // namespace phos::runtime
