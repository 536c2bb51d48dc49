// How an invocation's instance is brought up (issue 6): the restore modes, selectable per
// invocation for tests and benchmarks (`phos-fn invoke --restore-mode`, `X-Phos-Restore-Mode`).
#pragma once

#include <optional>
#include <string_view>

namespace phos::runtime {

enum class RestoreMode {
  kAuto,          // phosd chooses: an idle warm instance, else kPhos
  kColdBoot,      // a new process started from scratch on a fresh context, no snapshot
  kStopTheWorld,  // fresh context, every buffer copied, then the CPU side resumes
  kEager,         // pooled context, every buffer copied, then the CPU side resumes: the baseline of
                  // a warm helper with a fast loader (docs/design.md, "The bound")
  kNoPool,        // concurrent restore into a fresh context
  kNoOrder,       // concurrent restore, background loading in address order
  kPhos,          // concurrent restore into a pooled context, first-touch order
  kWarm,          // an idle warm instance (kPhos when the function has none at all)
};

// "auto", "cold-boot", "stop-the-world", "eager", "no-pool", "no-order", "phos", "warm".
const char* RestoreModeName(RestoreMode mode);
// The mode named `name`; nullopt for anything else.
std::optional<RestoreMode> ParseRestoreMode(std::string_view name);

}  // namespace phos::runtime
