// Levelled logging with [file:line] and a subsystem filter.
//
//   PHOS_LOG(Info, "simgpu", "device {} ready: {} GiB", ordinal, gib);
//   PHOS_LOG_EVERY_SEC(Warn, "runtime", 5, "launch {} waited on absent buffers", name);
//
// Environment (read once, at the first log call):
//   PHOS_LOG_LEVEL   trace|debug|info|warn|error|off.            Default: info.
//   PHOS_LOG_SUBSYS  comma-separated subsystems to show ("simgpu,store"), or a list prefixed
//                    with '^' to show all but those ("^simgpu"). Default: all.
// Messages at warn and above are shown whatever the subsystem filter says.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace phos::log {

enum class Level { Trace = 0, Debug, Info, Warn, Error, Off };

// True when a message at `level` for `subsys` would be written.
bool Enabled(Level level, std::string_view subsys);
// Writes one line: "[time] [level] [subsys] [file:line] message". Control characters in the
// message are escaped (EscapeControl): messages carry strings a function process sent (kernel
// names, errors), and a newline among them must not forge a log line.
void Write(Level level, std::string_view subsys, const char* file, int line, std::string_view message);
// `text` with every byte below 0x20 and 0x7f spelled out ("\\n", "\\t", "\\x01"), and backslashes
// doubled so that an escape cannot be forged either; other bytes unchanged.
std::string EscapeControl(std::string_view text);
// Overrides the environment (tests, daemons with flags). Subsystem syntax as PHOS_LOG_SUBSYS.
void Configure(Level level, std::string_view subsys_filter);
// Parses "info", "warn", ... Returns false for an unknown name.
bool ParseLevel(std::string_view name, Level* level);

// Admits one event per `period` from many threads; used by PHOS_LOG_EVERY_SEC.
class RateLimiter {
 public:
  bool Admit(std::chrono::seconds period);
 private:
  std::atomic<long long> next_ns_{0};
};

}  // namespace phos::log

#define PHOS_LOG(level, subsys, ...)                                                   \
  do {                                                                                 \
    if (::phos::log::Enabled(::phos::log::Level::level, subsys)) {                     \
      ::phos::log::Write(::phos::log::Level::level, subsys, __FILE__, __LINE__,        \
                         ::fmt::format(__VA_ARGS__));                                  \
    }                                                                                  \
  } while (0)

// At most one message per `period_s` seconds from this call site (hot paths).
#define PHOS_LOG_EVERY_SEC(level, subsys, period_s, ...)                               \
  do {                                                                                 \
    static ::phos::log::RateLimiter phos_log_limiter_;                                 \
    if (::phos::log::Enabled(::phos::log::Level::level, subsys) &&                     \
        phos_log_limiter_.Admit(std::chrono::seconds(period_s))) {                     \
      ::phos::log::Write(::phos::log::Level::level, subsys, __FILE__, __LINE__,        \
                         ::fmt::format(__VA_ARGS__));                                  \
    }                                                                                  \
  } while (0)
