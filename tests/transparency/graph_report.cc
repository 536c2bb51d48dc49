// A CUDA program as its users write one (the toolkit's headers, NVIDIA's libcudart, nothing of
// phos) exercising CUDA graphs: a graph captured from two streams forked and joined by events
// (a device-to-device copy, a memset, kernels) replayed 100 times into an accumulator; the capture
// queries and the global capture mode's refusal of cudaMalloc, which invalidates the capture, and
// the relaxed mode's permission; an explicit graph (memset, kernel, copy, an event record), its
// nodes and roots, a clone, parameters copied when a node is added, cudaGraphExecUpdate with new
// parameters and with another topology, and cudaGraphExecKernelNodeSetParams; an explicit graph
// with a host node between two kernels, whose function runs once per launch after the kernel
// before it and before the kernel after it (it holds the launch while the program reads the
// first kernel's result on another stream), its parameters read and set in the graph and in the
// executable graph; and a cudaLaunchHostFunc captured between two kernels, replayed. Every result is
// checked against a CPU computation; it exits 0 only when every check held. transparency_test
// runs it under `phos-fn run`.
//
// Built with g++ (the host code of its kernels compiled alongside, their simgpu module embedded)
// for simgpu, and with nvcc compiling the kernels for a GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <vector>

// graph_kernels.cu's kernels (the stubs nvcc generates, or the host side of the g++ build).
void graph_axpy(const float* x, float* y, float a, int n);
void graph_scale(float* x, float s, int n);

namespace {

int g_failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf("CHECK FAILED: line %d: %s\n", __LINE__, #cond); \
      ++g_failures;                                                \
    }                                                              \
  } while (0)
#define OK(call) CHECK((call) == cudaSuccess)

constexpr int kCount = 4096;
constexpr size_t kBytes = kCount * sizeof(float);
constexpr int kReplays = 100;
const dim3 kGrid((kCount + 255) / 256);
const dim3 kBlock(256);

const void* Axpy() {
  return reinterpret_cast<const void*>(&graph_axpy);
}
const void* Scale() {
  return reinterpret_cast<const void*>(&graph_scale);
}

std::vector<float> Download(const float* device) {
  std::vector<float> host(kCount);
  OK(cudaMemcpy(host.data(), device, kBytes, cudaMemcpyDeviceToHost));
  return host;
}

// One step of the captured graph, on the CPU: y = x; z = 0; then, forked, y = 2y and z = 3x + z;
// joined, z = y + z; w = z + w.
void CapturedStepOnCpu(const std::vector<float>& x, std::vector<float>& y, std::vector<float>& z,
                       std::vector<float>& w) {
  for (int i = 0; i < kCount; ++i) {
    y[i] = x[i];
    z[i] = 0.0f;
    y[i] = 2.0f * y[i];
    z[i] = 3.0f * x[i] + z[i];
    z[i] = 1.0f * y[i] + z[i];
    w[i] = 1.0f * z[i] + w[i];
  }
}

int captured_nodes = 0;

