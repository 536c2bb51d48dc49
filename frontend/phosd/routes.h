// phosd's HTTP API: binds the routes of docs/remoting.md to the instance manager.
#pragma once

#include "phos/http/server.h"
#include "phos/runtime/instance_manager.h"

namespace phos::phosd {

// `sessions` may be nullptr (POST /v1/sessions then answers 503). Both must outlive the server.
Status AddRoutes(http::Router* router, runtime::InstanceManager* manager, runtime::GpuSessions* sessions);

}  // namespace phos::phosd
