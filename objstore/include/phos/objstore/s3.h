// An S3-compatible object store: objects put, got, listed and deleted in one bucket over HTTP,
// each request signed with AWS Signature Version 4 by libcurl (CURLOPT_AWS_SIGV4), path-style
// (<endpoint>/<bucket>/<key>), as S3, MinIO, Ceph's RGW and s3rver all answer it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::objstore {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none (sent as X-Amz-Security-Token when set)
};

// The usual places, in order: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) in
// the environment; else the profile AWS_PROFILE (default "default") of the credentials file
// `file`, or of AWS_SHARED_CREDENTIALS_FILE, or of ~/.aws/credentials (INI: [profile] then
// aws_access_key_id = ..., aws_secret_access_key = ..., aws_session_token = ...). NotFound when
// none holds a key id and a secret; InvalidArgument for a file that names a profile without them.
Result<Credentials> FindCredentials(const std::string& file = "");

// One request, signed: what SignedFetch sends.
struct SignedRequest {
  std::string method = "GET";
  std::string url;  // "http://127.0.0.1:4568/bucket/key?list-type=2"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string region = "us-east-1";
  std::string service = "s3";
  // libcurl's CURLOPT_CONNECT_TO ("HOST:PORT:CONNECT-HOST:CONNECT-PORT"): the URL's host in the
  // signature, another address on the wire. Empty: the URL's. For tests that sign for a named host.
  std::string connect_to;
  long timeout_ms = 60000;
  // The most bytes of an answer read; a longer one fails (Corruption). Default: 256 MiB.
  uint64_t max_body_bytes = uint64_t{256} << 20;
};

struct SignedResponse {
  int status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sends `request` signed with `credentials` (libcurl adds Host, X-Amz-Date unless the request has
// one, and for S3 X-Amz-Content-Sha256, and signs them with the request's own headers). Fails
// (Unavailable) only when no answer came; any HTTP status is a result.
Result<SignedResponse> SignedFetch(const SignedRequest& request, const Credentials& credentials);

struct S3Options {
  std::string endpoint;  // "http://127.0.0.1:4568" (no trailing path)
  std::string bucket;
  std::string region = "us-east-1";
  Credentials credentials;
  long timeout_ms = 60000;
  // The largest object (or listing page) read: far above a chunk or a manifest. Default: 256 MiB.
  uint64_t max_object_bytes = uint64_t{256} << 20;
};

// What an S3 error answer says: its <Code> and <Message>, or the HTTP status when it has none.
Status S3Error(const SignedResponse& response, const std::string& what);

class S3Client {
 public:
  explicit S3Client(S3Options options) : options_(std::move(options)) {}

  // Makes the bucket; Ok when it exists already and is ours.
  Status CreateBucket() const;
  Status Put(const std::string& key, const std::string& bytes) const;
  // The object's bytes; NotFound when there is none.
  Result<std::string> Get(const std::string& key) const;
  // Whether the object exists (HEAD).
  Result<bool> Exists(const std::string& key) const;
  // Every key that begins with `prefix`, in the bucket's order (ListObjectsV2, page by page).
  Result<std::vector<std::string>> List(const std::string& prefix) const;
  // Ok also when there was no such object.
  Status Delete(const std::string& key) const;

  const S3Options& options() const { return options_; }

 private:
  Result<SignedResponse> Send(const std::string& method, const std::string& key, const std::string& query,
                              const std::string& body) const;
  S3Options options_;
};

// `text` escaped for a URL path or query (RFC 3986 unreserved kept; '/' kept when `keep_slash`).
std::string UriEncode(const std::string& text, bool keep_slash);

}  // namespace phos::objstore
