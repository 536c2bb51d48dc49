// Echoes its request. "fail" answers an InvalidArgument error, "throw" throws.
#include <stdexcept>

#include "phos/fn.h"

int main() {
  return phos::fn::Serve([](std::string_view request) -> phos::Result<std::string> {
    if (request == "fail") return phos::Status::InvalidArgument("asked to fail");
    if (request == "throw") throw std::runtime_error("asked to throw");
    return std::string(request);
  });
}
