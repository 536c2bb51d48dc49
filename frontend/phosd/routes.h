// phosd's HTTP API: binds the routes of docs/remoting.md to the instance manager, each with the
// access it asks of its caller (access.h).
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <memory>

#include "access.h"
#include "cluster_node.h"
#include "events.h"
#include "executables.h"
#include "logs.h"
#include "phos/base/task_threads.h"
#include "phos/http/server.h"
#include "phos/runtime/instance_manager.h"
#include "phos/store/store.h"

namespace phos::phosd {

struct RouteOptions {
  // Required; must outlive the server.
  runtime::InstanceManager* manager = nullptr;
  // POST /v1/sessions answers 503 without them. Default: nullptr.
  runtime::GpuSessions* sessions = nullptr;
  // This node's snapshot store, where moves to another node read the snapshots they send and
  // moves from one import theirs, and the threads that run the routes' disk work (chunks written,
  // snapshots committed, logs read) off the server's loop. The import routes answer 503 without
  // both, the logs route without the threads. Must outlive the server. Default: nullptr.
  store::Store* store = nullptr;
  TaskThreads* blocking_work = nullptr;
  // Where followed logs stream from (GET /v1/functions/{name}/logs?follow=1; 503 without). Must
  // outlive the server; destroyed before the instance manager. Default: nullptr.
  LogFollowers* log_followers = nullptr;
  // Where GET /v1/events subscribes (503 without). Must outlive the server. Default: nullptr.
  EventStream* events = nullptr;
  // Who may call what. Required; must outlive the server.
  const AccessPolicy* access = nullptr;
  // The executables deploys may name, and the artifact store. Required; must outlive the server.
  const Executables* executables = nullptr;
  // The cluster this node is part of: invocations of a function another node deployed adopt it
  // first, removals and deploys consult its registry, GET /v1/cluster/nodes lists it (503
  // without). Must outlive the server. Default: nullptr, no cluster.
  ClusterNode* cluster = nullptr;
  // Served by GET /metrics (where the pools and the instance manager registered theirs) in the
  // Prometheus text format; nullptr answers an empty page. Default: nullptr.
  std::shared_ptr<prometheus::Registry> metrics;
  // Called before each GET /metrics is serialized, for the counters read at scrape time (simgpu's).
  // Default: none.
  std::function<void()> refresh_metrics;
  // GET /healthz answers 503 until it holds true: the server listens before the daemon has joined
  // its cluster (which needs the port), and a node is not ready before the others can see it.
  // Must outlive the server. Default: nullptr, ready as soon as it listens.
  const std::atomic<bool>* ready = nullptr;
};

Status AddRoutes(http::Router* router, RouteOptions options);

}  // namespace phos::phosd
