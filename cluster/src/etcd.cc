#include "phos/cluster/etcd.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "phos/http/client.h"

namespace phos::cluster {
namespace {

using nlohmann::json;

// The largest answer (or watch message) read. etcd refuses requests above 1.5 MiB unless told
// otherwise, so a range answer this large is already far beyond what phos keeps in it; past it
// the peer is taken for broken rather than read into memory.
constexpr size_t kMaxAnswerBytes = size_t{64} << 20;
// The largest key plus value put: well above etcd's own limit, and small enough that its base64
// fits the int OpenSSL counts in.
constexpr size_t kMaxPutBytes = size_t{32} << 20;
// How deep a watch message may nest: etcd's nest about five levels; a stream nesting further is
// not etcd's.
constexpr size_t kMaxDepth = 64;

std::string Base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

bool IsBase64Digit(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

// The bytes `text` encodes (standard alphabet, padded, as Go's encoding/json writes []byte), or
// nullopt. EVP_DecodeBlock skips whitespace and counts padding as zero bytes, so the text is
// checked first and the padding taken off after.
std::optional<std::string> Unbase64(std::string_view text) {
  if (text.size() % 4 != 0 || text.size() > static_cast<size_t>(INT_MAX)) return std::nullopt;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '=') {
      if (i + 2 < text.size()) return std::nullopt;  // '=' only in the last two places
      ++padding;
    } else if (padding > 0 || !IsBase64Digit(text[i])) {
      return std::nullopt;
    }
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) < padding) return std::nullopt;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// The first key past every key that begins with `prefix` (its last byte below 0xff incremented,
// what follows dropped); "\0" when there is none, which etcd reads as "to the end".
std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}
// The range's start: the prefix, or "\0" (the smallest key) for every key: etcd refuses an empty key.
std::string PrefixStart(const std::string& prefix) { return prefix.empty() ? std::string(1, '\0') : prefix; }

// Text from an answer, fit for a message: at most 200 bytes, control and non-ASCII bytes as '?'.
std::string Printable(std::string_view text) {
  std::string out(text.substr(0, 200));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < ' ' || static_cast<unsigned char>(c) > '~') c = '?';
  }
  if (text.size() > 200) out += "...";
  return out;
}

Status Bad(const std::string& where, const std::string& what) {
  return Status::Corruption(where + ": " + what);
}

// A 64-bit field of `object`: proto3's JSON writes them as strings of digits, and leaves out those
// that are 0. A number is taken too; anything else is Corruption.
Result<int64_t> Int64Field(const json& object, const char* name, const std::string& where,
                           bool required = false) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return Bad(where, std::string("the answer lacks '") + name + "'");
    return int64_t{0};
  }
  if (it->is_number_integer() && (it->is_number_unsigned() ? it->get<uint64_t>() <= INT64_MAX : true)) {
    return it->get<int64_t>();
  }
  if (it->is_string()) {
    const std::string& text = it->get_ref<const std::string&>();
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return value;
  }
  return Bad(where, std::string("'") + name + "' is no 64-bit integer");
}

// A bytes field of `object` (base64); absent is empty (proto3 leaves empty bytes out).
Result<std::string> BytesField(const json& object, const char* name, const std::string& where,
                               bool required = false) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return Bad(where, std::string("the answer lacks '") + name + "'");
    return std::string();
  }
  if (!it->is_string()) return Bad(where, std::string("'") + name + "' is no string");
  std::optional<std::string> bytes = Unbase64(it->get_ref<const std::string&>());
  if (!bytes) return Bad(where, std::string("'") + name + "' is no base64");
  return std::move(*bytes);
}

Result<KeyValue> ParseKeyValue(const json& kv, const std::string& where) {
  if (!kv.is_object()) return Bad(where, "a key-value is no JSON object");
  KeyValue out;
  PHOS_ASSIGN_OR_RETURN(out.key, BytesField(kv, "key", where, true));
  PHOS_ASSIGN_OR_RETURN(out.value, BytesField(kv, "value", where));
  PHOS_ASSIGN_OR_RETURN(out.create_revision, Int64Field(kv, "create_revision", where));
  PHOS_ASSIGN_OR_RETURN(out.mod_revision, Int64Field(kv, "mod_revision", where));
  PHOS_ASSIGN_OR_RETURN(out.lease, Int64Field(kv, "lease", where));
  return out;
}

