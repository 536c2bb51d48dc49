// A test function that tries, on request, what a sandboxed function must not be able to do, and
// answers what happened:
//   "uid"             its uid
//   "pid"             its pid (in the PID namespace it sees)
//   "read:PATH"       "read N bytes", or "failed: <errno text>"
//   "connect:PORT"    a TCP connection to 127.0.0.1:PORT: "connected", or "failed: <errno text>"
//   "kill:PID"        kill(PID, 0): "signalled", or "failed: <errno text>"
//   "alloc:MIB"       allocates and touches MIB MiB, answers "allocated" (or is killed first)
//   "fork:N"          forks N children (each waits for its parent to go), answers
//                     "forked K of N" and, when a fork failed, "; failed: <errno text>"
//   "spin:MS"         burns MS milliseconds of its own CPU time, answers "spun"
//   anything else is echoed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "phos/fn.h"

namespace {

std::string Failed(int error) {
  return std::string("failed: ") + std::strerror(error);
}

long Number(std::string_view text) {
  long value = -1;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Failed(errno);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return "read " + std::to_string(bytes.size()) + " bytes";
}

std::string Connect(long port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int error = errno;
  close(fd);
  return rc == 0 ? "connected" : Failed(error);
}

std::string Allocate(long mib) {
  std::vector<char*> blocks;
  for (long i = 0; i < mib; ++i) {
    auto* block = new char[1 << 20];
    std::memset(block, 1, 1 << 20);  // touched: resident, charged to the memory cgroup
    blocks.push_back(block);
  }
  for (char* block : blocks) delete[] block;
  return "allocated";
}

std::string Fork(long n) {
  int gate[2];
  if (pipe(gate) != 0) return Failed(errno);
  long forked = 0;
  int error = 0;
  for (; forked < n; ++forked) {
    pid_t pid = fork();
    if (pid == 0) {
      close(gate[1]);
      char byte;
      while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    if (pid < 0) {
      error = errno;
      break;
    }
  }
  close(gate[0]);
  close(gate[1]);  // every child's read ends: they exit
  while (wait(nullptr) > 0 || errno == EINTR) {
  }
  std::string answer = "forked " + std::to_string(forked) + " of " + std::to_string(n);
  return error == 0 ? answer : answer + "; " + Failed(error);
}

// CPU time, not wall time: a throttled process takes longer to spend it, which is the point.
std::string Spin(long ms) {
  auto cpu_ms = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
  };
  const long until = cpu_ms() + ms;
  volatile unsigned long sink = 0;
  while (cpu_ms() < until) {
    for (int i = 0; i < 100000; ++i) sink = sink + static_cast<unsigned long>(i);
  }
  return "spun";
}

}  // namespace

int main() {
  return phos::fn::Serve([](std::string_view request, phos::fn::Pieces&) -> phos::Result<std::string> {
    auto arg = [&](std::string_view prefix) { return request.substr(prefix.size()); };
    if (request == "uid") return std::to_string(getuid());
    if (request == "pid") return std::to_string(getpid());
    if (request.rfind("read:", 0) == 0) return Read(std::string(arg("read:")));
    if (request.rfind("connect:", 0) == 0) return Connect(Number(arg("connect:")));
    if (request.rfind("kill:", 0) == 0) {
      return kill(static_cast<pid_t>(Number(arg("kill:"))), 0) == 0 ? std::string("signalled")
                                                                    : Failed(errno);
    }
    if (request.rfind("alloc:", 0) == 0) return Allocate(Number(arg("alloc:")));
    if (request.rfind("fork:", 0) == 0) return Fork(Number(arg("fork:")));
    if (request.rfind("spin:", 0) == 0) return Spin(Number(arg("spin:")));
    return std::string(request);
  });
}
