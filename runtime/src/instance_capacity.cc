// Who runs where (docs/design.md D16): the supervisor that tops functions up to their warm count
// and starts instances for queued invocations, the counts max_instances is checked against,
// eviction and retirement, and the context demand told to the pool. Part of the instance manager
// (instance_manager_impl.h).
#include <algorithm>

#include "instance_manager_impl.h"
#include "phos/base/log.h"

namespace phos::runtime {

int InstanceManager::Impl::IdleLocked(const Function& f) const {
  int idle = 0;
  for (const auto& inst : f.instances) idle += inst->state == InstanceState::kIdle && !inst->retiring ? 1 : 0;
  return idle;
}

int InstanceManager::Impl::LiveLocked(const Function& f) const {
  int live = 0;
  for (const auto& inst : f.instances) live += inst->retiring ? 0 : 1;
  return live;
}

int InstanceManager::Impl::HoldersLocked(const Function& f) const {
  int holders = 0;
  for (const auto& inst : f.instances) holders += inst->holds_range && !inst->retiring ? 1 : 0;
  return holders;
}

int InstanceManager::Impl::ExtraLocked(const Function& f) const {
  int extra = 0;
  for (const auto& inst : f.instances) extra += inst->extra && !inst->retiring ? 1 : 0;
  return extra;
}

bool InstanceManager::Impl::EvictIdleLocked(Function& f) {
  Instance* chosen = nullptr;
  for (auto& inst : f.instances) {
    if (inst->state != InstanceState::kIdle || inst->retiring) continue;
    // Extras before warm ones (a warm one would be restored again at once); f.instances is in
    // start order, so the first found of a kind has been there longest.
    if (chosen == nullptr || (inst->extra && !chosen->extra)) chosen = inst.get();
  }
  if (chosen == nullptr) return false;
  chosen->evict = true;
  RetireLocked(f, *chosen);
  return true;
}

void InstanceManager::Impl::RetireLocked(Function& f, Instance& inst) {
  if (inst.retiring) return;
  inst.retiring = true;
  inst.retired_at = Clock::now();
  f.cv.notify_all();       // an evicted idle instance wakes to end
  f.slot_cv.notify_all();  // one fewer counts against max_instances
  supervisor_cv_.notify_all();
}

void InstanceManager::Impl::PublishDemandLocked() {
  if (options_.sessions == nullptr) return;
  size_t demand = 0;
  for (const auto& [name, f] : functions_) {
    if (f->spec.gpus != 1) continue;  // device groups come from their own pool
    switch (f->deploy) {
      case DeployState::kDeploying:
        demand += static_cast<size_t>(InstanceRanges(f->spec));  // all free once it is deployed
        break;
      case DeployState::kDeployed:
        // A range whose instance is still starting counts too: its restore may not have leased
        // its context yet, and the pool must not take that context for one of the free ranges.
        for (const Slot& slot : f->slots) {
          const bool starting = std::any_of(f->instances.begin(), f->instances.end(), [&](const auto& inst) {
            return inst->id == slot.holder && inst->state == InstanceState::kStarting;
          });
          demand += slot.holder == 0 || starting ? 1 : 0;
        }
        break;
      case DeployState::kNone:
        demand += static_cast<size_t>(std::max(0, MaxInstances(f->spec) - LiveLocked(*f)));
        break;
      case DeployState::kFailed:
        break;
    }
  }
  if (demand == published_demand_) return;
  published_demand_ = demand;
  options_.sessions->SetContextDemand(demand);
}

// ---- supervisor ----

void InstanceManager::Impl::Supervise() {
  Clock::time_point next_log_sweep{};
  std::unique_lock lock(mu_);
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    Clock::time_point wake = now + std::chrono::seconds(1);
    std::vector<Invocation> expired;
    for (auto& [name, f] : functions_) {
      for (auto it = f->queue.begin(); it != f->queue.end();) {
        if (it->deadline <= now) {
          expired.push_back(std::move(*it));
          it = f->queue.erase(it);
        } else {
          wake = std::min(wake, it->deadline);
          ++it;
        }
      }
      if (f->deploy == DeployState::kFailed) {
        if (f->next_start <= now) {
          StartDeployLocked(f, "");
        } else {
          wake = std::min(wake, f->next_start);
        }
        continue;
      }
      const bool deployed = f->deploy == DeployState::kDeployed;
      const RestoreMode how = deployed ? RestoreMode::kPhos : RestoreMode::kWarm;
      switch (PlanStartLocked(*f, now)) {
        case PlannedStart::kPromote:
          // max_instances are running: an instance started for an invocation becomes a warm one.
          for (auto& inst : f->instances) {
            if (inst->extra && !inst->retiring) {
              inst->extra = false;
              break;
            }
          }
          break;
        case PlannedStart::kWarm:
          StartInstanceLocked(f, how, std::nullopt, /*extra=*/false);
          break;
        case PlannedStart::kForQueue: {
          // Queued with no instance to take it (a function scaled to zero, or one that was
          // deploying): an instance is started for it.
          Invocation first = std::move(f->queue.front());
          f->queue.pop_front();
          StartInstanceLocked(f, how, std::move(first), /*extra=*/true);
          break;
        }
        case PlannedStart::kLater:
          wake = std::min(wake, f->next_start);
          break;
        case PlannedStart::kNothing:
          break;
      }
    }
    JoinFinishedLocked();
    if (!expired.empty()) {
      lock.unlock();
      for (Invocation& inv : expired) {
        inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "no instance became free before the deadline"));
      }
      lock.lock();
      continue;
    }
    if (NeedsStartLocked(now)) continue;
    if (options_.max_log_bytes > 0 && now >= next_log_sweep) {
      next_log_sweep = now + std::chrono::seconds(1);
      lock.unlock();
      const int cut = BoundFunctionLogs(logs_dir_, options_.max_log_bytes);
      if (cut > 0) {
        PHOS_LOG(Info, "instances", "{} function log(s) past {} MiB cut", cut, options_.max_log_bytes >> 20);
      }
      lock.lock();
      continue;
    }
    supervisor_cv_.wait_until(lock, wake);
  }
  JoinFinishedLocked();
}