// The store's revision in an answer's header.
Result<int64_t> HeaderRevision(const json& answer, const std::string& where) {
  auto header = answer.find("header");
  if (header == answer.end() || !header->is_object()) return Bad(where, "the answer lacks its header");
  PHOS_ASSIGN_OR_RETURN(int64_t revision, Int64Field(*header, "revision", where, true));
  if (revision <= 0) return Bad(where, "the header's revision is not positive");
  return revision;
}

// etcd's errors are gRPC status codes; this is what each means to a phos caller. Those a caller
// may try again (elsewhere) are Unavailable.
StatusCode FromGrpcCode(int64_t code) {
  switch (code) {
    case 3: return StatusCode::kInvalidArgument;    // INVALID_ARGUMENT
    case 4: return StatusCode::kTimeout;            // DEADLINE_EXCEEDED
    case 5: return StatusCode::kNotFound;           // NOT_FOUND
    case 6: return StatusCode::kAlreadyExists;      // ALREADY_EXISTS
    case 11: return StatusCode::kInvalidArgument;   // OUT_OF_RANGE: a compacted or future revision
    case 12: return StatusCode::kNotSupported;      // UNIMPLEMENTED
    case 15: return StatusCode::kCorruption;        // DATA_LOSS
    case 1:                                         // CANCELLED
    case 2:                                         // UNKNOWN
    case 13:                                        // INTERNAL
    case 14: return StatusCode::kUnavailable;       // UNAVAILABLE: no leader, a member stopping
    default: return StatusCode::kFailedPrecondition;  // permission, quota, auth, and codes unknown
  }
}

// The error an answer carries: {"error": "...", "message": "...", "code": N} for a unary call,
// {"error": {"grpc_code": N, "message": "...", ...}} inside a stream. nullopt when it carries none.
std::optional<Status> ErrorIn(const json& answer, const std::string& where) {
  if (!answer.is_object()) return std::nullopt;
  auto error = answer.find("error");
  if (error == answer.end()) return std::nullopt;
  const json& fields = error->is_object() ? *error : answer;
  std::string message;
  if (auto m = fields.find("message"); m != fields.end() && m->is_string()) message = m->get<std::string>();
  if (message.empty() && error->is_string()) message = error->get<std::string>();
  if (message.empty()) message = "an error without a message";
  int64_t code = -1;
  for (const char* name : {"code", "grpc_code"}) {
    if (auto c = fields.find(name); c != fields.end() && c->is_number_integer()) code = c->get<int64_t>();
  }
  return Status(FromGrpcCode(code), where + ": " + Printable(message));
}

