// Instance events over HTTP (GET /v1/events): each subscriber gets one JSON object per line for
// every InstanceEvent, as it happens, for as long as it listens.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "phos/http/server.h"
#include "phos/runtime/instance_manager.h"

namespace phos::phosd {

// {"event": "started"|"restored"|"evicted"|"ended", "function", "version", "instance", "mode",
// "time_ms"} (Unix time), without a line end.
std::string EventJson(const runtime::InstanceEvent& event, int64_t time_ms);

class EventStream {
 public:
  EventStream() = default;
  ~EventStream();  // Close()s
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // Sends `out`'s head and the line {"event": "subscribed"}, then every event published until the
  // client goes away (Responder::Gone) or the stream is closed. Answered 503 once closed.
  void Subscribe(http::Responder out);
  // To every subscriber; called from the instance manager's threads (InstanceManagerOptions::on_event).
  void Publish(const runtime::InstanceEvent& event);
  // Ends every subscriber's answer; later subscribers are refused.
  void Close();

 private:
  std::mutex mu_;
  bool closed_ = false;
  std::vector<http::Responder> subscribers_;
};

}  // namespace phos::phosd
