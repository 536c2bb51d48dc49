// phosd's HTTP API: binds the routes of docs/remoting.md to the instance manager.
#pragma once

#include <functional>
#include <string>

#include "phos/http/server.h"
#include "phos/runtime/instance_manager.h"

namespace phos::phosd {

// Prometheus text exposition of the daemon's metrics, for GET /metrics.
using MetricsText = std::function<std::string()>;

// `sessions` may be nullptr (POST /v1/sessions then answers 503), `metrics` empty (GET /metrics
// then answers an empty page). All must outlive the server.
Status AddRoutes(http::Router* router, runtime::InstanceManager* manager, runtime::GpuSessions* sessions,
                 MetricsText metrics = {});

}  // namespace phos::phosd
