// Moves between nodes (docs/design.md D10): an instance checkpointed here goes on in the same
// instance range of another node's deploy of its function, and this node forwards the function's
// invocations there; and the receiving side, a range adopting a snapshot another node sent.
#include <fmt/core.h>

#include "instance_manager_impl.h"
#include "phos/base/log.h"

namespace phos::runtime {

bool InstanceManager::Impl::SendToNode(const std::shared_ptr<Function>& f, Instance& inst, Move& move) {
  const std::string& name = f->spec.name;
  int va_slot = -1;
  {
    std::lock_guard lock(mu_);
    const int held = HeldSlotLocked(*f, inst);
    if (held >= 0) va_slot = f->slots[held].va_slot;
  }
  Result<PeerNode::Received> sent =
      va_slot >= 0 ? move.node->SendSnapshot(name, move.checkpoint.version, va_slot)
                   : Result<PeerNode::Received>(Status::Internal("the instance holds no instance range"));
  if (!sent.ok() && sent.status().code() != StatusCode::kTimeout) {
    // Refused there, or never sent: the checkpoint is this node's range's, and the instance is
    // restored from it here.
    move.failure = sent.status().WithContext(
        fmt::format("move of '{}' to {} (the instance serves on here, from the checkpoint)", name, move.node->Name()));
    PHOS_LOG(Error, "instances", "{}", move.failure.message());
    return false;
  }
  if (!sent.ok()) {
    // The snapshot went but no answer came back: the other node may serve it already. Serving on
    // here too would let the two states part, so the function is forwarded there as if the move
    // had been answered, and the move is answered with why it is in doubt.
    move.failure = sent.status().WithContext(
        fmt::format("move of '{}' to {} (its requests are forwarded there)", name, move.node->Name()));
    PHOS_LOG(Error, "instances", "{}", move.failure.message());
  } else {
    move.received = *sent;
  }
  std::deque<Invocation> queued;
  {
    std::lock_guard lock(mu_);
    f->moved_to = move.node;
    queued.swap(f->queue);
    *f->forwarding += static_cast<int>(queued.size());
    // None may serve on here from its own state (QueueCheckpoint refused the move while another
    // ran; one could have been restored for a request since).
    for (const auto& other : f->instances) {
      if (other.get() == &inst || other->retiring) continue;
      other->evict = true;
      if (other->state == InstanceState::kIdle) RetireLocked(*f, *other);
    }
    f->cv.notify_all();
    supervisor_cv_.notify_all();
  }
  PHOS_LOG(Info, "instances", "'{}' moved to {} (instance {} there, v{}; {} chunks sent, {} bytes); {} queued "
           "invocations forwarded there",
           name, move.node->Name(), move.received.instance, move.received.version, move.received.sent_chunks,
           move.received.sent_bytes, queued.size());
  AnswerMove(inst, Status::Ok());
  for (Invocation& inv : queued) Forward(name, move.node, f->forwarding, std::move(inv));
  return true;
}

void InstanceManager::Impl::Forward(const std::string& name, const std::shared_ptr<PeerNode>& node,
                                    std::shared_ptr<std::atomic<int>> forwarding, Invocation inv) {
  const Clock::duration left = inv.deadline - Clock::now();
  if (left <= Clock::duration::zero()) {
    --*forwarding;
    inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "the deadline passed while the request was queued"));
    return;
  }
  // At least a millisecond: a deadline closer than that still gets its chance there.
  const auto timeout = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(left));
  node->Invoke(name, {.request = std::move(inv.request), .timeout = timeout, .request_id = std::move(inv.request_id)},
               [done = std::move(inv.done), there = node->Name(), forwarding](InvokeOutcome o) {
                 --*forwarding;
                 o.node = there;
                 done(std::move(o));
               });
}

