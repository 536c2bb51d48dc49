// The function SDK (docs/design.md D12): a function initialises (loads weights, warms up), then hands its
// request handler to Serve(). The serve loop's first wait for a request is the pre-entry point.
//
//   int main() {
//     Model model = LoadModel();
//     return phos::fn::Serve([&](std::string_view request) { return model.Infer(request); });
//   }
//
// Under phosd (PHOS_INVOKE_FD set) Serve answers invocations until phosd closes the channel, then
// returns 0. Run by hand (no PHOS_INVOKE_FD) it reads one request from standard input to its end,
// writes the response to standard output and returns 0, or the error to standard error and
// returns 1 — so a function can be tried without phosd.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "phos/base/status.h"

namespace phos::fn {

// A handler's error becomes the invocation's HTTP error: InvalidArgument -> 400, anything else
// -> 500, with the message as the body.
using Handler = std::function<Result<std::string>(std::string_view request)>;

// Returns the process exit code: 0 when phosd closed the channel (or the single stdin request was
// answered), 1 when the stdin request failed, 2 when PHOS_INVOKE_FD is malformed or the channel
// broke mid-frame.
int Serve(Handler handler);

// A response sent in pieces as they are made (a generated token at a time): each Send leaves at
// once, and phosd forwards it as one HTTP chunk; what the handler returns is the last piece (it
// may be empty). An error returned after pieces were sent ends the HTTP response early (the
// client sees it cut short); before any piece, it is the invocation's error as for Handler.
class Pieces {
 public:
  virtual ~Pieces() = default;
  // An error when the piece could not be sent (phosd went away) or the handler has returned (a
  // Pieces is valid only during the handler's call): the handler should stop.
  virtual Status Send(std::string_view piece) = 0;
};
using StreamingHandler = std::function<Result<std::string>(std::string_view request, Pieces& out)>;
int Serve(StreamingHandler handler);

// The id of the request the calling handler serves: the X-Request-Id phosd answers it with (the
// client's own, or one phosd made), for the function's logs and the calls it makes on the
// request's behalf. "" outside a handler, when run by hand, for the requests phosd makes itself
// (a deploy's sample and warm-up requests, a job's steps), and on any thread but the handler's.
std::string_view RequestId();

}  // namespace phos::fn
