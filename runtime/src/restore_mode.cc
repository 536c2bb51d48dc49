#include "phos/runtime/restore_mode.h"

#include <array>
#include <utility>

namespace phos::runtime {
namespace {

constexpr std::array<std::pair<RestoreMode, const char*>, 8> kNames{{
    {RestoreMode::kAuto, "auto"},
    {RestoreMode::kColdBoot, "cold-boot"},
    {RestoreMode::kStopTheWorld, "stop-the-world"},
    {RestoreMode::kEager, "eager"},
    {RestoreMode::kNoPool, "no-pool"},
    {RestoreMode::kNoOrder, "no-order"},
    {RestoreMode::kPhos, "phos"},
    {RestoreMode::kWarm, "warm"},
}};

}  // namespace

const char* RestoreModeName(RestoreMode mode) {
  for (const auto& [m, name] : kNames) {
    if (m == mode) return name;
  }
  return "?";
}

std::optional<RestoreMode> ParseRestoreMode(std::string_view name) {
  for (const auto& [m, n] : kNames) {
    if (name == n) return m;
  }
  return std::nullopt;
}

}  // namespace phos::runtime