InstanceManager::Impl::PlannedStart InstanceManager::Impl::PlanStartLocked(const Function& f,
                                                                          Clock::time_point now) const {
  if (f.deploy == DeployState::kDeploying || f.deploy == DeployState::kFailed || f.removed || f.moved_to != nullptr) {
    return PlannedStart::kNothing;  // a function that moved to another node runs nothing here
  }
  const bool deployed = f.deploy == DeployState::kDeployed;
  const bool full = LiveLocked(f) >= MaxInstances(f.spec);
  // A restore for an invocation goes first: its range, and the copy engine, are its alone.
  const bool room = !deployed || (FreeSlotLocked(f) >= 0 && f.slot_waiters == 0);
  if (WarmLocked(f) < f.spec.instances) {
    if (full) return ExtraLocked(f) > 0 ? PlannedStart::kPromote : PlannedStart::kNothing;
    if (!room || request_restores_ > 0) return PlannedStart::kNothing;
    return f.next_start <= now ? PlannedStart::kWarm : PlannedStart::kLater;
  }
  int starting = 0;
  for (const auto& inst : f.instances) starting += inst->state == InstanceState::kStarting && !inst->retiring ? 1 : 0;
  if (f.queue.empty() || IdleLocked(f) + starting >= static_cast<int>(f.queue.size()) || full || !room) {
    return PlannedStart::kNothing;
  }
  return f.next_start <= now ? PlannedStart::kForQueue : PlannedStart::kLater;
}

void InstanceManager::Impl::DoneRestoringLocked(Instance& inst) {
  if (!inst.for_request) return;
  inst.for_request = false;
  --request_restores_;
  supervisor_cv_.notify_all();
}

bool InstanceManager::Impl::NeedsStartLocked(Clock::time_point now) const {
  for (const auto& [name, f] : functions_) {
    PlannedStart next = PlanStartLocked(*f, now);
    if (next != PlannedStart::kNothing && next != PlannedStart::kLater) return true;
  }
  return false;
}

}  // namespace phos::runtime