// What an answer other than 2xx means.
Status HttpError(int http_status, const std::string& body, const std::string& where) {
  const json answer = json::parse(body, nullptr, false);
  if (std::optional<Status> error = ErrorIn(answer, where)) return *error;
  // Not etcd's JSON: a proxy or something else on the port.
  const StatusCode code = http_status >= 500 ? StatusCode::kUnavailable : StatusCode::kFailedPrecondition;
  std::string message = where + ": HTTP " + std::to_string(http_status);
  if (!body.empty()) message += ": " + Printable(body);
  return Status(code, std::move(message));
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

struct Answer {
  json body;          // a JSON object
  std::string where;  // "etcd at <endpoint><path>", for messages
};

// Sends one request to the first endpoint that answers it: the next is tried when one is
// unreachable or answers Unavailable. A successful answer must be a JSON object.
Result<Answer> Call(const EtcdOptions& options, const std::string& method, const std::string& path,
                    const json& request, const std::function<bool()>& keep_going = nullptr) {
  std::vector<std::string> tried;
  const std::string body = request.is_null() ? "" : request.dump();
  for (const std::string& endpoint : options.endpoints) {
    const std::string where = "etcd at " + endpoint + path;
    http::ClientRequest fetch;
    fetch.method = method;
    fetch.url = endpoint + path;
    fetch.body = body;
    if (!body.empty()) fetch.headers.emplace_back("Content-Type", "application/json");
    fetch.timeout_ms = options.timeout_ms;
    std::string got;
    bool too_big = false;
    bool stopped = false;
    fetch.on_body = [&](std::string_view piece) {
      if (too_big || got.size() + piece.size() > kMaxAnswerBytes) {
        too_big = true;
      } else {
        got.append(piece);
      }
    };
    fetch.keep_going = [&] {
      if (too_big) return false;
      if (keep_going && !keep_going()) stopped = true;
      return !stopped;
    };
    Result<http::ClientResponse> answer = http::Fetch(fetch);
    if (too_big) return Bad(where, "the answer is larger than 64 MiB");
    if (stopped) return Status::Unavailable(where + ": stopped");
    if (!answer.ok()) {
      tried.push_back(answer.status().message());
      continue;
    }
    // An error answer is not given to on_body: it is bounded only once read.
    if (answer->body.size() > kMaxAnswerBytes) return Bad(where, "the answer is larger than 64 MiB");
    if (answer->status < 200 || answer->status >= 300) {
      Status error = HttpError(answer->status, answer->body, where);
      if (error.code() != StatusCode::kUnavailable) return error;
      tried.push_back(error.message());
      continue;
    }
    json parsed = json::parse(got, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) return Bad(where, "the answer is no JSON object");
    return Answer{std::move(parsed), where};
  }
  return Status::Unavailable("no etcd answered: " + Join(tried));
}

Status CheckKey(const std::string& key) {
  if (key.empty()) return Status::InvalidArgument("an etcd key may not be empty");
  return Status::Ok();
}
Status CheckSize(const std::string& key, const std::string& value) {
  if (key.size() + value.size() > kMaxPutBytes) {
    return Status::InvalidArgument("etcd put of '" + Printable(key) + "': more than 32 MiB");
  }
  return Status::Ok();
}

// Splits the watch stream into its messages. The gateway writes one JSON object per message, but
// a piece of the stream as it arrives may hold part of one, or several: the end of each top-level
// object is found by counting brackets outside strings, and only a complete object is parsed.
class ObjectSplitter {
 public:
  // Appends `piece` and gives `each` every object it completes, in order, up to the first error.
  Status Feed(std::string_view piece, const std::string& where,
              const std::function<Status(std::string_view)>& each) {
    if (buffer_.size() + piece.size() > kMaxAnswerBytes) {
      return Bad(where, "a watch message is larger than 64 MiB");
    }
    buffer_.append(piece);
    size_t start = 0;  // where the object being read begins: kept at 0 between pieces
    for (; scanned_ < buffer_.size(); ++scanned_) {
      const char c = buffer_[scanned_];
      if (depth_ == 0) {
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c != '{') return Bad(where, "the watch stream holds something other than JSON objects");
        start = scanned_;
        depth_ = 1;
      } else if (in_string_) {
        if (escaped_) {
          escaped_ = false;
        } else if (c == '\\') {
          escaped_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        if (++depth_ > kMaxDepth) return Bad(where, "a watch message nests too deep");
      } else if (c == '}' || c == ']') {
        if (--depth_ == 0) {
          PHOS_RETURN_IF_ERROR(each(std::string_view(buffer_).substr(start, scanned_ + 1 - start)));
          start = scanned_ + 1;
        }
      }
    }
    if (depth_ == 0) {
      buffer_.clear();
      scanned_ = 0;
    } else {
      buffer_.erase(0, start);
      scanned_ -= start;
    }
    return Status::Ok();
  }

 private:
  std::string buffer_;  // the object not yet complete (nothing between objects)
  size_t scanned_ = 0;  // bytes of buffer_ looked at
  size_t depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
};

// One watch message: its events checked whole, then given to on_event in order.
Status WatchMessage(std::string_view text, const std::string& where, const std::string& prefix,
                    const std::function<void(const KeyValue&, bool)>& on_event) {
  const json message = json::parse(text, nullptr, false);
  if (message.is_discarded() || !message.is_object()) return Bad(where, "a watch message is no JSON object");
  if (std::optional<Status> error = ErrorIn(message, where)) return *error;
  auto result = message.find("result");
  if (result == message.end() || !result->is_object()) return Bad(where, "a watch message lacks its result");
  if (auto canceled = result->find("canceled"); canceled != result->end()) {
    if (!canceled->is_boolean()) return Bad(where, "'canceled' is no boolean");
    if (canceled->get<bool>()) {
      std::string why = "etcd canceled the watch";
      if (auto reason = result->find("cancel_reason"); reason != result->end() && reason->is_string()) {
        why += ": " + Printable(reason->get<std::string>());
      }
      PHOS_ASSIGN_OR_RETURN(int64_t compacted, Int64Field(*result, "compact_revision", where));
      if (compacted > 0) why += " (revisions up to " + std::to_string(compacted) + " are compacted)";
      return Status::FailedPrecondition(where + ": " + why);
    }
  }
  auto events = result->find("events");
  if (events == result->end()) return Status::Ok();
  if (!events->is_array()) return Bad(where, "'events' is no array");
  std::vector<std::pair<KeyValue, bool>> changes;
  for (const json& event : *events) {
    if (!event.is_object()) return Bad(where, "an event is no JSON object");
    bool deleted = false;
    if (auto type = event.find("type"); type != event.end()) {
      // PUT is the enum's zero, which proto3 leaves out.
      if (!type->is_string() || (*type != "PUT" && *type != "DELETE")) {
        return Bad(where, "an event's type is unknown");
      }
      deleted = *type == "DELETE";
    }
    auto kv = event.find("kv");
    if (kv == event.end()) return Bad(where, "an event lacks its kv");
    PHOS_ASSIGN_OR_RETURN(KeyValue change, ParseKeyValue(*kv, where));
    if (change.key.compare(0, prefix.size(), prefix) != 0) {
      return Bad(where, "an event's key is outside the watched prefix");
    }
    changes.emplace_back(std::move(change), deleted);
  }
  for (const auto& [change, deleted] : changes) on_event(change, deleted);
  return Status::Ok();
}

}  // namespace

