// Echoes its request. "fail" answers an InvalidArgument error, "throw" throws; "pieces:a,b,c"
// sends a and b as pieces and answers c; "pieces-then-fail:a" sends a, then fails.
#include <stdexcept>

#include "phos/fn.h"

int main() {
  return phos::fn::Serve([](std::string_view request, phos::fn::Pieces& out) -> phos::Result<std::string> {
    if (request.substr(0, 7) == "pieces:") {
      std::string_view rest = request.substr(7);
      for (size_t comma = rest.find(','); comma != std::string_view::npos; comma = rest.find(',')) {
        PHOS_RETURN_IF_ERROR(out.Send(rest.substr(0, comma)));
        rest.remove_prefix(comma + 1);
      }
      return std::string(rest);
    }
    if (request.substr(0, 17) == "pieces-then-fail:") {
      PHOS_RETURN_IF_ERROR(out.Send(request.substr(17)));
      return phos::Status::Internal("failed after a piece");
    }
    if (request == "fail") return phos::Status::InvalidArgument("asked to fail");
    if (request == "request-id") return std::string(phos::fn::RequestId());
    if (request == "throw") throw std::runtime_error("asked to throw");
    return std::string(request);
  });
}