void CapturedGraph(float* x, float* y, float* z, float* w) {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t forked = nullptr, joined = nullptr;
  OK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
  OK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  int n = kCount;
  float two = 2.0f, three = 3.0f, one = 1.0f;

  OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  OK(cudaStreamIsCapturing(s1, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  OK(cudaMemcpyAsync(y, x, kBytes, cudaMemcpyDeviceToDevice, s1));
  OK(cudaMemsetAsync(z, 0, kBytes, s1));
  OK(cudaEventRecord(forked, s1));
  OK(cudaStreamWaitEvent(s2, forked, 0));
  void* scale_args[] = {&y, &two, &n};
  OK(cudaLaunchKernel(Scale(), kGrid, kBlock, scale_args, 0, s2));
  OK(cudaEventRecord(joined, s2));
  void* axpy_xz[] = {&x, &z, &three, &n};
  OK(cudaLaunchKernel(Axpy(), kGrid, kBlock, axpy_xz, 0, s1));
  // s2 is part of the capture now, with one dependency: the scale kernel.
  unsigned long long id = 0;
  cudaGraph_t capturing = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t dep_count = 0;
  OK(cudaStreamGetCaptureInfo(s2, &status, &id, &capturing, &deps, nullptr, &dep_count));
  CHECK(status == cudaStreamCaptureStatusActive && id != 0 && capturing != nullptr && dep_count == 1);
  OK(cudaStreamWaitEvent(s1, joined, 0));
  void* axpy_yz[] = {&y, &z, &one, &n};
  OK(cudaLaunchKernel(Axpy(), kGrid, kBlock, axpy_yz, 0, s1));
  void* axpy_zw[] = {&z, &w, &one, &n};
  OK(cudaLaunchKernel(Axpy(), kGrid, kBlock, axpy_zw, 0, s1));
  cudaGraph_t graph = nullptr;
  OK(cudaStreamEndCapture(s1, &graph));
  CHECK(graph != nullptr);
  OK(cudaStreamIsCapturing(s2, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  // Captured, not run: w is still zero.
  OK(cudaDeviceSynchronize());
  std::vector<float> w_host = Download(w);
  bool untouched = true;
  for (float v : w_host) untouched = untouched && v == 0.0f;
  CHECK(untouched);
  size_t count = 0;
  OK(cudaGraphGetNodes(graph, nullptr, &count));
  captured_nodes = static_cast<int>(count);
  CHECK(count == 6);

  cudaGraphExec_t exec = nullptr;
  OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < kReplays; ++i) OK(cudaGraphLaunch(exec, s1));
  OK(cudaStreamSynchronize(s1));
  std::vector<float> hx = Download(x), hy(kCount), hz(kCount), hw(kCount, 0.0f);
  for (int i = 0; i < kReplays; ++i) CapturedStepOnCpu(hx, hy, hz, hw);
  CHECK(Download(w) == hw);
  CHECK(Download(z) == hz);

  // A cudaMalloc during a global capture is prohibited and invalidates the capture; in relaxed
  // mode the same call is allowed.
  OK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
  void* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 256) == cudaErrorStreamCaptureUnsupported);
  OK(cudaStreamIsCapturing(s2, &status));
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t invalid = nullptr;
  CHECK(cudaStreamEndCapture(s2, &invalid) == cudaErrorStreamCaptureInvalidated);
  CHECK(invalid == nullptr);
  cudaGetLastError();
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == cudaStreamCaptureModeGlobal);
  OK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeRelaxed));
  OK(cudaMalloc(&scratch, 256));
  OK(cudaStreamEndCapture(s2, &invalid));
  OK(cudaFree(scratch));
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  OK(cudaGraphDestroy(invalid));

  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));
  OK(cudaEventDestroy(forked));
  OK(cudaEventDestroy(joined));
  OK(cudaStreamDestroy(s1));
  OK(cudaStreamDestroy(s2));
}

cudaKernelNodeParams AxpyNode(void** args) {
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(Axpy());
  p.gridDim = kGrid;
  p.blockDim = kBlock;
  p.kernelParams = args;
  return p;
}

