#include "phos/objstore/s3.h"

#include <curl/curl.h>
#include <libxml/parser.h>
#include <openssl/evp.h>
#include <libxml/tree.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

#include <fmt/core.h>

namespace phos::objstore {
namespace {

struct BodySink {
  std::string* body;
  uint64_t most;
  bool overflowed = false;
};
// Past `most` bytes the transfer ends (curl's write error): an answer bigger than anything phos
// stores is not read into memory.
size_t Append(char* data, size_t size, size_t count, void* out) {
  auto* sink = static_cast<BodySink*>(out);
  if (sink->body->size() + size * count > sink->most) {
    sink->overflowed = true;
    return 0;
  }
  sink->body->append(data, size * count);
  return size * count;
}

size_t HeaderLine(char* data, size_t size, size_t count, void* out) {
  std::string_view line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos && line.rfind("HTTP/", 0) != 0) {
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    static_cast<SignedResponse*>(out)->headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  }
  return size * count;
}

// The text of `node`'s first child element named `name`; empty when it has none.
std::string ChildText(xmlNode* node, const char* name) {
  for (xmlNode* c = node != nullptr ? node->children : nullptr; c != nullptr; c = c->next) {
    if (c->type == XML_ELEMENT_NODE && xmlStrcmp(c->name, reinterpret_cast<const xmlChar*>(name)) == 0) {
      std::unique_ptr<xmlChar, decltype(xmlFree)> text(xmlNodeGetContent(c), xmlFree);
      return text != nullptr ? reinterpret_cast<const char*>(text.get()) : "";
    }
  }
  return "";
}

using XmlDoc = std::unique_ptr<xmlDoc, decltype(&xmlFreeDoc)>;
// An answer's XML (no network access, no entities expanded); null when it is not XML.
XmlDoc ParseXml(const std::string& body) {
  if (body.size() > static_cast<size_t>(INT32_MAX)) return XmlDoc(nullptr, xmlFreeDoc);
  return XmlDoc(xmlReadMemory(body.data(), static_cast<int>(body.size()), "answer.xml", nullptr,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING),
                xmlFreeDoc);
}

// "[profile]" sections of an INI file: the keys of `profile`.
Result<Credentials> FromFile(const std::string& path, const std::string& profile) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no credentials file " + path);
  Credentials c;
  std::string line, section;
  bool found = false;
  auto trim = [](std::string s) {
    const size_t b = s.find_first_not_of(" \t\r");
    const size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      found = found || section == profile;
      continue;
    }
    const size_t eq = line.find('=');
    if (section != profile || eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (!found) return Status::NotFound(path + " has no profile [" + profile + "]");
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return Status::InvalidArgument(path + ": profile [" + profile + "] lacks aws_access_key_id or aws_secret_access_key");
  }
  return c;
}

// Lowercase hex SHA-256 of `bytes`: S3's X-Amz-Content-Sha256.
std::string PayloadSha256(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

}  // namespace

std::string UriEncode(const std::string& text, bool keep_slash) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Result<Credentials> FindCredentials(const std::string& file) {
  const char* id = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  if (id != nullptr && secret != nullptr && *id != '\0' && *secret != '\0') {
    const char* token = std::getenv("AWS_SESSION_TOKEN");
    return Credentials{id, secret, token != nullptr ? token : ""};
  }
  std::string path = file;
  if (path.empty()) {
    if (const char* shared = std::getenv("AWS_SHARED_CREDENTIALS_FILE"); shared != nullptr && *shared != '\0') {
      path = shared;
    } else if (const char* home = std::getenv("HOME"); home != nullptr) {
      path = std::string(home) + "/.aws/credentials";
    }
  }
  const char* profile = std::getenv("AWS_PROFILE");
  Result<Credentials> found = FromFile(path, profile != nullptr && *profile != '\0' ? profile : "default");
  if (found.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give a "
                            "credentials file (" + found.status().message() + ")");
  }
  return found;
}

Result<SignedResponse> SignedFetch(const SignedRequest& request, const Credentials& credentials) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (curl == nullptr) return Status::Internal("curl_easy_init failed");
  CURL* c = curl.get();
  curl_slist* raw = nullptr;
  for (const auto& [k, v] : request.headers) raw = curl_slist_append(raw, (k + ": " + v).c_str());
  if (!credentials.session_token.empty()) {
    raw = curl_slist_append(raw, ("X-Amz-Security-Token: " + credentials.session_token).c_str());
  }
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(raw, curl_slist_free_all);
  curl_slist* resolve = request.connect_to.empty() ? nullptr : curl_slist_append(nullptr, request.connect_to.c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> connect_to(resolve, curl_slist_free_all);
  SignedResponse response;
  const std::string sigv4 = "aws:amz:" + request.region + ":" + request.service;
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERNAME, credentials.access_key_id.c_str());
  curl_easy_setopt(c, CURLOPT_PASSWORD, credentials.secret_access_key.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (connect_to != nullptr) curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect_to.get());
  BodySink sink{&response.body, request.max_body_bytes};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, HeaderLine);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response);
  if (request.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT" || request.method == "POST") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  if (request.timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, request.timeout_ms);
  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_WRITE_ERROR && sink.overflowed) {
    return Status::Corruption(fmt::format("{} {}: the answer is larger than {} bytes", request.method, request.url,
                                          request.max_body_bytes));
  }
  if (rc != CURLE_OK) return Status::Unavailable(request.method + " " + request.url + ": " + curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  return response;
}

