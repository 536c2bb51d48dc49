// The process's one guard handler, dispatching simgpu's guard faults to the client whose ranges
// hold the address (guard_clients.h).
#include "guard_clients.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "phos/base/log.h"
#include "phos/driver/cuda_check.h"

namespace phos::runtime {
namespace {

// simgpu has one handler slot; clients come and go.
struct ClientRegistry {
  std::mutex mu;  // held while a handler runs, so a client is never destroyed under it
  std::vector<GuardClient*> clients;
};
ClientRegistry& Registry() {
  static auto* registry = new ClientRegistry();  // never destroyed: the guard thread outlives main
  return *registry;
}

PhosSimGuardDecision OnGuardFault(void* /*user*/, CUdeviceptr address, const char* what) {
  ClientRegistry& r = Registry();
  std::lock_guard lock(r.mu);
  for (GuardClient* client : r.clients) {
    if (client->Owns(address)) return client->OnFault(address, what);
  }
  PHOS_LOG_EVERY_SEC(Warn, "restore", 1, "guard fault at {:#x} by {} outside every guarded buffer", address, what);
  return PHOS_SIM_GUARD_FAIL;
}

}  // namespace

Status RegisterGuardClient(driver::DriverTable& driver, GuardClient* client) {
  ClientRegistry& r = Registry();
  std::lock_guard lock(r.mu);
  // Idempotent; set again by each client in case something else replaced the process's handler.
  PHOS_RETURN_IF_ERROR(driver::CuStatus(driver.phosSimSetGuardHandler(OnGuardFault, nullptr), "phosSimSetGuardHandler",
                                        driver.error_text()));
  r.clients.push_back(client);
  return Status::Ok();
}

void UnregisterGuardClient(GuardClient* client) {
  ClientRegistry& r = Registry();
  std::lock_guard lock(r.mu);
  r.clients.erase(std::remove(r.clients.begin(), r.clients.end(), client), r.clients.end());
}

}  // namespace phos::runtime
