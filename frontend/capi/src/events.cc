// Watching instance events: GET /v1/events read on a thread of the watch's own, one JSON object per
// line handed to the caller as a phos_event; ended through ClientRequest::keep_going.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "client.h"

struct phos_watch {
  const phos_client* client = nullptr;
  phos_event_fn on_event = nullptr;
  void* user = nullptr;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool subscribed = false;  // phosd said {"event": "subscribed"}
  bool ended = false;       // the thread's request returned
  phos_status status = PHOS_OK;
  std::string error;  // why it ended, when it did so by itself
  std::string pending;  // a line's bytes not yet ended by '\n'
};

namespace phos::capi {
namespace {

// A line longer than any event: what phosd sends is not events, and is dropped.
constexpr size_t kMaxLineBytes = 64 * 1024;

// `j`'s field `key` if it has that type, else `otherwise`: a line of the wrong shape is no crash.
std::string Text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
template <typename Int>
Int Number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  if constexpr (std::is_unsigned_v<Int>) return it->is_number_unsigned() ? it->get<Int>() : 0;
  return it->get<Int>();
}

// The event of one line phosd sent; false for a line of another kind (subscribed, or one this
// version does not know).
bool ToEvent(const nlohmann::json& j, phos_event* e, std::string* function, std::string* mode) {
  static constexpr std::pair<const char*, phos_event_kind> kKinds[] = {{"started", PHOS_EVENT_STARTED},
                                                                       {"restored", PHOS_EVENT_RESTORED},
                                                                       {"evicted", PHOS_EVENT_EVICTED},
                                                                       {"ended", PHOS_EVENT_ENDED}};
  if (!j.is_object()) return false;
  const std::string kind = Text(j, "event");
  e->kind = phos_event_kind{};
  for (const auto& [name, value] : kKinds) {
    if (kind == name) e->kind = value;
  }
  if (e->kind == phos_event_kind{}) return false;
  *function = Text(j, "function");
  *mode = Text(j, "mode");
  e->struct_size = sizeof(phos_event);
  e->function = function->c_str();
  e->mode = mode->c_str();
  e->version = Number<uint64_t>(j, "version");
  e->instance = Number<uint64_t>(j, "instance");
  e->time_ms = Number<int64_t>(j, "time_ms");
  return true;
}

// Each whole line of `piece` (after what an earlier piece left) to the watcher.
void Take(phos_watch* w, std::string_view piece) {
  w->pending.append(piece);
  size_t start = 0;
  for (size_t end; (end = w->pending.find('\n', start)) != std::string::npos; start = end + 1) {
    nlohmann::json j = nlohmann::json::parse(w->pending.substr(start, end - start), nullptr, false);
    if (j.is_object() && Text(j, "event") == "subscribed") {
      std::lock_guard lock(w->mu);
      w->subscribed = true;
      w->cv.notify_all();
      continue;
    }
    phos_event e{};
    std::string function, mode;
    if (!w->stopping && ToEvent(j, &e, &function, &mode)) w->on_event(w->user, &e);
  }
  w->pending.erase(0, start);
  if (w->pending.size() > kMaxLineBytes) w->pending.clear();
}

void Run(phos_watch* w) {
  http::ClientRequest request{.url = "/v1/events"};
  request.on_body = [w](std::string_view piece) { Take(w, piece); };
  request.keep_going = [w] { return !w->stopping.load(); };
  http::ClientResponse answer;
  phos_status s = Call(*w->client, std::move(request), Route::kOther, "watch events", &answer);
  std::lock_guard lock(w->mu);
  w->ended = true;
  if (s == PHOS_OK && !w->stopping) {
    s = PHOS_UNAVAILABLE;
    w->error = "watch events: phosd ended the stream (it stopped)";
  } else if (s != PHOS_OK) {
    w->error = phos_last_error();
  }
  w->status = w->stopping ? PHOS_OK : s;
  w->cv.notify_all();
}

}  // namespace
}  // namespace phos::capi

using phos::capi::CheckNotNull;
using phos::capi::Fail;
using phos::capi::FailStatic;
using phos::capi::Guard;

extern "C" {

phos_status phos_watch_events(phos_client* client, phos_event_fn on_event, void* user, phos_watch** out) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(out, "phos_watch_events: out"); s != PHOS_OK) return s;
    *out = nullptr;
    if (phos_status s = CheckNotNull(client, "phos_watch_events: client"); s != PHOS_OK) return s;
    if (on_event == nullptr) return FailStatic(PHOS_INVALID_ARGUMENT, "phos_watch_events: on_event is NULL");
    auto w = std::make_unique<phos_watch>();
    w->client = client;
    w->on_event = on_event;
    w->user = user;
    w->thread = std::thread(phos::capi::Run, w.get());
    std::unique_lock lock(w->mu);
    w->cv.wait(lock, [&] { return w->subscribed || w->ended; });
    if (!w->subscribed) {
      const phos_status s = w->status;
      const std::string why = w->error;
      lock.unlock();
      w->thread.join();
      return Fail(s != PHOS_OK ? s : PHOS_UNAVAILABLE, why);
    }
    lock.unlock();
    *out = w.release();
    return PHOS_OK;
  });
}

phos_status phos_watch_stop(phos_watch* watch) {
  return Guard([&]() -> phos_status {
    if (watch == nullptr) return PHOS_OK;
    std::unique_ptr<phos_watch> w(watch);
    w->stopping = true;
    w->thread.join();
    if (w->status != PHOS_OK) return Fail(w->status, w->error);
    return PHOS_OK;
  });
}

}  // extern "C"
