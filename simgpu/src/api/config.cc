#include "api/config.h"

#include <charconv>
#include <cstdlib>

#include <fmt/core.h>

namespace phos::sim {

bool ParseByteSize(std::string_view text, uint64_t* bytes) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value == 0) return false;
  std::string_view suffix(end, text.data() + text.size() - end);
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return false;
  }
  if (shift > 0 && value > (~0ull >> shift)) return false;
  *bytes = value << shift;
  return true;
}

namespace {

// A number's text in (0, 1e6], or [0, 1e6] with `zero_allowed`.
bool ParseAmount(const char* text, bool zero_allowed, double* out) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(zero_allowed ? value >= 0 : value > 0) || value > 1e6) return false;
  *out = value;
  return true;
}

}  // namespace

bool ConfigFromEnvironment(SimConfig* config, std::string* error) {
  SimConfig c;
  const char* profile = std::getenv("PHOS_SIMGPU_PROFILE");
  c.profile = FindProfile(profile ? profile : "a100-pcie4");
  if (c.profile == nullptr) {
    std::string names;
    for (const DeviceProfile* p : AllProfiles()) names += (names.empty() ? "" : ", ") + std::string(p->name);
    *error = fmt::format("PHOS_SIMGPU_PROFILE='{}' is not a known profile ({})", profile, names);
    return false;
  }
  if (const char* scale = std::getenv("PHOS_SIMGPU_TIME_SCALE")) {
    if (!ParseAmount(scale, /*zero_allowed=*/false, &c.time_scale)) {
      *error = fmt::format("PHOS_SIMGPU_TIME_SCALE='{}' is not a number in (0, 1e6]", scale);
      return false;
    }
  }
  if (const char* devices = std::getenv("PHOS_SIMGPU_DEVICES")) {
    std::string_view d(devices);
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), c.device_count);
    if (ec != std::errc() || end != d.data() + d.size() || c.device_count < 1 ||
        c.device_count > SimConfig::kMaxDevices) {
      *error = fmt::format("PHOS_SIMGPU_DEVICES='{}' is not a count from 1 to {}", devices, SimConfig::kMaxDevices);
      return false;
    }
  }
  if (const char* memory = std::getenv("PHOS_SIMGPU_MEMORY")) {
    if (!ParseByteSize(memory, &c.memory_bytes)) {
      *error = fmt::format("PHOS_SIMGPU_MEMORY='{}' is not a size such as 512M or 80G", memory);
      return false;
    }
  }
  if (const char* prefault = std::getenv("PHOS_SIMGPU_PREFAULT")) {
    if (!ParseByteSize(prefault, &c.prefault_bytes)) {
      *error = fmt::format("PHOS_SIMGPU_PREFAULT='{}' is not a size such as 512M or 8G", prefault);
      return false;
    }
  }
  if (const char* timeout = std::getenv("PHOS_SIMGPU_KERNEL_TIMEOUT")) {
    if (!ParseAmount(timeout, /*zero_allowed=*/true, &c.kernel_timeout_seconds)) {
      *error = fmt::format("PHOS_SIMGPU_KERNEL_TIMEOUT='{}' is not seconds in [0, 1e6]", timeout);
      return false;
    }
  }
  *config = c;
  return true;
}

std::string SimConfig::ToString() const {
  std::string text = fmt::format("profile {} x{} ({} MiB each), time scale {}", profile->name, device_count,
                                 device_memory() >> 20, time_scale);
  if (kernel_timeout_seconds > 0) text += fmt::format(", kernel watchdog {} s", kernel_timeout_seconds);
  return text;
}

}  // namespace phos::sim