void ExplicitGraph(float* x, float* y, float* z) {
  cudaStream_t stream = nullptr;
  OK(cudaStreamCreate(&stream));
  cudaEvent_t done = nullptr;
  OK(cudaEventCreate(&done));
  int n = kCount;
  float a = 2.0f;
  void* args[] = {&x, &y, &a, &n};

  // memset y = 0 -> y = a x + y -> z = y -> record `done`.
  cudaGraph_t graph = nullptr;
  OK(cudaGraphCreate(&graph, 0));
  cudaMemsetParams set{};
  set.dst = y;
  set.value = 0;
  set.elementSize = 4;
  set.width = kCount;
  set.height = 1;
  cudaGraphNode_t memset = nullptr, kernel = nullptr, copy = nullptr, record = nullptr;
  OK(cudaGraphAddMemsetNode(&memset, graph, nullptr, 0, &set));
  cudaKernelNodeParams kp = AxpyNode(args);
  OK(cudaGraphAddKernelNode(&kernel, graph, &memset, 1, &kp));
  a = 100.0f;  // after the add: the node keeps 2
  OK(cudaGraphAddMemcpyNode1D(&copy, graph, &kernel, 1, z, y, kBytes, cudaMemcpyDeviceToDevice));
  OK(cudaGraphAddEventRecordNode(&record, graph, &copy, 1, done));

  size_t count = 0, roots = 0;
  OK(cudaGraphGetNodes(graph, nullptr, &count));
  OK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  CHECK(count == 4 && roots == 1);
  cudaGraphNode_t root = nullptr;
  roots = 1;
  OK(cudaGraphGetRootNodes(graph, &root, &roots));
  CHECK(root == memset);
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  OK(cudaGraphNodeGetType(copy, &type));
  CHECK(type == cudaGraphNodeTypeMemcpy);
  OK(cudaGraphNodeGetType(kernel, &type));
  CHECK(type == cudaGraphNodeTypeKernel);
  cudaKernelNodeParams got{};
  OK(cudaGraphKernelNodeGetParams(kernel, &got));
  CHECK(got.func == Axpy() && got.gridDim.x == kGrid.x && *static_cast<float*>(got.kernelParams[2]) == 2.0f);

  std::vector<float> hx = Download(x);
  auto expect_z = [&](float factor) {
    std::vector<float> want(kCount);
    for (int i = 0; i < kCount; ++i) want[i] = factor * hx[i] + 0.0f;
    return Download(z) == want;
  };
  cudaGraphExec_t exec = nullptr;
  OK(cudaGraphInstantiate(&exec, graph, 0));
  OK(cudaGraphLaunch(exec, stream));
  OK(cudaEventSynchronize(done));
  CHECK(expect_z(2.0f));

  // A clone runs as its original does.
  cudaGraph_t clone = nullptr;
  OK(cudaGraphClone(&clone, graph));
  cudaGraphExec_t clone_exec = nullptr;
  OK(cudaGraphInstantiate(&clone_exec, clone, 0));
  OK(cudaMemset(z, 0, kBytes));
  OK(cudaGraphLaunch(clone_exec, stream));
  OK(cudaStreamSynchronize(stream));
  CHECK(expect_z(2.0f));

  // The same topology with a = 7: the update is taken.
  float seven = 7.0f;
  void* args7[] = {&x, &y, &seven, &n};
  cudaKernelNodeParams kp7 = AxpyNode(args7);
  OK(cudaGraphKernelNodeSetParams(kernel, &kp7));
  cudaGraphExecUpdateResultInfo info{};
  OK(cudaGraphExecUpdate(exec, graph, &info));
  CHECK(info.result == cudaGraphExecUpdateSuccess);
  OK(cudaGraphLaunch(exec, stream));
  OK(cudaStreamSynchronize(stream));
  CHECK(expect_z(7.0f));

  // Another topology (the event record's edge gone): refused, naming why.
  cudaGraph_t rewired = nullptr;
  OK(cudaGraphCreate(&rewired, 0));
  cudaGraphNode_t r_memset = nullptr, r_kernel = nullptr, r_copy = nullptr, r_record = nullptr;
  OK(cudaGraphAddMemsetNode(&r_memset, rewired, nullptr, 0, &set));
  OK(cudaGraphAddKernelNode(&r_kernel, rewired, &r_memset, 1, &kp7));
  OK(cudaGraphAddMemcpyNode1D(&r_copy, rewired, &r_kernel, 1, z, y, kBytes, cudaMemcpyDeviceToDevice));
  OK(cudaGraphAddEventRecordNode(&r_record, rewired, nullptr, 0, done));
  CHECK(cudaGraphExecUpdate(exec, rewired, &info) == cudaErrorGraphExecUpdateFailure);
  CHECK(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  cudaGetLastError();

  // The executable graph's own kernel node: a = -1, without touching the graph.
  float minus_one = -1.0f;
  void* args_neg[] = {&x, &y, &minus_one, &n};
  cudaKernelNodeParams kp_neg = AxpyNode(args_neg);
  OK(cudaGraphExecKernelNodeSetParams(exec, kernel, &kp_neg));
  OK(cudaGraphLaunch(exec, stream));
  OK(cudaStreamSynchronize(stream));
  CHECK(expect_z(-1.0f));
  OK(cudaGraphKernelNodeGetParams(kernel, &got));
  CHECK(*static_cast<float*>(got.kernelParams[2]) == 7.0f);

  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphExecDestroy(clone_exec));
  for (cudaGraph_t g : {graph, clone, rewired}) OK(cudaGraphDestroy(g));
  OK(cudaEventDestroy(done));
  OK(cudaStreamDestroy(stream));
}