Result<Etcd> Etcd::Make(EtcdOptions options) {
  if (options.endpoints.empty()) {
    return Status::InvalidArgument("etcd: no endpoint (expected http://HOST:PORT)");
  }
  for (std::string& endpoint : options.endpoints) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("etcd endpoint '" + endpoint + "': " + why +
                                     " (expected http://HOST:PORT)");
    };
    if (endpoint.rfind("http://", 0) != 0) return bad("not an http:// URL");
    Result<http::Endpoint> parsed = http::ParseEndpoint(endpoint);
    if (!parsed.ok()) return bad(parsed.status().message());
    // ParseEndpoint takes a missing port for 80; etcd has no usual port over HTTP, so it is named.
    const std::string& url = parsed->base_url;
    const size_t colon = url.rfind(':');
    const size_t bracket = url.rfind(']');
    if (colon == std::string::npos || colon < std::string_view("http://").size() ||
        (bracket != std::string::npos && colon < bracket)) {
      return bad("no port");
    }
    endpoint = url;
  }
  return Etcd(std::move(options));
}

Status Etcd::Ping() const {
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "GET", "/version", json()));
  auto version = answer.body.find("etcdserver");
  if (version == answer.body.end() || !version->is_string()) {
    return Bad(answer.where, "the answer is not etcd's version");
  }
  return Status::Ok();
}

Result<int64_t> Etcd::Put(const std::string& key, const std::string& value, int64_t lease) const {
  PHOS_RETURN_IF_ERROR(CheckKey(key));
  PHOS_RETURN_IF_ERROR(CheckSize(key, value));
  json request = json::object();
  request["key"] = Base64(key);
  request["value"] = Base64(value);
  if (lease != 0) request["lease"] = std::to_string(lease);
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/kv/put", request));
  return HeaderRevision(answer.body, answer.where);
}

Result<std::optional<KeyValue>> Etcd::Get(const std::string& key) const {
  PHOS_RETURN_IF_ERROR(CheckKey(key));
  json request = json::object();
  request["key"] = Base64(key);
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/kv/range", request));
  auto kvs = answer.body.find("kvs");
  if (kvs == answer.body.end()) return std::optional<KeyValue>();
  if (!kvs->is_array()) return Bad(answer.where, "'kvs' is no array");
  if (kvs->empty()) return std::optional<KeyValue>();
  if (kvs->size() != 1) return Bad(answer.where, "several keys for one");
  PHOS_ASSIGN_OR_RETURN(KeyValue kv, ParseKeyValue(kvs->front(), answer.where));
  if (kv.key != key) return Bad(answer.where, "the answer is about another key");
  return std::optional<KeyValue>(std::move(kv));
}

