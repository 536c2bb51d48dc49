// A hostile tenant against a real phosd: every kind of malformed control frame and ring record, a
// truncated ring, silent peers, another session's pointers and handles, a half-entered collective
// and an untrusted module image, while a well-behaved tenant (mlp, deployed and invoked through
// phosd) keeps getting answers that match the CPU reference. phosd stops on SIGTERM afterwards
// (the fixture's TearDown checks it).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <cuda.h>
#include <nccl.h>
#include <nlohmann/json.hpp>

#include "../testing/wait_until.h"
#include "mlp_expect.h"
#include "phos/ipc/control.h"
#include "phos/ipc/ring.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

const std::function<bool()> kAlive = [] { return true; };

// One GPU session opened on phosd's gpu.sock with a token from POST /v1/sessions, driven by hand.
struct HostileSession {
  int sock = -1;
  std::unique_ptr<ipc::Ring> ring;
  uint64_t seq = 0;

  ~HostileSession() {
    ring.reset();
    if (sock >= 0) close(sock);
  }
  // Sends one record and waits for its answer; -1 when the session was closed instead.
  int32_t Call(ipc::Op op, const void* args, size_t args_bytes, const void* tail = nullptr, size_t tail_bytes = 0,
               uint64_t* reply = nullptr) {
    const uint64_t s = ++seq;
    if (!ring->Write(op, ipc::kFlagReply, s, args, args_bytes, tail, tail_bytes, kAlive).ok()) return -1;
    if (!ring->WaitCompleted(s, kAlive).ok()) return -1;
    if (reply != nullptr) std::memcpy(reply, ring->reply_payload(), sizeof(*reply));
    return ring->reply_header().result;
  }
  uint64_t Malloc(uint64_t bytes) {
    ipc::SizeArgs a{bytes};
    uint64_t ptr = 0;
    return Call(ipc::Op::kMemAlloc, &a, sizeof(a), nullptr, 0, &ptr) == CUDA_SUCCESS ? ptr : 0;
  }
  bool closed() const { return ring->header()->closed.load() != 0; }
  // Writes a record header of the producer's choosing where the next record goes, and publishes
  // `published` bytes of it.
  void WriteRaw(const ipc::RecordHeader& header, uint64_t published) {
    auto* data = reinterpret_cast<uint8_t*>(ring->header()) + 4096;
    const uint64_t produced = ring->header()->produced.load();
    std::memcpy(data + (produced & (ipc::Ring::kDefaultDataBytes - 1)), &header, sizeof(header));
    ring->header()->produced.store(produced + published);
    ring->header()->server_futex.fetch_add(1);
    ipc::FutexWakeAll(&ring->header()->server_futex);
  }
};

class HostileTest : public PhosdTest {
 protected:
  std::string GpuSocket() const { return data_dir() + "/gpu.sock"; }

  std::string NewToken(int gpus) {
    CommandResult r = CurlPost("/v1/sessions", "{\"gpus\": " + std::to_string(gpus) + "}");
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(!j.is_discarded() && j.contains("token")) << r.out;
    return j.is_discarded() || !j.contains("token") ? "" : j["token"].get<std::string>();
  }

  int Connect() {
    auto sock = ipc::ConnectSeqpacket(GpuSocket());
    EXPECT_TRUE(sock.ok()) << sock.status().ToString();
    return sock.ok() ? *sock : -1;
  }

  // A session of `gpus` devices; null (with a test failure) when phosd refused it.
  std::unique_ptr<HostileSession> Open(int gpus = 1) {
    auto s = std::make_unique<HostileSession>();
    s->sock = Connect();
    ipc::Hello hello = ipc::MakeHello(NewToken(gpus), getpid());
    EXPECT_TRUE(ipc::SendDatagram(s->sock, &hello, sizeof(hello)).ok());
    ipc::Answer answer;
    int ring_fd = -1;
    auto n = ipc::ReceiveDatagram(s->sock, &answer, sizeof(answer), &ring_fd);
    if (!n.ok() || !ipc::CheckAnswer(&answer, *n).ok()) {
      ADD_FAILURE() << "session refused";
      return nullptr;
    }
    auto ring = ipc::Ring::Attach(ring_fd);
    if (!ring.ok()) {
      ADD_FAILURE() << ring.status().ToString();
      return nullptr;
    }
    s->ring = std::move(*ring);
    return s;
  }

