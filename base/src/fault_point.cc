#include "phos/base/fault_point.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "phos/base/log.h"

namespace phos {

#ifdef PHOS_FAULT_POINTS
void FaultPoint(std::string_view name) {
  static const std::string pause_at = [] {
    const char* value = std::getenv("PHOS_FAULT_PAUSE_AT");
    return std::string(value != nullptr ? value : "");
  }();
  static std::atomic<bool> paused{false};
  if (pause_at.empty() || name != pause_at || paused.exchange(true)) return;
  PHOS_LOG(Warn, "fault", "paused at fault point '{}' until killed", name);
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}
#endif

}  // namespace phos
