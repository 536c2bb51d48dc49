#include "host_fn_gates.h"

#include <array>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"

namespace phos::runtime {
namespace {

constexpr auto kToFrontend = ipc::HostFnQueueId::kToFrontend;
constexpr auto kToServer = ipc::HostFnQueueId::kToServer;
// How often the release thread looks at the stop flag when no slot comes back.
constexpr int kReleaseWaitMs = 100;

}  // namespace

std::shared_ptr<HostFnGates> HostFnGates::Create(driver::DriverTable* driver, ipc::Ring* ring, int pid) {
  return std::shared_ptr<HostFnGates>(new HostFnGates(driver, ring, pid));
}

HostFnGates::HostFnGates(driver::DriverTable* driver, ipc::Ring* ring, int pid)
    : driver_(driver), queue_ring_(ring), pid_(pid), ring_(ring), slots_(ipc::kMaxHostFnSlots) {}

CUresult HostFnGates::Launch(CUstream stream, int device, CUcontext context, uint32_t slot) {
  ReleaseReturned();
  if (slot >= ipc::kMaxHostFnSlots) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaLaunchHostFunc refused: slot {} is not below {}",
                       pid_, slot, ipc::kMaxHostFnSlots);
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The device's gates before the slot is taken: every slot OpenAll finds has its gates.
  Result<DeviceGates> gates = GatesOn(device, context);
  if (!gates.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: cudaLaunchHostFunc refused: no gate words on device {}: {}", pid_, device,
                       gates.status().message());
    return gates.status().code() == StatusCode::kOutOfMemory ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
  }
  uint32_t generation = 0;
  {
    std::unique_lock lock(mu_);
    if (closing_) return CUDA_ERROR_INVALID_VALUE;  // the session is ending
    // A release in flight on the release thread ends in a driver call's time.
    slot_freed_.wait(lock, [&] { return slots_[slot].state != SlotState::kReleasing; });
    Slot& s = slots_[slot];
    if (s.state != SlotState::kFree) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaLaunchHostFunc refused: slot {} is still pending",
                         pid_, slot);
      return CUDA_ERROR_INVALID_VALUE;
    }
    s.state = SlotState::kQueued;
    s.device = device;
    generation = ++s.generation;
  }
  // Freed by OnReached. A context that fails drops the callbacks still queued, and their few bytes
  // with them: the driver never calls them.
  auto* reach = new Reach{shared_from_this(), slot, generation};
  if (CUresult r = driver_->cuLaunchHostFunc(stream, &HostFnGates::OnReached, reach); r != CUDA_SUCCESS) {
    delete reach;
    std::lock_guard lock(mu_);
    if (slots_[slot].generation == generation) slots_[slot].state = SlotState::kFree;
    return r;
  }
  // The wait compares wrap-around aware ((int32_t)(word - generation) >= 0), so a slot may be
  // reused 2^31 times before a stale word could satisfy it. Queued after OpenAll wrote the
  // generation, it is satisfied at once.
  const CUdeviceptr word = gates->words + uint64_t{slot} * sizeof(uint32_t);
  CUresult r = driver_->cuStreamWaitValue32(stream, word, generation, CU_STREAM_WAIT_VALUE_GEQ);
  // A wait that failed leaves the function queued without its gate: it still runs when reached,
  // and its slot is freed when it returns; the stream's order is lost with the context's health.
  if (!release_thread_.joinable()) release_thread_ = std::thread([this] { ReleaseLoop(); });
  return r;
}

bool HostFnGates::Available(std::span<const uint32_t> slots) {
  ReleaseReturned();
  std::vector<bool> seen(ipc::kMaxHostFnSlots, false);
  std::lock_guard lock(mu_);
  for (uint32_t slot : slots) {
    // A slot being released becomes free in a driver call's time (Launch waits for it).
    if (slot >= ipc::kMaxHostFnSlots || seen[slot] || slots_[slot].state == SlotState::kQueued ||
        slots_[slot].state == SlotState::kReached) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                         "pid {}: cudaGraphLaunch refused: host-function slot {} is out of range, repeated or pending",
                         pid_, slot);
      return false;
    }
    seen[slot] = true;
  }
  return true;
}

void HostFnGates::Refuse(uint32_t slot, CUresult result) {
  std::lock_guard lock(mu_);
  if (ring_ != nullptr) ring_->PostHostFnEvent(kToFrontend, {slot, static_cast<int32_t>(result)});
}

size_t HostFnGates::pending() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  // A slot being released has returned: its gate opens without the function process.
  for (const Slot& s : slots_) n += s.state == SlotState::kQueued || s.state == SlotState::kReached ? 1 : 0;
  return n;
}

void CUDA_CB HostFnGates::OnReached(void* reach) {
  std::unique_ptr<Reach> r(static_cast<Reach*>(reach));
  r->gates->Reached(r->slot, r->generation);
}