// A host node's function that holds its launch until the program lets it go: while it waits, the
// kernel before it has finished and the kernel after it has not started, on a GPU as on phos.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;   // calls so far
  int released = 0;  // calls the program let go
};

void CUDART_CB HoldUntilReleased(void* data) {
  auto* gate = static_cast<Gate*>(data);
  std::unique_lock lock(gate->mu);
  const int call = ++gate->entered;
  gate->cv.notify_all();
  gate->cv.wait(lock, [&] { return gate->released >= call; });
}

void CUDART_CB Count(void* data) {
  ++*static_cast<int*>(data);
}

std::vector<float> DownloadOn(cudaStream_t stream, const float* device) {
  std::vector<float> host(kCount);
  OK(cudaMemcpyAsync(host.data(), device, kBytes, cudaMemcpyDeviceToHost, stream));
  OK(cudaStreamSynchronize(stream));
  return host;
}

// memset y = 0 -> y = 2x + y -> host -> y = 3y, launched kLaunches times.
void HostNodeGraph(float* x, float* y) {
  constexpr int kLaunches = 3;
  cudaStream_t stream = nullptr, reader = nullptr;
  OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));
  int n = kCount;
  float two = 2.0f, three = 3.0f;
  void* axpy_args[] = {&x, &y, &two, &n};
  void* scale_args[] = {&y, &three, &n};
  cudaGraph_t graph = nullptr;
  OK(cudaGraphCreate(&graph, 0));
  cudaMemsetParams set{};
  set.dst = y;
  set.elementSize = 4;
  set.width = kCount;
  set.height = 1;
  cudaGraphNode_t memset = nullptr, first = nullptr, host = nullptr, second = nullptr;
  OK(cudaGraphAddMemsetNode(&memset, graph, nullptr, 0, &set));
  cudaKernelNodeParams axpy = AxpyNode(axpy_args);
  OK(cudaGraphAddKernelNode(&first, graph, &memset, 1, &axpy));
  Gate gate;
  int counted = 0;
  // Replaced below in the graph, and set again in the executable graph only.
  cudaHostNodeParams counting{Count, &counted};
  OK(cudaGraphAddHostNode(&host, graph, &first, 1, &counting));
  cudaKernelNodeParams scale{};
  scale.func = const_cast<void*>(Scale());
  scale.gridDim = kGrid;
  scale.blockDim = kBlock;
  scale.kernelParams = scale_args;
  OK(cudaGraphAddKernelNode(&second, graph, &host, 1, &scale));
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  OK(cudaGraphNodeGetType(host, &type));
  CHECK(type == cudaGraphNodeTypeHost);
  cudaHostNodeParams got{};
  OK(cudaGraphHostNodeGetParams(host, &got));
  CHECK(got.fn == Count && got.userData == &counted);
  const cudaHostNodeParams held{HoldUntilReleased, &gate};
  OK(cudaGraphHostNodeSetParams(host, &held));
  OK(cudaGraphHostNodeGetParams(host, &got));
  CHECK(got.fn == HoldUntilReleased && got.userData == &gate);

  std::vector<float> hx = Download(x), after_first(kCount), after_second(kCount);
  for (int i = 0; i < kCount; ++i) {
    after_first[i] = 2.0f * hx[i] + 0.0f;
    after_second[i] = 3.0f * after_first[i];
  }
  cudaGraphExec_t exec = nullptr;
  OK(cudaGraphInstantiate(&exec, graph, 0));
  // The graph's memset node clears y at each launch: a cudaMemset on the legacy stream would not be
  // ordered with the non-blocking launch stream.
  for (int launch = 1; launch <= kLaunches; ++launch) {
    OK(cudaGraphLaunch(exec, stream));
    bool entered = false;
    {
      std::unique_lock lock(gate.mu);
      entered = gate.cv.wait_for(lock, std::chrono::minutes(2), [&] { return gate.entered == launch; });
    }
    CHECK(entered);
    // The function holds the launch: the first kernel's result is there, the second's is not.
    CHECK(DownloadOn(reader, y) == after_first);
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
    {
      std::lock_guard lock(gate.mu);
      gate.released = launch;
    }
    gate.cv.notify_all();
    OK(cudaStreamSynchronize(stream));
    CHECK(DownloadOn(reader, y) == after_second);
  }
  CHECK(gate.entered == kLaunches);

  // The executable graph's host node set apart from its graph's: the function counts instead.
  OK(cudaGraphExecHostNodeSetParams(exec, host, &counting));
  for (int launch = 0; launch < kLaunches; ++launch) OK(cudaGraphLaunch(exec, stream));
  OK(cudaStreamSynchronize(stream));
  CHECK(counted == kLaunches && gate.entered == kLaunches);
  CHECK(DownloadOn(reader, y) == after_second);
  OK(cudaGraphHostNodeGetParams(host, &got));
  CHECK(got.fn == HoldUntilReleased);
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));

  // Captured: y = 0; y = 2x + y; the host function; y = 3y. The function runs at each replay.
  int replayed = 0;
  OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  OK(cudaMemsetAsync(y, 0, kBytes, stream));
  OK(cudaLaunchKernel(Axpy(), kGrid, kBlock, axpy_args, 0, stream));
  OK(cudaLaunchHostFunc(stream, Count, &replayed));
  OK(cudaLaunchKernel(Scale(), kGrid, kBlock, scale_args, 0, stream));
  cudaGraph_t captured = nullptr;
  OK(cudaStreamEndCapture(stream, &captured));
  CHECK(replayed == 0);
  size_t count = 0;
  OK(cudaGraphGetNodes(captured, nullptr, &count));
  CHECK(count == 4);
  OK(cudaGraphInstantiate(&exec, captured, 0));
  for (int replay = 0; replay < kReplays; ++replay) OK(cudaGraphLaunch(exec, stream));
  OK(cudaStreamSynchronize(stream));
  CHECK(replayed == kReplays);
  CHECK(DownloadOn(reader, y) == after_second);
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(captured));

  // A capture the global mode invalidated (a cudaMalloc during it) never runs its host function.
  int invalidated_calls = 0;
  OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  OK(cudaLaunchHostFunc(stream, Count, &invalidated_calls));
  float* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, kBytes) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t none = nullptr;
  CHECK(cudaStreamEndCapture(stream, &none) == cudaErrorStreamCaptureInvalidated && none == nullptr);
  cudaGetLastError();
  OK(cudaStreamSynchronize(stream));
  CHECK(invalidated_calls == 0);
  OK(cudaStreamDestroy(reader));
  OK(cudaStreamDestroy(stream));
}

}  // namespace

int main() {
  float *x = nullptr, *y = nullptr, *z = nullptr, *w = nullptr;
  for (float** p : {&x, &y, &z, &w}) OK(cudaMalloc(p, kBytes));
  std::vector<float> hx(kCount);
  for (int i = 0; i < kCount; ++i) hx[i] = static_cast<float>(i % 97) - 48.0f;
  OK(cudaMemcpy(x, hx.data(), kBytes, cudaMemcpyHostToDevice));
  OK(cudaMemset(w, 0, kBytes));
  CapturedGraph(x, y, z, w);
  ExplicitGraph(x, y, z);
  HostNodeGraph(x, y);
  for (float* p : {x, y, z, w}) OK(cudaFree(p));
  if (g_failures != 0) {
    std::printf("graph report: %d checks failed\n", g_failures);
    return 1;
  }
  std::printf(
      "graph report: a captured graph of %d nodes replayed %d times, an explicit graph updated, host nodes "
      "run in graph order, all checks held\n",
      captured_nodes, kReplays);
  return 0;
}
