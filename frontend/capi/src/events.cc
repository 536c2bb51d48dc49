// Watching instance events: GET /v1/events read on a thread of the watch's own, one JSON object per
// line handed to the caller as a phos_event; ended through ClientRequest::keep_going.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

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

// The event of one line phosd sent; false for a line of another kind (subscribed, or one this
// version does not know).
bool ToEvent(const nlohmann::json& j, phos_event* e, std::string* function, std::string* mode) {
  static constexpr std::pair<const char*, phos_event_kind> kKinds[] = {{"started", PHOS_EVENT_STARTED},
                                                                       {"restored", PHOS_EVENT_RESTORED},
                                                                       {"evicted", PHOS_EVENT_EVICTED},
                                                                       {"ended", PHOS_EVENT_ENDED}};
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) return false;
  const std::string kind = j["event"].get<std::string>();
  e->kind = phos_event_kind{};
  for (const auto& [name, value] : kKinds) {
    if (kind == name) e->kind = value;
  }
  if (e->kind == phos_event_kind{}) return false;
  *function = j.value("function", "");
  *mode = j.value("mode", "");
  e->struct_size = sizeof(phos_event);
  e->function = function->c_str();
  e->mode = mode->c_str();
  e->version = j.value("version", uint64_t{0});
  e->instance = j.value("instance", uint64_t{0});
  e->time_ms = j.value("time_ms", int64_t{0});
  return true;
}

// Each whole line of `piece` (after what an earlier piece left) to the watcher.
void Take(phos_watch* w, std::string_view piece) {
  w->pending.append(piece);
  size_t start = 0;
  for (size_t end; (end = w->pending.find('\n', start)) != std::string::npos; start = end + 1) {
    nlohmann::json j = nlohmann::json::parse(w->pending.substr(start, end - start), nullptr, false);
    if (j.is_object() && j.value("event", "") == "subscribed") {
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
