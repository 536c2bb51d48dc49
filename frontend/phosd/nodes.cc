#include "nodes.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "phos/http/client.h"
#include "phos/http/server.h"
#include "phos/store/manifest.h"

namespace phos::phosd {
namespace {

using runtime::InvokeOutcome;

// A non-2xx answer as a status: the other node refused (4xx: FailedPrecondition, its reason) or
// failed (5xx: Unavailable).
Status AnswerStatus(const std::string& what, const http::ClientResponse& r) {
  std::string message = fmt::format("{}: answered {}: {}", what, r.status, http::ParseErrorBody(r.body).message);
  return r.status >= 400 && r.status < 500 ? Status::FailedPrecondition(std::move(message))
                                           : Status::Unavailable(std::move(message));
}

}  // namespace

Result<std::shared_ptr<HttpPeer>> HttpPeer::Make(std::string endpoint, std::string token, store::Store* store) {
  // The one endpoint parser (phos-fn's and the C API's); another node is reached over TCP only.
  Result<http::Endpoint> parsed = http::ParseEndpoint(endpoint);
  if (!parsed.ok() || !parsed->unix_socket.empty()) {
    return Status::InvalidArgument("a node is named by its endpoint, http://HOST:PORT; not '" + endpoint + "'");
  }
  endpoint = parsed->base_url;  // a trailing slash dropped
  if (token.empty()) return Status::InvalidArgument("the other node's admin token is needed to move an instance there");
  return std::shared_ptr<HttpPeer>(new HttpPeer(std::move(endpoint), std::move(token), store));
}

Result<runtime::PeerNode::Received> HttpPeer::SendSnapshot(const std::string& function, uint64_t version,
                                                           int va_slot) {
  // A chunk the receiver held when asked may be collected before its commit (412): once more.
  Result<Received> sent = SendSnapshotOnce(function, version, va_slot);
  if (!sent.ok() && sent.status().message().find("answered 412") != std::string::npos) {
    sent = SendSnapshotOnce(function, version, va_slot);
  }
  return sent;
}

Result<runtime::PeerNode::Received> HttpPeer::SendSnapshotOnce(const std::string& function, uint64_t version,
                                                               int va_slot) {
  PHOS_ASSIGN_OR_RETURN(store::Manifest manifest, store_->LoadManifest(function, version));
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer " + token_}};
  bool answered = false;  // the last call got an HTTP answer (whatever its status)
  auto fetch = [&](http::ClientRequest request, const std::string& what) -> Result<http::ClientResponse> {
    request.headers.insert(request.headers.end(), auth.begin(), auth.end());
    // A node that stops answering fails the move rather than holding the instance (and phosd's
    // shutdown, which waits for it) for ever.
    if (request.timeout_ms == 0) request.timeout_ms = kPeerCallTimeoutMs;
    Result<http::ClientResponse> r = http::Fetch(request);
    answered = r.ok();
    if (!r.ok()) return r.status().WithContext(what + " at " + endpoint_);
    if (r->status < 200 || r->status >= 300) return AnswerStatus(what + " at " + endpoint_, *r);
    return r;
  };
  const std::vector<store::ChunkRef> refs = store::ChunksOf(manifest);
  // Those the other node lacks (it deployed the same function: the weights it holds already).
  std::unordered_set<store::ChunkId, store::ChunkIdHash> missing;
  for (size_t at = 0; at < refs.size(); at += kMaxChunksAskedAtOnce) {
    nlohmann::json asked = nlohmann::json::array();
    std::unordered_set<store::ChunkId, store::ChunkIdHash> batch;
    for (size_t i = at; i < std::min(refs.size(), at + kMaxChunksAskedAtOnce); ++i) {
      asked.push_back(refs[i].id.ToHex());
      batch.insert(refs[i].id);
    }
    PHOS_ASSIGN_OR_RETURN(http::ClientResponse r,
                          fetch({.method = "POST", .url = endpoint_ + "/v1/chunks/missing",
                                 .body = nlohmann::json{{"chunks", asked}}.dump(),
                                 .headers = {{"Content-Type", "application/json"}}},
                                "ask which chunks are missing"));
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("missing") || !j["missing"].is_array()) {
      return Status::Unavailable("ask which chunks are missing at " + endpoint_ + ": unexpected answer");
    }
    for (const nlohmann::json& hex : j["missing"]) {
      Result<store::ChunkId> id = hex.is_string() ? store::ChunkId::FromHex(hex.get<std::string>())
                                                  : Result<store::ChunkId>(Status::InvalidArgument("not a string"));
      // Only what was asked: an answer naming other chunks would make this node send them.
      if (id.ok() && batch.count(*id) != 0) missing.insert(*id);
    }
  }
  Received received;
  std::string bytes;
  for (const store::ChunkRef& ref : refs) {
    if (missing.count(ref.id) == 0) continue;
    bytes.resize(ref.size);
    PHOS_RETURN_IF_ERROR(store_->ReadChunk(ref, bytes.data()));
    PHOS_RETURN_IF_ERROR(fetch({.method = "PUT", .url = endpoint_ + "/v1/chunks/" + ref.id.ToHex(), .body = bytes,
                                .headers = {{"Content-Type", "application/octet-stream"}}},
                               "send chunk " + ref.id.ToHex())
                             .status());
    ++received.sent_chunks;
    received.sent_bytes += ref.size;
  }
  // The other node restores an instance from it before it answers. No answer at all (the
  // connection lost, the time up) leaves unknown whether it did: said apart (Timeout), since the
  // instance must then not serve on here as well.
  Result<http::ClientResponse> restored =
      fetch({.method = "POST",
             .url = fmt::format("{}/v1/functions/{}/ranges/{}/snapshot", endpoint_, function, va_slot),
             .body = store::EncodeManifest(manifest),
             .headers = {{"Content-Type", "application/octet-stream"}},
             .timeout_ms = kPeerRestoreTimeoutMs},
            "restore '" + function + "' from the snapshot");
  if (!restored.ok() && !answered) {
    return Status::Timeout(restored.status().message() +
                           " (whether it restored the instance there is unknown: check it)");
  }
  PHOS_ASSIGN_OR_RETURN(http::ClientResponse r, std::move(restored));
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("version") || !j["version"].is_number_unsigned() || !j.contains("instance") ||
      !j["instance"].is_number_unsigned()) {
    return Status::Unavailable("restore '" + function + "' at " + endpoint_ + ": unexpected answer: " + r.body);
  }
  received.version = j["version"].get<uint64_t>();
  received.instance = j["instance"].get<uint64_t>();
  return received;
}

