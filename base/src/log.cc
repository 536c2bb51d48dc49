#include "phos/base/log.h"

#include <algorithm>
#include <cstdlib>
#include <forward_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "phos/base/strings.h"

namespace phos::log {
namespace {

struct Filter {
  Level level = Level::Info;
  bool exclude = false;               // true: the list names subsystems to hide
  std::vector<std::string> subsystems;  // empty and !exclude: show all
};

Filter MakeFilter(Level level, std::string_view subsys) {
  Filter f;
  f.level = level;
  if (!subsys.empty() && subsys.front() == '^') {
    f.exclude = true;
    subsys.remove_prefix(1);
  }
  for (std::string_view name : Split(subsys, ",", EmptyPieces::kSkip)) f.subsystems.emplace_back(name);
  return f;
}

std::mutex g_mu;
std::atomic<const Filter*> g_filter{nullptr};

// Every filter made so far, under g_mu: readers hold a filter without locks, so one replaced by
// Configure stays alive (and owned, not leaked) for the rest of the process. Never destroyed:
// logging may run during static destruction.
const Filter* KeepFilter(Filter filter) {
  static auto* filters = new std::forward_list<Filter>;
  filters->push_front(std::move(filter));
  return &filters->front();
}
std::shared_ptr<spdlog::logger> g_logger;

spdlog::logger* Logger() {
  static spdlog::logger* logger = [] {
    // Not registered in spdlog's global registry: every shared library that links phos-base
    // (phosd, libphos-simgpu.so, ...) has its own copy of this code, and a second registration
    // of the same name would throw.
    g_logger = std::make_shared<spdlog::logger>("phos", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    // [time] [level] [subsys] [file:line] message; the subsystem is part of the message.
    g_logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    g_logger->set_level(spdlog::level::trace);
    return g_logger.get();
  }();
  return logger;
}

const Filter* CurrentFilter() {
  const Filter* f = g_filter.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  std::lock_guard lock(g_mu);
  f = g_filter.load(std::memory_order_relaxed);
  if (f != nullptr) return f;
  Level level = Level::Info;
  if (const char* env = std::getenv("PHOS_LOG_LEVEL")) ParseLevel(env, &level);
  const char* subsys = std::getenv("PHOS_LOG_SUBSYS");
  f = KeepFilter(MakeFilter(level, subsys ? subsys : ""));
  g_filter.store(f, std::memory_order_release);
  return f;
}

spdlog::level::level_enum ToSpdlog(Level level) {
  switch (level) {
    case Level::Trace: return spdlog::level::trace;
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warn: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
    case Level::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::string_view Basename(const char* path) {
  std::string_view p(path);
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

}  // namespace

bool ParseLevel(std::string_view name, Level* level) {
  static constexpr std::pair<std::string_view, Level> kNames[] = {
      {"trace", Level::Trace}, {"debug", Level::Debug}, {"info", Level::Info},
      {"warn", Level::Warn},   {"error", Level::Error}, {"off", Level::Off}};
  for (const auto& [n, l] : kNames) {
    if (n == name) {
      *level = l;
      return true;
    }
  }
  return false;
}

void Configure(Level level, std::string_view subsys_filter) {
  std::lock_guard lock(g_mu);
  g_filter.store(KeepFilter(MakeFilter(level, subsys_filter)), std::memory_order_release);
}

bool Enabled(Level level, std::string_view subsys) {
  const Filter* f = CurrentFilter();
  if (level < f->level || level == Level::Off) return false;
  if (level >= Level::Warn || f->subsystems.empty()) return true;
  bool listed = false;
  for (const auto& s : f->subsystems) listed |= (s == subsys);
  return listed != f->exclude;
}

std::string EscapeControl(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      default:
        break;
    }
    if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

void Write(Level level, std::string_view subsys, const char* file, int line, std::string_view message) {
  const bool clean = std::none_of(message.begin(), message.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f || c == '\\';
  });
  if (clean) {
    Logger()->log(ToSpdlog(level), "[{}] [{}:{}] {}", subsys, Basename(file), line, message);
  } else {
    Logger()->log(ToSpdlog(level), "[{}] [{}:{}] {}", subsys, Basename(file), line, EscapeControl(message));
  }
}

bool RateLimiter::Admit(std::chrono::seconds period) {
  long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count();
  long long next = next_ns_.load(std::memory_order_relaxed);
  if (now < next) return false;
  long long period_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();
  return next_ns_.compare_exchange_strong(next, now + period_ns, std::memory_order_relaxed);
}

}  // namespace phos::log
