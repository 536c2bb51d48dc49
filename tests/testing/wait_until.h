// Waiting in tests for a state another thread or process brings about.
//
// A test never sleeps a fixed time and then asserts a state: on a loaded two-core host the other
// side may not have run yet. It polls the condition with a deadline instead. The deadline is not a
// measurement (no test asserts how long the wait took); it only bounds how long a broken build
// makes the test wait before it fails with a message rather than a ctest timeout.
#pragma once

#include <chrono>
#include <thread>

namespace phos::testing {

// Far beyond any scheduling delay of a loaded host, for what takes milliseconds on an idle one.
inline constexpr std::chrono::milliseconds kPatience = std::chrono::minutes(1);

// Polls `done` every millisecond until it returns true (returns true) or `timeout` passes
// (returns false).
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::milliseconds timeout = kPatience) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace phos::testing