  // The well-behaved tenant: an invocation of mlp answers as the CPU reference does.
  void ExpectGoodTenantServed(uint64_t seed) {
    CommandResult r = CurlPost("/v1/functions/mlp/invoke", "{\"seed\": " + std::to_string(seed) + "}");
    ASSERT_EQ(r.exit_code, 0);
    ExpectMlpMatchesReference(r.out, seed, /*full=*/false);
  }
};

TEST_F(HostileTest, PhosdKeepsServingOthersWhateverATenantSends) {
  CommandResult deployed = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_NO_FATAL_FAILURE(ExpectGoodTenantServed(1));

  // Silent peers: connections that never say hello, and a session that says nothing after it.
  std::vector<int> silent;
  for (int i = 0; i < 16; ++i) silent.push_back(Connect());
  std::unique_ptr<HostileSession> quiet = Open();
  ASSERT_NE(quiet, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectGoodTenantServed(2));

  // Truncated and malformed control frames.
  {
    int sock = Connect();
    const char partial[10] = {'O', 'L', 'L', 'E', 'H'};
    ASSERT_TRUE(ipc::SendDatagram(sock, partial, sizeof(partial)).ok());
    ipc::Answer answer;
    int fd = -1;
    auto n = ipc::ReceiveDatagram(sock, &answer, sizeof(answer), &fd);
    EXPECT_TRUE(!n.ok() || !ipc::CheckAnswer(&answer, *n).ok());
    EXPECT_LT(fd, 0);
    close(sock);
    sock = Connect();
    ipc::Hello forged = ipc::MakeHello(ipc::NewToken(), getpid());  // a token phosd never issued
    ASSERT_TRUE(ipc::SendDatagram(sock, &forged, sizeof(forged)).ok());
    n = ipc::ReceiveDatagram(sock, &answer, sizeof(answer), &fd);
    ASSERT_TRUE(n.ok());
    EXPECT_FALSE(ipc::CheckAnswer(&answer, *n).ok());
    close(sock);
  }

  // A truncated ring: the file is sealed, the session goes on.
  {
    std::unique_ptr<HostileSession> s = Open();
    ASSERT_NE(s, nullptr);
    EXPECT_NE(ftruncate(s->ring->fd(), 4096), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(s->Malloc(4096), 0u);
  }

  // Another session's pointers and handles.
  std::unique_ptr<HostileSession> victim = Open();
  std::unique_ptr<HostileSession> thief = Open();
  ASSERT_TRUE(victim != nullptr && thief != nullptr);
  const uint64_t secret = victim->Malloc(4096);
  ASSERT_NE(secret, 0u);
  uint64_t victim_stream = 0;
  ipc::FlagsArgs flags{0, 0};
  ASSERT_EQ(victim->Call(ipc::Op::kStreamCreate, &flags, sizeof(flags), nullptr, 0, &victim_stream), CUDA_SUCCESS);
  ipc::CopyArgs steal{.dst = 0, .src = secret, .bytes = 4096, .stream = 0};
  EXPECT_EQ(thief->Call(ipc::Op::kMemcpyDtoH, &steal, sizeof(steal)), CUDA_ERROR_INVALID_VALUE);
  ipc::MemsetArgs scribble{.dst = secret, .bytes = 4096, .stream = 0, .value = 0xff, .element_bytes = 0};
  EXPECT_EQ(thief->Call(ipc::Op::kMemset, &scribble, sizeof(scribble)), CUDA_ERROR_INVALID_VALUE);
  ipc::HandleArgs foreign{victim_stream};
  EXPECT_NE(thief->Call(ipc::Op::kStreamSynchronize, &foreign, sizeof(foreign)), CUDA_SUCCESS);
  EXPECT_NE(thief->Call(ipc::Op::kStreamDestroy, &foreign, sizeof(foreign)), CUDA_SUCCESS);
  ipc::PointerArgs free_secret{secret};
  EXPECT_EQ(thief->Call(ipc::Op::kMemFree, &free_secret, sizeof(free_secret)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(victim->Call(ipc::Op::kMemFree, &free_secret, sizeof(free_secret)), CUDA_SUCCESS);  // still its own

  // Records that do not decode: the wrong size for the call, then an opcode no call has (the
  // session ends), lengths past the ring, a producer offset outside it.
  {
    std::unique_ptr<HostileSession> s = Open();
    ASSERT_NE(s, nullptr);
    uint64_t short_args = 4096;
    EXPECT_EQ(s->Call(ipc::Op::kMemcpyDtoH, &short_args, sizeof(short_args)), CUDA_ERROR_INVALID_VALUE);
    EXPECT_FALSE(s->closed());
    s->WriteRaw({0x7fff, ipc::kFlagReply, 0, ++s->seq}, sizeof(ipc::RecordHeader));
    EXPECT_TRUE(WaitUntil([&] { return s->closed(); }));
  }
  {
    std::unique_ptr<HostileSession> s = Open();
    ASSERT_NE(s, nullptr);
    s->WriteRaw({static_cast<uint16_t>(ipc::Op::kMemset), ipc::kFlagReply, 1u << 30, ++s->seq},
                sizeof(ipc::RecordHeader) + 16);
    EXPECT_TRUE(WaitUntil([&] { return s->closed(); }));
  }
  {
    std::unique_ptr<HostileSession> s = Open();
    ASSERT_NE(s, nullptr);
    s->WriteRaw({static_cast<uint16_t>(ipc::Op::kMemFree), ipc::kFlagReply, 8, ++s->seq}, uint64_t{1} << 40);
    EXPECT_TRUE(WaitUntil([&] { return s->closed(); }));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectGoodTenantServed(3));

  // An untrusted module image: refused before it reaches the driver, its kernels never register;
  // flagged as a fatbin too (simgpu would dlopen it all the same).
  for (const uint32_t is_fatbin : {0u, 1u}) {
    SCOPED_TRACE(is_fatbin ? "flagged as a fatbin" : "as a simgpu image");
    std::ifstream in(PHOS_TEST_MODULE, std::ios::binary);
    std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(image.size(), 4096u);
    image[image.size() / 2] ^= 1;
    std::unique_ptr<HostileSession> s = Open();
    ASSERT_NE(s, nullptr);
    const size_t chunk = s->ring->max_payload() - sizeof(ipc::ModuleChunkArgs);
    for (size_t offset = 0; offset < image.size(); offset += chunk) {
      ipc::ModuleChunkArgs a{
          .module_id = 1, .total_bytes = image.size(), .offset = offset, .is_fatbin = is_fatbin, .pad = 0};
      ASSERT_EQ(s->Call(ipc::Op::kModuleChunk, &a, sizeof(a), image.data() + offset,
                        std::min(chunk, image.size() - offset)),
                CUDA_SUCCESS);
    }
    const std::string name = "_Z7vec_addPKfS0_Pfi";
    ipc::FunctionGetArgs get{.module_id = 1, .name_bytes = static_cast<uint32_t>(name.size()), .pad = 0};
    EXPECT_EQ(s->Call(ipc::Op::kFunctionGet, &get, sizeof(get), name.data(), name.size()),
              CUDA_ERROR_NO_BINARY_FOR_GPU);
  }

  // A half-entered collective: an all-reduce on one rank of two, then a synchronisation of that
  // rank's device, in which the session's executor waits for a rank that can never come; then the
  // tenant goes as a killed process does (the kernel closes its socket and ring). phosd aborts the
  // collective to end the session; with the executor left waiting it could not end it, nor stop.
  auto group_session = [&](std::unique_ptr<HostileSession>* out, uint64_t comms[2], uint64_t bufs[2]) {
    std::unique_ptr<HostileSession> s = Open(2);
    ASSERT_NE(s, nullptr);
    ipc::NcclInitAllArgs init{};
    init.ndev = 2;
    init.devices[0] = 0;
    init.devices[1] = 1;
    ASSERT_EQ(s->Call(ipc::Op::kNcclCommInitAll, &init, sizeof(init)), ncclSuccess);
    std::memcpy(comms, s->ring->reply_payload(), 2 * sizeof(uint64_t));
    for (int d = 0; d < 2; ++d) {
      ipc::DeviceArgs device{d, 0};
      ASSERT_EQ(s->Call(ipc::Op::kSetDevice, &device, sizeof(device)), CUDA_SUCCESS);
      bufs[d] = s->Malloc(1024);
      ASSERT_NE(bufs[d], 0u);
      const std::vector<float> values(256, static_cast<float>(d + 1));
      ipc::CopyArgs copy{.dst = bufs[d], .src = 0, .bytes = 1024, .stream = 0};
      ASSERT_EQ(s->Call(ipc::Op::kMemcpyHtoD, &copy, sizeof(copy), values.data(), copy.bytes), CUDA_SUCCESS);
    }
    *out = std::move(s);
  };
  auto all_reduce = [](uint64_t comm, uint64_t buf) {
    return ipc::NcclCollectiveArgs{.comm = comm, .stream = 0, .send = buf, .recv = buf, .count = 256,
                                   .kind = static_cast<int32_t>(ipc::NcclCollectiveKind::kAllReduce),
                                   .datatype = ncclFloat32, .op = ncclSum, .root = 0};
  };
  {
    std::unique_ptr<HostileSession> s;
    uint64_t comms[2], bufs[2];
    ASSERT_NO_FATAL_FAILURE(group_session(&s, comms, bufs));
    ipc::DeviceArgs device0{0, 0};
    ASSERT_EQ(s->Call(ipc::Op::kSetDevice, &device0, sizeof(device0)), CUDA_SUCCESS);
    const ipc::NcclCollectiveArgs half = all_reduce(comms[0], bufs[0]);
    const uint64_t entered = ++s->seq;
    ASSERT_TRUE(s->ring->Write(ipc::Op::kNcclCollective, ipc::kFlagReply, entered, &half, sizeof(half), nullptr, 0,
                               kAlive).ok());
    ASSERT_TRUE(s->ring->Write(ipc::Op::kDeviceSynchronize, ipc::kFlagReply, ++s->seq, nullptr, 0, nullptr, 0,
                               kAlive).ok());
    // Once the all-reduce completed, the synchronisation is the executor's next record.
    ASSERT_TRUE(WaitUntil([&] { return s->ring->header()->completed_seq.load() >= entered; }));
  }  // closed: phosd ends the session, aborting the collective

  // The device group's communicator was made anew: a tenant's all-reduce over both ranks adds up.
  {
    std::unique_ptr<HostileSession> s;
    uint64_t comms[2], bufs[2];
    ASSERT_NO_FATAL_FAILURE(group_session(&s, comms, bufs));
    ASSERT_EQ(s->Call(ipc::Op::kNcclGroupStart, nullptr, 0), CUDA_SUCCESS);
    for (int r = 0; r < 2; ++r) {
      const ipc::NcclCollectiveArgs all = all_reduce(comms[r], bufs[r]);
      ASSERT_EQ(s->Call(ipc::Op::kNcclCollective, &all, sizeof(all)), CUDA_SUCCESS);
    }
    ASSERT_EQ(s->Call(ipc::Op::kNcclGroupEnd, nullptr, 0), CUDA_SUCCESS);
    for (int r = 0; r < 2; ++r) {
      ipc::DeviceArgs device{r, 0};
      ASSERT_EQ(s->Call(ipc::Op::kSetDevice, &device, sizeof(device)), CUDA_SUCCESS);
      ipc::CopyArgs copy{.dst = 0, .src = bufs[r], .bytes = 1024, .stream = 0};
      ASSERT_EQ(s->Call(ipc::Op::kMemcpyDtoH, &copy, sizeof(copy)), CUDA_SUCCESS);
      std::vector<float> back(256);
      std::memcpy(back.data(), s->ring->reply_payload(), copy.bytes);
      EXPECT_EQ(back, std::vector<float>(256, 1.0f + 2.0f)) << "rank " << r;
    }
  }

  // Everyone else is still served, and new sessions still open.
  ASSERT_NO_FATAL_FAILURE(ExpectGoodTenantServed(4));
  std::unique_ptr<HostileSession> later = Open();
  ASSERT_NE(later, nullptr);
  EXPECT_NE(later->Malloc(4096), 0u);
  for (int fd : silent) close(fd);
}

// The device memory a function's sessions may hold comes from its spec: mlp's 16 MiB of weights do
// not fit in 8 MiB (its deploy fails before the entry point, with a clear error) and fit in 64.
// Every error phosd answers has one shape, {"error": {"code", "message"}}, with a code clients can
// branch on, and names its request: the caller's X-Request-Id when well formed, else one phosd made.
TEST_F(HostileTest, ErrorsHaveAStableCodeAndEveryAnswerNamesItsRequest) {
  struct Case {
    std::vector<std::string> args;  // curl's, after -s -i
    int status;
    std::string code;
  } cases[] = {
      {{"-X", "GET", endpoint() + "/v1/nowhere"}, 404, "not_found"},
      {{"-X", "PUT", endpoint() + "/v1/functions"}, 405, "method_not_allowed"},
      {{"-X", "POST", "--data", "{\"seed\": 1}", endpoint() + "/v1/functions/absent/invoke"}, 404, "not_found"},
      {{"-X", "DELETE", endpoint() + "/v1/functions/absent"}, 401, "unauthenticated"},
      {{"-X", "POST", "--data", "not json", "-H", "Authorization: Bearer " + admin_token(), endpoint() + "/v1/functions"},
       400, "invalid_argument"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[1] + " " + c.args.back());
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-H", "X-Request-Id: test-7"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    HttpResponse r = ParseCurl(::phos::testing::Run(argv).out);
    EXPECT_EQ(r.status, c.status) << r.body;
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << r.body;
    EXPECT_EQ(j["error"].value("code", ""), c.code) << r.body;
    EXPECT_FALSE(j["error"].value("message", "").empty()) << r.body;
    EXPECT_EQ(r.headers["x-request-id"], "test-7");
  }
  HttpResponse made =
      ParseCurl(::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "-H", "X-Request-Id: not ok!", endpoint() + "/healthz"}).out);
  EXPECT_EQ(made.status, 200);
  EXPECT_EQ(made.headers["x-request-id"].size(), 32u) << made.headers["x-request-id"];
}

TEST_F(HostileTest, AFunctionsDeviceMemoryLimitComesFromItsSpec) {
  auto deploy = [&](const std::string& name, int device_mib) {
    nlohmann::json spec = {{"name", name},
                           {"executable", PHOS_MLP_FUNCTION},
                           {"args", {"--size-mib", "16", "--layers", "4"}},
                           {"limits", {{"session_device_mib", device_mib}}}};
    return nlohmann::json::parse(CurlPost("/v1/functions", spec.dump()).out, nullptr, false);
  };
  nlohmann::json capped = deploy("capped", 8);
  ASSERT_TRUE(capped.is_object()) << capped;
  ASSERT_TRUE(capped.contains("error")) << capped;
  EXPECT_EQ(capped["error"].value("code", ""), "deploy_failed") << capped;
  EXPECT_NE(capped["error"].value("message", "").find("before its entry point"), std::string::npos) << capped;
  EXPECT_NE(capped["error"].value("message", "").find("cudaErrorMemoryAllocation"), std::string::npos) << capped;
  nlohmann::json roomy = deploy("mlp", 64);
  ASSERT_TRUE(roomy.is_object() && !roomy.contains("error")) << roomy;
  EXPECT_EQ(roomy["limits"]["session_device_mib"], 64);
  ASSERT_NO_FATAL_FAILURE(ExpectGoodTenantServed(5));
}

}  // namespace
}  // namespace phos::testing
