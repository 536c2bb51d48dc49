// phosd's HTTP API: binds the routes of docs/remoting.md to the instance manager.
#pragma once

#include <prometheus/registry.h>

#include <memory>

#include "phos/http/server.h"
#include "phos/runtime/instance_manager.h"

namespace phos::phosd {

// GET /metrics serves `metrics` (where the pools and the instance manager registered theirs) in
// the Prometheus text format; nullptr answers an empty page. `sessions` may be nullptr (POST
// /v1/sessions then answers 503). `manager` and `sessions` must outlive the server.
Status AddRoutes(http::Router* router, runtime::InstanceManager* manager, runtime::GpuSessions* sessions,
                 std::shared_ptr<prometheus::Registry> metrics = nullptr);

}  // namespace phos::phosd