void HttpPeer::Invoke(const std::string& function, runtime::InvokeCall call, std::function<void(InvokeOutcome)> done) {
  if (pending_.fetch_add(1) >= kMaxForwardsPending) {
    pending_.fetch_sub(1);
    InvokeOutcome full;
    full.kind = InvokeOutcome::Kind::kOverloaded;
    full.error = Status::Unavailable(fmt::format("'{}' moved to {}, and {} invocations wait to be forwarded there",
                                                 function, endpoint_, kMaxForwardsPending));
    return done(std::move(full));
  }
  // The deadline is the invocation's: what is left of it when a forwarding thread takes it up.
  const auto deadline = std::chrono::steady_clock::now() + call.timeout;
  forwarding_.Post([this, function, request = std::move(call.request), id = std::move(call.request_id), deadline,
                    done = std::move(done)] {
    struct Taken {
      std::atomic<int>& pending;
      ~Taken() { pending.fetch_sub(1); }
    } taken{pending_};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      InvokeOutcome late;
      late.kind = InvokeOutcome::Kind::kTimeout;
      late.error = Status::Timeout("the deadline passed while the request waited to be forwarded");
      return done(std::move(late));
    }
    http::ClientRequest forwarded{.method = "POST",
                                  .url = endpoint_ + "/v1/functions/" + function + "/invoke",
                                  .body = request,
                                  .headers = {{"Authorization", "Bearer " + token_},
                                              {"X-Phos-Timeout-Ms", std::to_string(left.count())}},
                                  // The other node answers by the deadline; a little more for the way back.
                                  .timeout_ms = static_cast<long>(left.count()) + 5000};
    // The same request id there: the client's trace goes on, and the function sees it.
    if (!id.empty()) forwarded.headers.emplace_back("X-Request-Id", id);
    Result<http::ClientResponse> r = http::Fetch(forwarded);
    if (!r.ok()) {
      InvokeOutcome lost;
      lost.kind = InvokeOutcome::Kind::kInstanceLost;
      lost.error = Status::Unavailable(fmt::format("'{}' moved to {}, which did not answer: {}", function, endpoint_,
                                                   r.status().message()));
      return done(std::move(lost));
    }
    done(OutcomeOfInvokeAnswer(r->status, r->body));
  });
}

InvokeOutcome OutcomeOfInvokeAnswer(int status, const std::string& body) {
  InvokeOutcome o;
  if (status == 200) {
    o.body = body;
    return o;
  }
  const http::ErrorBody error = http::ParseErrorBody(body);
  const std::string& message = error.message;
  switch (status) {
    case 400:
      o.kind = InvokeOutcome::Kind::kFunctionError;
      o.error = Status::InvalidArgument(message);
      break;
    case 500:
      if (error.code == "function_error" || error.code.empty()) {  // empty: a phosd from before the codes
        o.kind = InvokeOutcome::Kind::kFunctionError;
        o.error = Status::Internal(message);
        break;
      }
      o.kind = InvokeOutcome::Kind::kInstanceLost;
      o.error = Status::Unavailable(fmt::format("answered 500: {}", message));
      break;
    case 404:
      o.kind = InvokeOutcome::Kind::kUnknownFunction;
      o.error = Status::NotFound(message);
      break;
    case 503:
      o.kind = InvokeOutcome::Kind::kStopping;
      o.error = Status::Unavailable(message);
      break;
    case 429:
      o.kind = InvokeOutcome::Kind::kOverloaded;
      o.error = Status::Unavailable(message);
      break;
    case 504:
      o.kind = InvokeOutcome::Kind::kTimeout;
      o.error = Status::Timeout(message);
      break;
    default:  // 502, and whatever else it said (a refused credential: 401, 403)
      o.kind = InvokeOutcome::Kind::kInstanceLost;
      o.error = Status::Unavailable(fmt::format("answered {}: {}", status, message));
  }
  return o;
}

}  // namespace phos::phosd
