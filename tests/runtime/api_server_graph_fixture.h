// The fixture of the CUDA graph tests at the protocol level (api_server_graph_test.cc,
// api_server_graph_host_test.cc): a session on simgpu with the test module's vec_add, the test
// playing the function process, and records for the nodes the tests build.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "phos/driver/driver_table.h"
#include "phos/runtime/api_server.h"
#include "ring_client.h"

namespace phos::runtime {

using ipc::Op;
using testing::RingClient;

constexpr const char* kVecAdd = "_Z7vec_addPKfS0_Pfi";  // (const float* a, const float* b, float* c, int n)
constexpr int kCount = 256;
constexpr uint64_t kBytes = kCount * sizeof(float);

class ApiServerGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-graph-test-" + std::to_string(getpid()) + ".sock";
    auto server =
        ApiServer::Start({.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10}, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    // The test's own context: its allocations are another owner's memory to the session.
    ASSERT_EQ(table_->cuCtxCreate(&own_ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    token_ = server_->IssueToken();
    ASSERT_TRUE(client_.Connect(path_, token_));
    ASSERT_TRUE(client_.SendModule(1, testing::ReadFileBytes(PHOS_TEST_MODULE)));
    vec_add_ = client_.Function(kVecAdd);
    ASSERT_NE(vec_add_, 0u);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->EndSession(token_);
    if (own_ctx_ != nullptr) {
      EXPECT_EQ(table_->cuCtxDestroy(own_ctx_), CUDA_SUCCESS);
    }
  }

  uint64_t NewGraph() {
    EXPECT_EQ(client_.Call(Op::kGraphCreate, nullptr, 0), CUDA_SUCCESS);
    return client_.Reply<uint64_t>();
  }
  uint64_t NewStream(uint32_t flags) {
    EXPECT_EQ(client_.Call(Op::kStreamCreate, ipc::FlagsArgs{flags, 0}), CUDA_SUCCESS);
    return client_.Reply<uint64_t>();
  }
  uint64_t NewEvent() {
    EXPECT_EQ(client_.Call(Op::kEventCreate, ipc::FlagsArgs{CU_EVENT_DISABLE_TIMING, 0}), CUDA_SUCCESS);
    return client_.Reply<uint64_t>();
  }
  // kGraphAddNode: the node, its dependencies and its parameter buffer; the new index in *index.
  int32_t Add(uint64_t graph, const ipc::GraphNode& node, const std::vector<uint32_t>& deps,
              const std::vector<uint8_t>& params = {}, uint32_t* index = nullptr) {
    ipc::GraphNodeArgs a{graph, 0, static_cast<uint32_t>(deps.size()), node};
    std::vector<uint8_t> tail(deps.size() * sizeof(uint32_t));
    if (!deps.empty()) std::memcpy(tail.data(), deps.data(), tail.size());
    tail.insert(tail.end(), params.begin(), params.end());
    const int32_t r = client_.Call(Op::kGraphAddNode, a, tail.data(), tail.size());
    if (index != nullptr) *index = client_.Reply<uint32_t>();
    return r;
  }
  // vec_add(a, b, c, kCount) as a launch record's arguments and parameter buffer.
  ipc::LaunchArgs VecAdd(uint64_t stream = 0) const {
    return {vec_add_, stream, {1, 1, 1}, {64, 1, 1}, 0, 28};
  }
  static std::vector<uint8_t> VecAddParams(uint64_t a, uint64_t b, uint64_t c) {
    std::vector<uint8_t> p(28, 0);
    std::memcpy(p.data(), &a, 8);
    std::memcpy(p.data() + 8, &b, 8);
    std::memcpy(p.data() + 16, &c, 8);
    const int32_t n = kCount;
    std::memcpy(p.data() + 24, &n, 4);
    return p;
  }
  static ipc::GraphNode KernelNode(const ipc::LaunchArgs& launch) {
    ipc::GraphNode n{};
    n.type = CU_GRAPH_NODE_TYPE_KERNEL;
    n.launch = launch;
    return n;
  }
  static ipc::GraphNode MemsetNode(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t width) {
    ipc::GraphNode n{};
    n.type = CU_GRAPH_NODE_TYPE_MEMSET;
    n.dst = dst, n.value = value, n.element_size = element_size, n.width = width, n.height = 1;
    n.dst_pitch = width * element_size;
    return n;
  }
  static ipc::GraphNode CopyNode(uint64_t dst, uint64_t src, uint64_t bytes) {
    ipc::GraphNode n{};
    n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    n.dst = dst, n.src = src, n.width = bytes, n.height = 1, n.dst_pitch = n.src_pitch = bytes;
    return n;
  }
  std::vector<float> Floats(uint64_t src) {
    std::vector<uint8_t> bytes = client_.Download(src, kBytes);
    std::vector<float> out(kCount);
    std::memcpy(out.data(), bytes.data(), kBytes);
    return out;
  }
  int32_t Synchronize() { return client_.Call(Op::kDeviceSynchronize, nullptr, 0); }

  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
  std::string token_;
  RingClient client_;
  CUcontext own_ctx_ = nullptr;
  uint64_t vec_add_ = 0;
};

}  // namespace phos::runtime