Status S3Error(const SignedResponse& response, const std::string& what) {
  std::string code, message;
  if (XmlDoc doc = ParseXml(response.body); doc != nullptr) {
    xmlNode* root = xmlDocGetRootElement(doc.get());
    code = ChildText(root, "Code");
    message = ChildText(root, "Message");
  }
  const std::string said = fmt::format("{}: HTTP {}{}{}", what, response.status, code.empty() ? "" : " " + code,
                                       message.empty() ? "" : ": " + message);
  switch (response.status) {
    case 400: return Status::InvalidArgument(said);
    case 401:
    case 403: return Status::FailedPrecondition(said + " (the credentials were refused)");
    case 404: return Status::NotFound(said);
    case 409: return Status::AlreadyExists(said);
    default: return response.status >= 500 ? Status::Unavailable(said) : Status::Internal(said);
  }
}

Result<SignedResponse> S3Client::Send(const std::string& method, const std::string& key, const std::string& query,
                                      const std::string& body) const {
  SignedRequest r{.method = method,
                  .url = options_.endpoint + "/" + UriEncode(options_.bucket, false) +
                         (key.empty() ? "" : "/" + UriEncode(key, true)) + (query.empty() ? "" : "?" + query),
                  .body = body,
                  .region = options_.region,
                  .timeout_ms = options_.timeout_ms,
                  .max_body_bytes = options_.max_object_bytes};
  if (method == "PUT") r.headers.emplace_back("Content-Type", "application/octet-stream");
  // S3 wants the payload's hash as a header of its own (signed with the rest).
  r.headers.emplace_back("X-Amz-Content-Sha256", PayloadSha256(body));
  return SignedFetch(r, options_.credentials);
}

Status S3Client::CreateBucket() const {
  PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("PUT", "", "", ""));
  if (r.status == 200) return Status::Ok();
  Status s = S3Error(r, "create bucket " + options_.bucket);
  if (r.status != 409) return s;
  // It exists: ours when these credentials may use it (S3 says BucketAlreadyOwnedByYou, others
  // BucketAlreadyExists either way).
  PHOS_ASSIGN_OR_RETURN(SignedResponse head, Send("HEAD", "", "", ""));
  return head.status == 200 ? Status::Ok() : s;
}

Status S3Client::Put(const std::string& key, const std::string& bytes) const {
  PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("PUT", key, "", bytes));
  return r.status == 200 ? Status::Ok() : S3Error(r, "put " + key);
}

Result<std::string> S3Client::Get(const std::string& key) const {
  PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("GET", key, "", ""));
  if (r.status != 200) return S3Error(r, "get " + key);
  return std::move(r.body);
}

Result<bool> S3Client::Exists(const std::string& key) const {
  PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("HEAD", key, "", ""));
  if (r.status == 200) return true;
  if (r.status == 404) return false;
  return S3Error(r, "head " + key);
}

Result<std::vector<std::string>> S3Client::List(const std::string& prefix) const {
  std::vector<std::string> keys;
  std::string token;
  while (true) {
    // Query parameters in the order SigV4 canonicalizes them (curl sorts them too).
    std::string query = "list-type=2";
    if (!token.empty()) query = "continuation-token=" + UriEncode(token, false) + "&" + query;
    query += "&prefix=" + UriEncode(prefix, false);
    PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("GET", "", query, ""));
    if (r.status != 200) return S3Error(r, "list " + prefix);
    XmlDoc doc = ParseXml(r.body);
    if (doc == nullptr) return Status::Corruption("list " + prefix + ": the answer is not XML");
    xmlNode* root = xmlDocGetRootElement(doc.get());
    for (xmlNode* c = root != nullptr ? root->children : nullptr; c != nullptr; c = c->next) {
      if (c->type == XML_ELEMENT_NODE && xmlStrcmp(c->name, reinterpret_cast<const xmlChar*>("Contents")) == 0) {
        keys.push_back(ChildText(c, "Key"));
      }
    }
    if (ChildText(root, "IsTruncated") != "true") return keys;
    std::string next = ChildText(root, "NextContinuationToken");
    if (next.empty() || next == token) {
      return Status::Corruption("list " + prefix + ": truncated, without a new continuation token");
    }
    token = std::move(next);
  }
}

Status S3Client::Delete(const std::string& key) const {
  PHOS_ASSIGN_OR_RETURN(SignedResponse r, Send("DELETE", key, "", ""));
  return r.status == 204 || r.status == 200 || r.status == 404 ? Status::Ok() : S3Error(r, "delete " + key);
}

}  // namespace phos::objstore
