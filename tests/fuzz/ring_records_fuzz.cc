// Ring records fed to a session's executor (runtime/src/session*.cc) over simgpu: each input is
// one tenant. It opens a single-GPU session of an API server the way a function process does (the
// control socket's hello, the ring's memfd), writes the records the input describes, waits for
// each answer and ends the session. A record may be anything: a bad opcode, a short or long
// payload, foreign pointers and handles, sizes that wrap. The executor must answer every record
// (or close the ring) and keep serving well-formed calls after refusing bad ones.
//
// Input: records of [u8 opcode][u8 patch][u16 length][length bytes]. `patch` bits 0 and 1
// overwrite the payload's first and second 8-byte words with the session's last allocated device
// pointer plus the low 16 bits of what was there, bits 2 and 3 with the last virtual handle it was
// given (streams, events, cuBLAS handles, graphs, executable graphs), so that records reach the
// handlers' checks past "no such buffer". Bit 4 does the same for every later 8-byte word whose upper 32 bits are
// kPointerMark: records with pointers further in (a cuBLAS call's matrices, the device pointers a
// batched GEMM's arrays hold, written by a copy's data) can name the session's memory too.
//
// Module images may complete: the server trusts no image (docs/design.md D17), so a completed
// one is refused by its digest before it reaches the driver, as any tenant's own image is. The
// target fuzzes the chunk bookkeeping (ids, offsets, totals, limits) and that refusal; loading
// the build's own trusted images is what every integration test does.
//
// The tenant's host functions return at once: each slot phosd posts as reached goes back while
// the tenant waits for an answer, as the frontend's host-function thread would post it, so that a
// synchronisation behind one ends.
//
// Device-group sessions (NCCL) are left out: a collective entered on one rank of two waits for
// the other by design; bounding that wait is the session's end-of-life work, not a parser's.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "phos/driver/driver_table.h"
#include "phos/ipc/control.h"
#include "phos/ipc/ring.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/trusted_modules.h"

namespace {

using namespace phos;

// The upper half of a word that patch bit 4 points at the session's memory: "PHOS" read as a
// little-endian u32.
constexpr uint64_t kPointerMark = 0x534f4850;

struct Server {
  std::shared_ptr<driver::DriverTable> driver;
  std::unique_ptr<runtime::ApiServer> api;
};

Server& TheServer() {
  static Server* server = [] {
    // A small simulated device: what a record allocates stays in RAM, and the scrub is quick.
    setenv("PHOS_SIMGPU_PROFILE", "ci", 0);
    setenv("PHOS_SIMGPU_TIME_SCALE", "1", 0);
    setenv("PHOS_SIMGPU_MEMORY", "256M", 0);
    // simgpu runs a GPU's arithmetic on the CPU: a batched GEMM of 200 million small entries takes
    // a GPU milliseconds and simgpu minutes. The watchdog stops such a call as a display GPU's does
    // (CUDA_ERROR_LAUNCH_TIMEOUT), so that an input is not a timeout for the work it asked for.
    // A quarter of a second: an input computing longer tests simgpu's arithmetic, not phosd's
    // checks, and at 2 s such inputs took three quarters of the corpus's replay.
    setenv("PHOS_SIMGPU_KERNEL_TIMEOUT", "0.25", 0);
    setenv("PHOS_LOG_LEVEL", "error", 0);
    // The tenant, the session's executor and simgpu's workers share the host's cores (two
    // processes of this target fill them): a side spinning for its peer's answer holds the core
    // the peer needs. Both sides sleep at once, which also puts every call through the futex path.
    setenv("PHOS_RING_SPIN", "0", 0);
    auto* s = new Server;
    auto driver = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    if (!driver.ok()) {
      std::fprintf(stderr, "driver: %s\n", driver.status().ToString().c_str());
      std::abort();
    }
    s->driver = std::move(*driver);
    runtime::ApiServerOptions options{.socket_path = "/tmp/phos-ring-fuzz-" + std::to_string(getpid()) + ".sock",
                                      .ring_bytes = 1u << 20,
                                      .reply_bytes = 256u << 10};
    options.instance_va_bytes = 1ull << 30;
    options.va_slots = 0;
    auto none_trusted = runtime::TrustedModules::FromDirectories({});
    if (!none_trusted.ok()) std::abort();
    options.trusted_modules = std::move(*none_trusted);
    auto api = runtime::ApiServer::Start(options, s->driver);
    if (!api.ok()) {
      std::fprintf(stderr, "api server: %s\n", api.status().ToString().c_str());
      std::abort();
    }
    s->api = std::move(*api);
    // The server lives as long as the process; its socket file should not outlive it.
    std::atexit([] { unlink(TheServer().api->socket_path().c_str()); });
    return s;
  }();
  return *server;
}

// A tenant's session: the control socket and the ring, as the frontend holds them.
struct Tenant {
  std::string token;
  int sock = -1;
  std::unique_ptr<ipc::Ring> ring;
  uint64_t seq = 0;
  uint64_t last_pointer = 0;
  uint64_t last_handle = 0;

