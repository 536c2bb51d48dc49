#include "events.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "errors.h"

namespace phos::phosd {

std::string EventJson(const runtime::InstanceEvent& event, int64_t time_ms) {
  return nlohmann::json{{"event", runtime::InstanceEventName(event.kind)},
                        {"function", event.function},
                        {"version", event.version},
                        {"instance", event.instance},
                        {"mode", runtime::RestoreModeName(event.mode)},
                        {"time_ms", time_ms}}
      .dump();
}

EventStream::~EventStream() { Close(); }

void EventStream::Subscribe(http::Responder out) {
  std::lock_guard lock(mu_);
  if (closed_) return out.Send(ErrorResponse(503, "phosd is shutting down"));
  http::Response head = http::Response::Text(200, "");
  head.content_type = "application/x-ndjson";
  if (!out.Begin(std::move(head))) return;
  // Said once the subscriber is listed: a client that waits for it misses no later event.
  out.Chunk(R"({"event":"subscribed"})" "\n");
  subscribers_.push_back(std::move(out));
}

void EventStream::Publish(const runtime::InstanceEvent& event) {
  {
    std::lock_guard lock(mu_);
    if (subscribers_.empty()) return;  // every instance start and end comes here: nothing to make
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string line = EventJson(event, now) + "\n";
  std::lock_guard lock(mu_);
  subscribers_.erase(std::remove_if(subscribers_.begin(), subscribers_.end(),
                                    [](const http::Responder& out) { return out.Gone(); }),
                     subscribers_.end());
  for (const http::Responder& out : subscribers_) out.Chunk(line);
}

void EventStream::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (const http::Responder& out : subscribers_) out.End();
  subscribers_.clear();
}

}  // namespace phos::phosd