void InstanceManager::Impl::AdoptSnapshot(const std::string& name, int va_slot, uint64_t version,
                                          std::function<void(MigrationOutcome)> done) {
  // Refused before the range takes the snapshot: version 0 says nothing restores from it (the
  // caller may delete it). `done` is called with mu_ released.
  auto refuse = [&](Status why) {
    MigrationOutcome o;
    o.status = std::move(why);
    o.to = -1;
    o.version = 0;
    done(std::move(o));
  };
  Status refused;
  uint64_t held_version = 0;
  {
    std::lock_guard lock(mu_);
    auto it = functions_.find(ServingKeyLocked(name));
    if (stopping_) {
      refused = Status::Unavailable("phosd is shutting down");
    } else if (it == functions_.end()) {
      refused = Status::NotFound("no function '" + name + "' on this node");
    } else if (it->second->spec.name != name) {
      // The snapshot came under the function's name; this node's ranges hold the version's.
      refused = Status::FailedPrecondition(fmt::format(
          "'{}' serves version {} here, deployed over an earlier one: a move takes only a function's first deploy",
          name, it->second->number));
    } else if (it->second->deploy != DeployState::kDeployed || !SnapshotsEnabled()) {
      refused = Status::FailedPrecondition(
          fmt::format("'{}' is not deployed from a snapshot on this node: it has no instance range to restore in", name));
    } else if (it->second->spec.job.checkpoint_every > 0 || it->second->moved_to != nullptr) {
      refused = Status::FailedPrecondition(fmt::format(
          "'{}' takes no instance from another node: {}", name,
          it->second->moved_to != nullptr ? "it moved to " + it->second->moved_to->Name() : "it is a job"));
    } else {
      std::string ranges;
      for (const Slot& slot : it->second->slots) {
        if (slot.va_slot == va_slot) held_version = slot.version;
        ranges += (ranges.empty() ? "" : ", ") + std::to_string(slot.va_slot);
      }
      if (held_version == 0) {
        refused = Status::FailedPrecondition(fmt::format(
            "'{}' has no instance range {} with a snapshot on this node (its ranges: {}): a snapshot restores only "
            "in the range it was taken in, where its addresses are",
            name, va_slot, ranges));
      }
    }
  }
  if (!refused.ok()) return refuse(std::move(refused));
  // What the range's process was deployed with is what the snapshot's buffers must be.
  if (Status fits = options_.sessions->SameLayout(name, version, held_version); !fits.ok()) {
    return refuse(Status::FailedPrecondition("the snapshot does not fit this node's deploy of '" + name +
                                             "': " + fits.message()));
  }
  CpuStateRef unused;
  std::vector<uint64_t> versions;
  // The range takes the snapshot, and an instance reserved the range is started there; the
  // instance answers `done` once ready (AnswerMove), with the version: the range keeps it either way.
  auto adopt = [&]() -> Status {
    std::lock_guard lock(mu_);
    auto it = functions_.find(name);  // the key checked above: the name itself
    if (stopping_ || it == functions_.end() || it->second->removed) {
      return Status::Unavailable("the function was removed or phosd is stopping");
    }
    const std::shared_ptr<Function>& f = it->second;
    int index = -1;
    for (size_t i = 0; i < f->slots.size(); ++i) {
      if (f->slots[i].va_slot == va_slot) index = static_cast<int>(i);
    }
    if (index < 0) return Status::Unavailable("the function's instance range went away");
    Slot& slot = f->slots[index];
    // The deploy's process for the CPU side: whatever a checkpoint here made of the range goes.
    if (!slot.deployed.id.empty()) {
      unused = slot.cpu;
      slot.cpu = slot.deployed;
      slot.deployed = {};
    }
    slot.version = version;
    slot.device = -1;
    if (slot.holder != 0) {
      for (const auto& other : f->instances) {
        if (other->id != slot.holder) continue;
        other->evict = true;  // a busy one ends after its request
        if (other->state == InstanceState::kIdle) RetireLocked(*f, *other);
      }
    }
    auto move = std::make_shared<Move>();
    move->to = -1;
    move->start = Clock::now();
    move->checkpoint.version = version;
    move->done = std::move(done);
    std::shared_ptr<Instance> inst = StartInstanceLocked(f, RestoreMode::kPhos, std::nullopt, /*extra=*/false);
    inst->wanted_slot = index;
    inst->moving = std::move(move);
    // No restore for a request takes the range before this instance does (AcquireSlotLocked).
    slot.reserved_for = inst->id;
    versions = VersionsLocked(*f);
    PHOS_LOG(Info, "instances", "'{}': instance range {} restores from v{} (sent by another node); instance {} "
             "restored there",
             name, va_slot, version, inst->id);
    return Status::Ok();
  };
  if (Status adopted = adopt(); !adopted.ok()) return refuse(std::move(adopted));
  if (!unused.id.empty()) options_.cpu_state->Release(unused).IgnoreError();
  options_.sessions->RetainOnly(name, versions);
}

}  // namespace phos::runtime
