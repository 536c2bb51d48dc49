// http-parser callbacks collecting one connection's requests (phos/http/request_parser.h).
#include "phos/http/request_parser.h"

#include <climits>
#include <utility>

#include <http_parser.h>

namespace phos::http {

struct RequestParser::Impl {
  Limits limits;
  http_parser parser{};
  http_parser_settings settings{};
  // The request being received.
  Request current;
  std::string field;
  bool in_value = false;
  size_t header_bytes = 0;
  size_t body_limit = 0;  // of the request being received, once its headers are in
  int limit_status = 0;  // 413 or 431 when a limit stopped the parser
  bool stopped = false;
  const char* error = "";
  std::vector<ParsedRequest>* out = nullptr;  // during Feed

  static Impl* Of(http_parser* p) { return static_cast<Impl*>(p->data); }

  int CountHeader(size_t len) {
    header_bytes += len;
    if (header_bytes > limits.max_header_bytes) {
      limit_status = 431;
      return -1;
    }
    return 0;
  }

  void CommitHeader() {
    if (!in_value) return;
    in_value = false;
    current.headers.back().first = std::move(field);
    field.clear();
  }

  static int OnMessageBegin(http_parser* p) {
    Impl* self = Of(p);
    self->current = Request{};
    self->field.clear();
    self->in_value = false;
    self->header_bytes = 0;
    return 0;
  }

  static int OnUrl(http_parser* p, const char* at, size_t len) {
    Impl* self = Of(p);
    self->current.path.append(at, len);
    return self->CountHeader(len);
  }

  static int OnHeaderField(http_parser* p, const char* at, size_t len) {
    Impl* self = Of(p);
    self->CommitHeader();
    self->field.append(at, len);
    return self->CountHeader(len + 4);  // ": " and CRLF
  }

  static int OnHeaderValue(http_parser* p, const char* at, size_t len) {
    Impl* self = Of(p);
    if (!self->in_value) {
      self->in_value = true;
      self->current.headers.emplace_back();
    }
    self->current.headers.back().second.append(at, len);
    return self->CountHeader(len);
  }

  static int OnHeadersComplete(http_parser* p) {
    Impl* self = Of(p);
    self->CommitHeader();
    Request& r = self->current;
    r.method = http_method_str(static_cast<http_method>(p->method));
    size_t q = r.path.find('?');
    if (q != std::string::npos) {
      r.query = r.path.substr(q + 1);
      r.path.resize(q);
    }
    self->body_limit = self->limits.max_body_bytes;
    if (self->limits.body_limit_for) {
      if (size_t route_limit = self->limits.body_limit_for(r); route_limit != 0) {
        self->body_limit = route_limit;
      }
    }
    if (p->content_length != ULLONG_MAX && p->content_length > self->body_limit) {
      self->limit_status = 413;
      return -1;
    }
    return 0;
  }

  static int OnBody(http_parser* p, const char* at, size_t len) {
    Impl* self = Of(p);
    if (len > self->body_limit - self->current.body.size()) {
      self->limit_status = 413;
      return -1;
    }
    self->current.body.append(at, len);
    return 0;
  }

  static int OnMessageComplete(http_parser* p) {
    Impl* self = Of(p);
    ParsedRequest parsed;
    parsed.request = std::move(self->current);
    parsed.keep_alive = http_should_keep_alive(p) != 0;
    self->out->push_back(std::move(parsed));
    if (!self->out->back().keep_alive) {
      // Nothing after a "Connection: close" request is read.
      self->stopped = true;
      http_parser_pause(p, 1);
    }
    return 0;
  }
};

RequestParser::RequestParser(Limits limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = std::move(limits);
  http_parser_settings_init(&impl_->settings);
  impl_->settings.on_message_begin = Impl::OnMessageBegin;
  impl_->settings.on_url = Impl::OnUrl;
  impl_->settings.on_header_field = Impl::OnHeaderField;
  impl_->settings.on_header_value = Impl::OnHeaderValue;
  impl_->settings.on_headers_complete = Impl::OnHeadersComplete;
  impl_->settings.on_body = Impl::OnBody;
  impl_->settings.on_message_complete = Impl::OnMessageComplete;
  http_parser_init(&impl_->parser, HTTP_REQUEST);
  impl_->parser.data = impl_.get();
}

RequestParser::~RequestParser() = default;

int RequestParser::Feed(const char* data, size_t len, std::vector<ParsedRequest>* out) {
  if (impl_->stopped || len == 0) return 0;
  impl_->out = out;
  const size_t parsed = http_parser_execute(&impl_->parser, &impl_->settings, data, len);
  impl_->out = nullptr;
  const auto err = HTTP_PARSER_ERRNO(&impl_->parser);
  if (impl_->stopped && err == HPE_PAUSED) return 0;  // a last request: the rest is ignored
  if (err == HPE_OK && parsed == len) return 0;
  impl_->stopped = true;
  impl_->error = http_errno_description(err);
  if (impl_->limit_status != 0) return impl_->limit_status;
  return err == HPE_HEADER_OVERFLOW ? 431 : 400;
}

bool RequestParser::stopped() const { return impl_->stopped; }

const char* RequestParser::error_description() const { return impl_->error; }

}  // namespace phos::http