void HostFnGates::Reached(uint32_t slot, uint32_t generation) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[slot];
  if (ring_ == nullptr || s.state != SlotState::kQueued || s.generation != generation) return;
  s.state = SlotState::kReached;
  ring_->PostHostFnEvent(kToFrontend, {slot, 0});
}

void HostFnGates::ReleaseReturned() {
  struct Release {
    uint32_t slot;
    uint32_t generation;
    DeviceGates gates;
  };
  std::vector<Release> releases;
  {
    std::lock_guard lock(mu_);
    if (ring_ == nullptr) return;
    std::array<ipc::HostFnEvent, 256> events;
    while (size_t n = ring_->TakeHostFnEvents(kToServer, events.data(), events.size())) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t slot = events[i].slot;
        if (slot >= slots_.size() || slots_[slot].state != SlotState::kReached) {
          PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                             "pid {}: host function slot {} returned without being reached; ignored", pid_,
                             slot);
          continue;
        }
        Slot& s = slots_[slot];
        s.state = SlotState::kReleasing;
        releases.push_back({slot, s.generation, devices_.at(s.device)});
      }
    }
  }
  if (releases.empty()) return;
  // Without the lock: a driver call may wait for the device, whose callbacks (OnReached) take it.
  for (const Release& r : releases) Open(r.gates, r.slot, r.generation);
  {
    std::lock_guard lock(mu_);
    for (const Release& r : releases) slots_[r.slot].state = SlotState::kFree;
  }
  slot_freed_.notify_all();
}

Result<HostFnGates::DeviceGates> HostFnGates::GatesOn(int device, CUcontext context) {
  {
    std::lock_guard lock(mu_);
    if (auto it = devices_.find(device); it != devices_.end()) return it->second;
  }
  DeviceGates g{.context = context};
  const size_t bytes = size_t{ipc::kMaxHostFnSlots} * sizeof(uint32_t);
  const driver::CuErrorText& text = driver_->error_text();
  PHOS_CU_RETURN_IF_ERROR(text, driver_->cuStreamCreate(&g.release, CU_STREAM_NON_BLOCKING));
  Status made = driver::CuStatus(driver_->cuMemAlloc(&g.words, bytes), "cuMemAlloc(gate words)", text);
  // Generation 0 is every slot's start: the first use of a slot waits for 1.
  if (made.ok())
    made = driver::CuStatus(driver_->cuMemsetD8Async(g.words, 0, bytes, g.release), "cuMemsetD8Async", text);
  if (made.ok())
    made = driver::CuStatus(driver_->cuStreamSynchronize(g.release), "cuStreamSynchronize", text);
  if (!made.ok()) {
    if (g.words != 0) driver_->cuMemFree(g.words);
    driver_->cuStreamDestroy(g.release);
    return made;
  }
  std::lock_guard lock(mu_);
  devices_[device] = g;
  return g;
}

void HostFnGates::ReleaseLoop() {
  while (!stop_.load()) {
    queue_ring_->WaitHostFnEvents(kToServer, kReleaseWaitMs);
    if (!stop_.load()) ReleaseReturned();
  }
}

bool HostFnGates::Open(const DeviceGates& gates, uint32_t slot, uint32_t generation) {
  driver::ContextScope scope(*driver_, gates.context);
  const CUdeviceptr word = gates.words + uint64_t{slot} * sizeof(uint32_t);
  CUresult r = driver_->cuStreamWriteValue32(gates.release, word, generation, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r == CUDA_SUCCESS) return true;
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: host function slot {}: its gate did not open: CUresult {}",
                     pid_, slot, static_cast<int>(r));
  return false;
}

void HostFnGates::OpenAll() {
  struct Pending {
    uint32_t slot;
    uint32_t generation;
    DeviceGates gates;
  };
  std::vector<Pending> open;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      // A slot the release thread is opening is left to it.
      if (s.state == SlotState::kFree || s.state == SlotState::kReleasing) continue;
      open.push_back({i, s.generation, devices_.at(s.device)});
      s.state = SlotState::kFree;
    }
  }
  slot_freed_.notify_all();
  if (open.empty()) return;
  PHOS_LOG(Info, "runtime", "pid {}: {} host functions still pending at the end; their streams go on", pid_,
           open.size());
  for (const Pending& p : open) Open(p.gates, p.slot, p.generation);
}

void HostFnGates::Close() {
  if (stop_.exchange(true)) return;
  if (release_thread_.joinable()) {
    queue_ring_->InterruptHostFnWait(kToServer);
    release_thread_.join();
  }
  OpenAll();
  std::map<int, DeviceGates> devices;
  {
    std::lock_guard lock(mu_);
    ring_ = nullptr;
    devices.swap(devices_);
  }
  // Every gated stream must be past its gate before the words go: the context's work, the
  // driver's callbacks included, is done when its synchronisation returns.
  for (auto& [device, g] : devices) {
    driver::ContextScope scope(*driver_, g.context);
    driver_->cuCtxSynchronize();
    driver_->cuStreamDestroy(g.release);
    driver_->cuMemFree(g.words);
  }
}

}  // namespace phos::runtime
