// A test function whose behaviour each request chooses:
//   "pid"        answers its process id          "crash"     aborts mid-request
//   "instance"   answers a random number drawn at its first call, the same for the process's
//                life (a pid is no identity: sandboxed instances live in PID namespaces of their
//                own, where two of them may have the same one)
//   "hang"       never answers                   "fail"      answers an InvalidArgument error
//   "sleep:MS"   answers "slept" after MS ms     "env:NAME"  answers the variable's value
//   "request-id" answers phos::fn::RequestId()
//   "say:TEXT"   prints TEXT as a line on its standard output (its log), answers "said"
//   "pieces:PATH"  sends the piece "first\n", waits (up to a minute) until PATH exists, answers
//                  "second\n" as the last piece
//   "piece-then-crash"  sends the piece "first\n", then aborts
//   anything else is echoed.
// Arguments: --exit-at-start (exits 3 before serving, a function that cannot start);
// --wait-at-start PATH (waits, up to a minute, until PATH exists before serving: a deploy held
// before its entry point for as long as the test wants).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "../../testing/wait_until.h"
#include "phos/fn.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exit-at-start") == 0) return 3;
    if (std::strcmp(argv[i], "--wait-at-start") == 0 && i + 1 < argc) {
      struct stat st {};
      phos::testing::WaitUntil([&] { return stat(argv[i + 1], &st) == 0; });  // the test's hook
    }
  }
  return phos::fn::Serve([](std::string_view request, phos::fn::Pieces& out) -> phos::Result<std::string> {
    if (request.substr(0, 7) == "pieces:") {
      PHOS_RETURN_IF_ERROR(out.Send("first\n"));
      const std::string path(request.substr(7));
      struct stat st {};
      phos::testing::WaitUntil([&] { return stat(path.c_str(), &st) == 0; });  // the test's hook
      return std::string("second\n");
    }
    if (request == "piece-then-crash") {
      PHOS_RETURN_IF_ERROR(out.Send("first\n"));
      std::abort();
    }
    if (request == "pid") return std::to_string(getpid());
    if (request == "request-id") return std::string(phos::fn::RequestId());
    if (request == "instance") {
      static const std::string id = std::to_string(std::random_device()());
      return id;
    }
    if (request == "crash") std::abort();
    if (request == "hang") {
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (request == "fail") return phos::Status::InvalidArgument("asked to fail");
    if (request.substr(0, 6) == "sleep:") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(std::string(request.substr(6)).c_str())));
      return std::string("slept");
    }
    if (request.substr(0, 4) == "say:") {
      std::printf("%s\n", std::string(request.substr(4)).c_str());
      std::fflush(stdout);
      return std::string("said");
    }
    if (request.substr(0, 4) == "env:") {
      const char* value = std::getenv(std::string(request.substr(4)).c_str());
      return std::string(value != nullptr ? value : "");
    }
    return std::string(request);
  });
}