Result<std::vector<KeyValue>> Etcd::List(const std::string& prefix, int64_t* revision) const {
  json request = json::object();
  request["key"] = Base64(PrefixStart(prefix));
  request["range_end"] = Base64(PrefixEnd(prefix));
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/kv/range", request));
  if (revision != nullptr) {
    PHOS_ASSIGN_OR_RETURN(*revision, HeaderRevision(answer.body, answer.where));
  }
  std::vector<KeyValue> out;
  auto kvs = answer.body.find("kvs");
  if (kvs == answer.body.end()) return out;
  if (!kvs->is_array()) return Bad(answer.where, "'kvs' is no array");
  out.reserve(kvs->size());
  for (const json& item : *kvs) {
    PHOS_ASSIGN_OR_RETURN(KeyValue kv, ParseKeyValue(item, answer.where));
    if (kv.key.compare(0, prefix.size(), prefix) != 0) return Bad(answer.where, "a key outside the prefix");
    out.push_back(std::move(kv));
  }
  // etcd answers in key order already; the order is the contract, so it is not left to the peer.
  std::sort(out.begin(), out.end(), [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
  return out;
}

Status Etcd::Delete(const std::string& key) const {
  PHOS_RETURN_IF_ERROR(CheckKey(key));
  json request = json::object();
  request["key"] = Base64(key);
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/kv/deleterange", request));
  return Int64Field(answer.body, "deleted", answer.where).status();
}

Result<bool> Etcd::PutIf(const std::string& key, const std::string& value, int64_t expected_mod_revision,
                         int64_t lease) const {
  PHOS_RETURN_IF_ERROR(CheckKey(key));
  if (expected_mod_revision < 0) return Status::InvalidArgument("etcd put-if: a negative revision");
  PHOS_RETURN_IF_ERROR(CheckSize(key, value));
  json compare = json::object();
  compare["target"] = "MOD";
  compare["result"] = "EQUAL";
  compare["key"] = Base64(key);
  compare["mod_revision"] = std::to_string(expected_mod_revision);
  json put = json::object();
  put["key"] = Base64(key);
  put["value"] = Base64(value);
  if (lease != 0) put["lease"] = std::to_string(lease);
  json operation = json::object();
  operation["request_put"] = std::move(put);
  json request = json::object();
  request["compare"] = json::array();
  request["compare"].push_back(std::move(compare));
  request["success"] = json::array();
  request["success"].push_back(std::move(operation));
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/kv/txn", request));
  PHOS_RETURN_IF_ERROR(HeaderRevision(answer.body, answer.where).status());
  auto succeeded = answer.body.find("succeeded");
  if (succeeded == answer.body.end()) return false;  // false is proto3's zero: left out
  if (!succeeded->is_boolean()) return Bad(answer.where, "'succeeded' is no boolean");
  return succeeded->get<bool>();
}

Result<int64_t> Etcd::GrantLease(int64_t ttl_seconds) const {
  if (ttl_seconds <= 0) return Status::InvalidArgument("etcd lease: the TTL must be positive");
  json request = json::object();
  request["TTL"] = std::to_string(ttl_seconds);
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/lease/grant", request));
  // LeaseGrantResponse has an error string of its own, beside the gateway's errors.
  if (auto error = answer.body.find("error"); error != answer.body.end()) {
    if (!error->is_string()) return Bad(answer.where, "'error' is no string");
    if (!error->get_ref<const std::string&>().empty()) {
      return Status::FailedPrecondition(answer.where + ": " + Printable(error->get<std::string>()));
    }
  }
  PHOS_ASSIGN_OR_RETURN(int64_t id, Int64Field(answer.body, "ID", answer.where, true));
  if (id == 0) return Bad(answer.where, "the lease's ID is 0");
  return id;
}

Status Etcd::KeepAlive(int64_t lease) const { return KeepAlive(lease, nullptr); }

Status Etcd::KeepAlive(int64_t lease, const std::function<bool()>& keep_going) const {
  json request = json::object();
  request["ID"] = std::to_string(lease);
  // A stream in gRPC: one answer to the one request, as {"result": ...}, or {"error": ...}.
  PHOS_ASSIGN_OR_RETURN(Answer answer, Call(options_, "POST", "/v3/lease/keepalive", request, keep_going));
  if (std::optional<Status> error = ErrorIn(answer.body, answer.where)) return *error;
  auto result = answer.body.find("result");
  if (result == answer.body.end() || !result->is_object()) {
    return Bad(answer.where, "the answer lacks its result");
  }
  PHOS_ASSIGN_OR_RETURN(int64_t id, Int64Field(*result, "ID", answer.where));
  if (id != lease) return Bad(answer.where, "the answer is about another lease");
  PHOS_ASSIGN_OR_RETURN(int64_t ttl, Int64Field(*result, "TTL", answer.where));
  // The gateway answers an unknown lease without a TTL (proto3 leaves 0 out).
  if (ttl <= 0) {
    return Status::NotFound(answer.where + ": lease " + std::to_string(lease) +
                            " has expired or was revoked");
  }
  return Status::Ok();
}

Status Etcd::Revoke(int64_t lease) const {
  json request = json::object();
  request["ID"] = std::to_string(lease);
  Result<Answer> answer = Call(options_, "POST", "/v3/lease/revoke", request);
  if (answer.status().code() == StatusCode::kNotFound) return Status::Ok();
  return answer.status();
}

Status Etcd::Watch(const std::string& prefix, int64_t start_revision,
                   const std::function<void(const KeyValue&, bool deleted)>& on_event,
                   const std::function<bool()>& keep_going) const {
  if (start_revision < 0) return Status::InvalidArgument("etcd watch: a negative start revision");
  json create = json::object();
  create["key"] = Base64(PrefixStart(prefix));
  create["range_end"] = Base64(PrefixEnd(prefix));
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  json request = json::object();
  request["create_request"] = std::move(create);
  const std::string body = request.dump();
  std::vector<std::string> tried;
  for (const std::string& endpoint : options_.endpoints) {
    const std::string where = "etcd at " + endpoint + "/v3/watch";
    http::ClientRequest fetch;
    fetch.method = "POST";
    fetch.url = endpoint + "/v3/watch";
    fetch.body = body;
    fetch.headers.emplace_back("Content-Type", "application/json");
    ObjectSplitter splitter;
    Status failed;
    bool received = false;
    bool stopped = false;
    fetch.on_body = [&](std::string_view piece) {
      if (!failed.ok()) return;
      received = true;
      failed = splitter.Feed(piece, where,
                             [&](std::string_view m) { return WatchMessage(m, where, prefix, on_event); });
    };
    fetch.keep_going = [&] {
      if (!failed.ok()) return false;
      if (!keep_going()) stopped = true;
      return !stopped;
    };
    Result<http::ClientResponse> answer = http::Fetch(fetch);
    if (!failed.ok()) return failed;
    if (stopped) return Status::Ok();
    if (!answer.ok()) {
      // Nothing came: this member is unreachable, the next may not be.
      if (!received) {
        tried.push_back(answer.status().message());
        continue;
      }
      return Status::Unavailable(where + ": the watch ended: " + answer.status().message());
    }
    if (answer->status < 200 || answer->status >= 300) {
      if (answer->body.size() > kMaxAnswerBytes) return Bad(where, "the answer is larger than 64 MiB");
      Status error = HttpError(answer->status, answer->body, where);
      if (error.code() != StatusCode::kUnavailable) return error;
      tried.push_back(error.message());
      continue;
    }
    return Status::Unavailable(where + ": the watch ended: etcd closed the stream");
  }
  return Status::Unavailable("no etcd answered: " + Join(tried));
}

namespace {

// A round that outlasts the TTL is of no use: the lease would have expired by its answer.
Etcd WithTimeoutWithin(Etcd etcd, std::chrono::milliseconds ttl) {
  EtcdOptions options = etcd.options();
  if (options.timeout_ms <= 0 || options.timeout_ms > ttl.count()) {
    options.timeout_ms = static_cast<long>(ttl.count());
  }
  Result<Etcd> bounded = Etcd::Make(std::move(options));
  return bounded.ok() ? std::move(bounded).value() : std::move(etcd);
}

}  // namespace

LeaseKeeper::LeaseKeeper(Etcd etcd, int64_t lease, int64_t ttl_seconds, std::function<void()> on_lost)
    : etcd_(WithTimeoutWithin(std::move(etcd), std::chrono::seconds(std::max<int64_t>(ttl_seconds, 1)))),
      lease_(lease),
      ttl_(std::chrono::seconds(std::max<int64_t>(ttl_seconds, 1))),
      on_lost_(std::move(on_lost)),
      thread_([this] { Run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (!lost_.load()) etcd_.Revoke(lease_).IgnoreError();  // it expires by itself otherwise
}

void LeaseKeeper::Run() {
  const auto period = ttl_ / 3;
  // The lease was granted (or refreshed) just before it was handed over.
  auto refreshed = std::chrono::steady_clock::now();
  auto still_wanted = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return !stopping_;
  };
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (wake_.wait_for(lock, period, [this] { return stopping_; })) return;
    lock.unlock();
    const auto sent = std::chrono::steady_clock::now();
    const Status kept = etcd_.KeepAlive(lease_, still_wanted);
    lock.lock();
    if (stopping_) return;
    if (kept.ok()) {
      refreshed = sent;
      rounds_.fetch_add(1);
      continue;
    }
    if (kept.code() == StatusCode::kNotFound || std::chrono::steady_clock::now() - refreshed >= ttl_) break;
  }
  lost_.store(true);
  lock.unlock();
  if (on_lost_) on_lost_();
}

}  // namespace phos::cluster
