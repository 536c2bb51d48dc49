// A test function for the fork template (cpu_state_test): a counter set before its entry point, so
// that every forked instance starts from the template's state and then counts on its own.
//   "count"     increments the counter and answers it     "pid"  answers its process id
//   "env:NAME"  answers the variable's value              "threads"  answers its thread count
// Arguments: --extra-thread starts a thread of its own before Serve() (a template to refuse);
// --pending-host-functions N makes it answer the fork template's __phosQuiesce as a frontend with
// N host functions pending would (N > 0: a template to refuse).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "phos/fn.h"

namespace {
size_t g_pending_host_functions = 0;
}  // namespace

// Found by the SDK's serve loop with dlsym, as the frontend's is (phos/frontend/fork_child.h).
extern "C" __attribute__((visibility("default"))) size_t __phosQuiesce(void) { return g_pending_host_functions; }

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pending-host-functions") == 0 && i + 1 < argc) {
      g_pending_host_functions = std::strtoul(argv[++i], nullptr, 10);
    }
    if (std::strcmp(argv[i], "--extra-thread") == 0) {
      std::thread([] {
        while (true) std::this_thread::sleep_for(std::chrono::hours(1));
      }).detach();
    }
  }
  long counter = 100;  // initialised before the entry point: part of the template's state
  return phos::fn::Serve([&counter](std::string_view request) -> phos::Result<std::string> {
    if (request == "count") return std::to_string(++counter);
    if (request == "pid") return std::to_string(getpid());
    if (request.substr(0, 4) == "env:") {
      const char* value = std::getenv(std::string(request.substr(4)).c_str());
      return std::string(value != nullptr ? value : "");
    }
    return phos::Status::InvalidArgument("unknown request '" + std::string(request) + "'");
  });
}