  bool Open(runtime::ApiServer& api) {
    token = api.IssueToken();
    auto connected = ipc::ConnectSeqpacket(api.socket_path());
    if (!connected.ok()) return false;
    sock = *connected;
    ipc::Hello hello = ipc::MakeHello(token, getpid());
    if (!ipc::SendDatagram(sock, &hello, sizeof(hello)).ok()) return false;
    ipc::Answer answer;
    int ring_fd = -1;
    auto n = ipc::ReceiveDatagram(sock, &answer, sizeof(answer), &ring_fd);
    if (!n.ok() || !ipc::CheckAnswer(&answer, *n).ok() || ring_fd < 0) return false;
    auto attached = ipc::Ring::Attach(ring_fd);
    close(ring_fd);
    if (!attached.ok()) return false;
    ring = std::move(*attached);
    return true;
  }

  // Points the payload's words at what the session gave this tenant (see the top).
  void Patch(uint8_t patch, std::vector<uint8_t>* payload) const {
    for (size_t word = 0; 8 * (word + 1) <= payload->size(); ++word) {
      uint8_t* at = payload->data() + 8 * word;
      uint64_t value;
      std::memcpy(&value, at, 8);
      if (word < 2) {
        if ((patch >> word) & 1) value = last_pointer + (value & 0xffff);
        if ((patch >> (word + 2)) & 1) value = last_handle;
      } else if ((patch & 0x10) != 0 && (value >> 32) == kPointerMark) {
        value = last_pointer + (value & 0xffff);
      }
      std::memcpy(at, &value, 8);
    }
  }

  // Posts back every host-function slot phosd says was reached.
  void ReturnHostFunctions() {
    ipc::HostFnEvent events[64];
    while (size_t n = ring->TakeHostFnEvents(ipc::HostFnQueueId::kToFrontend, events, 64)) {
      for (size_t i = 0; i < n; ++i) {
        if (events[i].result == 0) ring->PostHostFnEvent(ipc::HostFnQueueId::kToServer, {events[i].slot, 0});
      }
    }
  }

  // Sends one record and waits for its answer; false when the session closed the ring.
  bool Call(uint16_t op, const std::vector<uint8_t>& payload, int32_t* result) {
    // A session stuck on a record is a finding: libFuzzer's -timeout (ctest's, replaying the
    // corpus) ends the run on it.
    auto alive = [this] {
      ReturnHostFunctions();
      return true;
    };
    ReturnHostFunctions();
    const uint64_t s = ++seq;
    Status written = ring->Write(static_cast<ipc::Op>(op), ipc::kFlagReply, s, payload.data(), payload.size(), nullptr,
                                 0, alive);
    if (!written.ok()) return Closed(written, op);
    Status waited = ring->WaitCompleted(s, alive);
    if (!waited.ok()) return Closed(waited, op);
    *result = ring->reply_header().result;
    return true;
  }

  bool Closed(const Status& status, uint16_t op) {
    if (ring->header()->closed.load() != 0) return false;
    std::fprintf(stderr, "session stuck on opcode %u: %s\n", op, status.ToString().c_str());
    std::abort();
  }

  void Close(runtime::ApiServer& api) {
    api.EndSession(token);
    if (sock >= 0) close(sock);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& server = TheServer();
  Tenant tenant;
  if (!tenant.Open(*server.api)) {
    std::fprintf(stderr, "could not open a session\n");
    std::abort();
  }
  fuzz::FuzzInput in(data, size);
  bool open = true;
  while (open && !in.empty()) {
    // One opcode past the table: an unknown opcode ends the session's ring, which must be clean.
    const uint16_t op = in.Take<uint8_t>() % (static_cast<uint16_t>(ipc::Op::kOpCount) + 1);
    const uint8_t patch = in.Take<uint8_t>();
    const uint16_t length = in.Take<uint16_t>() % 4096;
    auto bytes = in.TakeBytes(length);
    std::vector<uint8_t> payload(bytes.begin(), bytes.end());
    tenant.Patch(patch, &payload);
    int32_t result = 0;
    open = tenant.Call(op, payload, &result);
    if (!open || result != 0) continue;
    uint64_t reply;
    std::memcpy(&reply, tenant.ring->reply_payload(), sizeof(reply));
    switch (static_cast<ipc::Op>(op)) {
      case ipc::Op::kMemAlloc:
        tenant.last_pointer = reply;
        break;
      case ipc::Op::kStreamCreate:
      case ipc::Op::kStreamCreateWithPriority:
      case ipc::Op::kEventCreate:
      case ipc::Op::kBlasCreate:
      case ipc::Op::kGraphCreate:
      case ipc::Op::kGraphClone:
      case ipc::Op::kGraphInstantiate:
      case ipc::Op::kStreamEndCapture:
        tenant.last_handle = reply;
        break;
      default:
        break;
    }
  }
  if (open) {
    // Whatever came before, a well-formed call is still served.
    int32_t result = -1;
    if (!tenant.Call(static_cast<uint16_t>(ipc::Op::kDeviceGetCount), {}, &result) || result != 0) {
      std::fprintf(stderr, "a well-formed call failed after the input's records (result %d)\n", result);
      std::abort();
    }
  }
  tenant.Close(*server.api);
  return 0;
}
