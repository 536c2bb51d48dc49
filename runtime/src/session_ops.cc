// The session's call table (session_ops.h) and the dispatch of one ring record through it.
#include "session_ops.h"

#include <cublas_v2.h>
#include <nccl.h>

#include <array>
#include <type_traits>

#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::Op;

constexpr size_t kOpSlots = static_cast<size_t>(Op::kOpCount);

template <typename Args, CUresult (Session::*Fn)(const Args&, const Call&)>
CUresult Invoke(Session& session, const ipc::RecordView& record, const Call& call) {
  Args args{};
  // Our own copy: the producer may rewrite the ring under us.
  if constexpr (!std::is_empty_v<Args>) std::memcpy(&args, record.payload, sizeof(Args));
  return (session.*Fn)(args, call);
}

// `row` with the argument record and the handler of `Fn`.
template <typename Args, CUresult (Session::*Fn)(const Args&, const Call&)>
OpHandler Bind(OpHandler row) {
  row.record_bytes = std::is_empty_v<Args> ? 0 : sizeof(Args);
  row.invoke = &Invoke<Args, Fn>;
  return row;
}

}  // namespace

CUresult OpHandler::Malformed() const {
  switch (result) {
    case ResultKind::kCublasStatus:
      return static_cast<CUresult>(CUBLAS_STATUS_INVALID_VALUE);
    case ResultKind::kNcclResult:
      return static_cast<CUresult>(ncclInvalidArgument);
    case ResultKind::kCuResult:
      break;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult OpHandler::Unavailable() const {
  if (library == Library::kCublas) return static_cast<CUresult>(CUBLAS_STATUS_NOT_SUPPORTED);
  // Asynchronous NCCL calls report through the session's sticky CUresult.
  return result == ResultKind::kNcclResult ? static_cast<CUresult>(ncclSystemError)
                                           : CUDA_ERROR_NOT_SUPPORTED;
}

const OpHandler* FindOpHandler(uint16_t opcode) {
  static const std::array<OpHandler, kOpSlots> table = Session::BuildOpTable();
  if (opcode >= table.size() || table[opcode].invoke == nullptr) return nullptr;
  return &table[opcode];
}

std::array<OpHandler, kOpSlots> Session::BuildOpTable() {
  std::array<OpHandler, kOpSlots> t{};
  auto at = [&t](Op op) -> OpHandler& { return t[static_cast<size_t>(op)]; };
  constexpr auto kHead = RecordShape::kHead;
  constexpr auto kHandle = Placement::kHandleDevice;
  constexpr auto kCublas = ResultKind::kCublasStatus;
  constexpr auto kNccl = ResultKind::kNcclResult;
  constexpr uint32_t kCopyStream = offsetof(ipc::CopyArgs, stream);
  constexpr uint32_t kStreamOfPair = offsetof(ipc::StreamEventArgs, stream);

  // Filler the ring skips; any length.
  at(Op::kPad) = Bind<NoArgs, &Session::Pad>({.name = "padding", .shape = kHead});

  // Devices (session_devices.cc).
  at(Op::kDeviceGetCount) = Bind<NoArgs, &Session::DeviceGetCount>({.name = "cudaGetDeviceCount"});
  at(Op::kDeviceGetProperties) =
      Bind<ipc::DeviceArgs, &Session::DeviceGetProperties>({.name = "cudaGetDeviceProperties"});
  at(Op::kDriverGetVersion) = Bind<NoArgs, &Session::DriverGetVersion>({.name = "cudaDriverGetVersion"});
  at(Op::kSetDevice) = Bind<ipc::DeviceArgs, &Session::SetDevice>(
      {.name = "cudaSetDevice", .placement = Placement::kOwnChoice});
  at(Op::kMemGetInfo) = Bind<NoArgs, &Session::MemGetInfo>({.name = "cudaMemGetInfo"});
  at(Op::kDeviceReset) = Bind<NoArgs, &Session::DeviceReset>({.name = "cudaDeviceReset"});
  at(Op::kDeviceCanAccessPeer) =
      Bind<ipc::PeerArgs, &Session::DeviceCanAccessPeer>({.name = "cudaDeviceCanAccessPeer"});
  at(Op::kDeviceEnablePeer) = Bind<ipc::PeerArgs, &Session::DeviceEnablePeer>({.name = "cudaDeviceEnablePeerAccess"});
  at(Op::kDeviceDisablePeer) =
      Bind<ipc::PeerArgs, &Session::DeviceDisablePeer>({.name = "cudaDeviceDisablePeerAccess"});

  // Memory (session_memory.cc).
  at(Op::kMemAlloc) = Bind<ipc::SizeArgs, &Session::MemAlloc>({.name = "cudaMalloc"});
  at(Op::kMemFree) = Bind<ipc::PointerArgs, &Session::MemFree>({.name = "cudaFree"});
  at(Op::kMemcpyHtoD) = Bind<ipc::CopyArgs, &Session::MemcpyHtoD>({.name = "cudaMemcpy host to device",
                                                                   .shape = kHead,
                                                                   .placement = kHandle,
                                                                   .handle_offset = kCopyStream});
  at(Op::kMemcpyDtoH) = Bind<ipc::CopyArgs, &Session::MemcpyDtoH>(
      {.name = "cudaMemcpy device to host", .placement = kHandle, .handle_offset = kCopyStream});
  at(Op::kMemcpyDtoD) = Bind<ipc::CopyArgs, &Session::MemcpyDtoD>(
      {.name = "cudaMemcpy device to device", .placement = kHandle, .handle_offset = kCopyStream});
  at(Op::kMemset) = Bind<ipc::MemsetArgs, &Session::Memset>(
      {.name = "cudaMemset", .placement = kHandle, .handle_offset = offsetof(ipc::MemsetArgs, stream)});
  at(Op::kMemcpy2D) = Bind<ipc::Copy2DArgs, &Session::Memcpy2D>({.name = "cudaMemcpy2D",
                                                                 .shape = kHead,
                                                                 .placement = kHandle,
                                                                 .handle_offset = offsetof(ipc::Copy2DArgs, stream)});
  at(Op::kMemset2D) = Bind<ipc::Memset2DArgs, &Session::Memset2D>(
      {.name = "cudaMemset2D", .placement = kHandle, .handle_offset = offsetof(ipc::Memset2DArgs, stream)});
  at(Op::kMemFreeAsync) = Bind<ipc::StreamPointerArgs, &Session::MemFreeAsync>(
      {.name = "cudaFreeAsync", .placement = kHandle, .handle_offset = offsetof(ipc::StreamPointerArgs, stream)});

  // Streams and events (session_streams.cc).
  at(Op::kDeviceSynchronize) = Bind<NoArgs, &Session::DeviceSynchronize>({.name = "cudaDeviceSynchronize"});
  at(Op::kStreamCreate) = Bind<ipc::FlagsArgs, &Session::StreamCreate>({.name = "cudaStreamCreate"});
  at(Op::kStreamDestroy) =
      Bind<ipc::HandleArgs, &Session::StreamDestroy>({.name = "cudaStreamDestroy", .placement = kHandle});
  at(Op::kStreamSynchronize) = Bind<ipc::HandleArgs, &Session::StreamSynchronize>(
      {.name = "cudaStreamSynchronize", .placement = kHandle});
  at(Op::kStreamQuery) =
      Bind<ipc::HandleArgs, &Session::StreamQuery>({.name = "cudaStreamQuery", .placement = kHandle});
  at(Op::kStreamWaitEvent) = Bind<ipc::StreamEventArgs, &Session::StreamWaitEvent>(
      {.name = "cudaStreamWaitEvent", .placement = kHandle, .handle_offset = kStreamOfPair});
  at(Op::kEventCreate) = Bind<ipc::FlagsArgs, &Session::EventCreate>({.name = "cudaEventCreate"});
  at(Op::kEventDestroy) =
      Bind<ipc::HandleArgs, &Session::EventDestroy>({.name = "cudaEventDestroy", .placement = kHandle});
  at(Op::kEventRecord) = Bind<ipc::StreamEventArgs, &Session::EventRecord>(
      {.name = "cudaEventRecord", .placement = kHandle, .handle_offset = kStreamOfPair});
  at(Op::kEventSynchronize) = Bind<ipc::HandleArgs, &Session::EventSynchronize>(
      {.name = "cudaEventSynchronize", .placement = kHandle});
  at(Op::kEventQuery) =
      Bind<ipc::HandleArgs, &Session::EventQuery>({.name = "cudaEventQuery", .placement = kHandle});
  // `stream` holds the start event.
  at(Op::kEventElapsedTime) = Bind<ipc::StreamEventArgs, &Session::EventElapsedTime>(
      {.name = "cudaEventElapsedTime", .placement = kHandle, .handle_offset = kStreamOfPair});

  at(Op::kStreamCreateWithPriority) = Bind<ipc::StreamCreateArgs, &Session::StreamCreateWithPriority>(
      {.name = "cudaStreamCreateWithPriority"});
  at(Op::kStreamGetInfo) = Bind<ipc::HandleArgs, &Session::StreamGetInfo>(
      {.name = "cudaStreamGetPriority / GetFlags / GetDevice / GetId", .placement = kHandle});
  at(Op::kStreamPriorityRange) =
      Bind<NoArgs, &Session::StreamPriorityRange>({.name = "cudaDeviceGetStreamPriorityRange"});
  at(Op::kLaunchHostFunc) = Bind<ipc::HostFnArgs, &Session::LaunchHostFunc>(
      {.name = "cudaLaunchHostFunc", .placement = kHandle, .handle_offset = offsetof(ipc::HostFnArgs, stream)});

  // Modules and launches (session_modules.cc).
  at(Op::kModuleChunk) = Bind<ipc::ModuleChunkArgs, &Session::ModuleChunk>(
      {.name = "__cudaRegisterFatBinary", .shape = kHead, .placement = Placement::kDeviceZero});
  at(Op::kFunctionGet) = Bind<ipc::FunctionGetArgs, &Session::FunctionGet>(
      {.name = "__cudaRegisterFunction", .shape = kHead, .placement = Placement::kDeviceZero});
  at(Op::kModuleLoadResult) = Bind<ipc::HandleArgs, &Session::ModuleLoadResult>({.name = "cuModuleLoadData"});
  at(Op::kModuleUnload) = Bind<ipc::HandleArgs, &Session::ModuleUnload>({.name = "cuModuleUnload"});
  at(Op::kLaunch) =
      Bind<ipc::LaunchArgs, &Session::Launch>({.name = "cudaLaunchKernel",
                                               .shape = kHead,
                                               .placement = kHandle,
                                               .handle_offset = offsetof(ipc::LaunchArgs, stream)});

  // Launch attributes and module globals (session_functions.cc): on the current device, whose
  // instance of the kernel's module they concern; a launch on its stream's.
  at(Op::kFuncGetAttributes) =
      Bind<ipc::FunctionArgs, &Session::FuncGetAttributes>({.name = "cudaFuncGetAttributes"});
  at(Op::kFuncSetAttribute) = Bind<ipc::FuncAttributeArgs, &Session::FuncSetAttribute>({.name = "cudaFuncSetAttribute"});
  at(Op::kFuncSetCacheConfig) =
      Bind<ipc::FuncCacheConfigArgs, &Session::FuncSetCacheConfig>({.name = "cudaFuncSetCacheConfig"});
  at(Op::kOccupancyMaxBlocks) = Bind<ipc::OccupancyArgs, &Session::OccupancyMaxBlocks>(
      {.name = "cudaOccupancyMaxActiveBlocksPerMultiprocessor"});
  at(Op::kOccupancyDynamicSMem) = Bind<ipc::OccupancySMemArgs, &Session::OccupancyDynamicSMem>(
      {.name = "cudaOccupancyAvailableDynamicSMemPerBlock"});
  at(Op::kLaunchEx) = Bind<ipc::LaunchExArgs, &Session::LaunchEx>(
      {.name = "cudaLaunchKernelExC",
       .shape = kHead,
       .placement = kHandle,
       .handle_offset = offsetof(ipc::LaunchExArgs, launch) + offsetof(ipc::LaunchArgs, stream)});
  at(Op::kModuleGlobalGet) =
      Bind<ipc::FunctionGetArgs, &Session::ModuleGlobalGet>({.name = "__cudaRegisterVar", .shape = kHead});

  // cuBLAS (session_blas.cc, session_blas_gemm.cc). The compute calls are asynchronous (a Level 1
  // reduction in host pointer mode aside): they answer in CUresult.
  at(Op::kBlasCreate) = Bind<NoArgs, &Session::BlasCreate>(
      {.name = "cublasCreate", .result = kCublas, .library = Library::kCublas});
  at(Op::kBlasDestroy) = Bind<ipc::HandleArgs, &Session::BlasDestroy>(
      {.name = "cublasDestroy", .placement = kHandle, .result = kCublas, .library = Library::kCublas});
  at(Op::kBlasSetStream) = Bind<ipc::StreamEventArgs, &Session::BlasSetStream>(
      {.name = "cublasSetStream",
       .placement = kHandle,
       .handle_offset = offsetof(ipc::StreamEventArgs, event),  // the cuBLAS handle
       .result = kCublas,
       .library = Library::kCublas});
  at(Op::kBlasSetMathMode) = Bind<ipc::BlasModeArgs, &Session::BlasSetMathMode>(
      {.name = "cublasSetMathMode", .placement = kHandle, .result = kCublas, .library = Library::kCublas});
  at(Op::kBlasGemm) = Bind<ipc::GemmArgs, &Session::Gemm>(
      {.name = "cuBLAS GEMM", .placement = kHandle, .library = Library::kCublas});
  at(Op::kBlasLevel1) = Bind<ipc::BlasLevel1Args, &Session::BlasLevel1>(
      {.name = "cuBLAS Level 1", .placement = kHandle, .library = Library::kCublas});
  at(Op::kBlasLevel2) = Bind<ipc::BlasLevel2Args, &Session::BlasLevel2>(
      {.name = "cuBLAS Level 2", .placement = kHandle, .library = Library::kCublas});
  at(Op::kBlasLevel3) = Bind<ipc::BlasLevel3Args, &Session::BlasLevel3>(
      {.name = "cuBLAS Level 3", .placement = kHandle, .library = Library::kCublas});

  // cuBLASLt (session_blas_lt.cc): asynchronous, on the record's stream's device.
  at(Op::kBlasLtMatmul) = Bind<ipc::BlasLtMatmulArgs, &Session::BlasLtMatmul>(
      {.name = "cublasLtMatmul",
       .placement = kHandle,
       .handle_offset = offsetof(ipc::BlasLtMatmulArgs, stream),
       .library = Library::kCublasLt});

  // NCCL (session_nccl.cc). Collectives are asynchronous: they answer in CUresult.
  at(Op::kNcclCommInitAll) = Bind<ipc::NcclInitAllArgs, &Session::NcclInitAll>(
      {.name = "ncclCommInitAll", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommInitRank) = Bind<ipc::NcclInitRankArgs, &Session::NcclInitRank>(
      {.name = "ncclCommInitRank", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommSplit) = Bind<ipc::NcclSplitArgs, &Session::NcclSplit>(
      {.name = "ncclCommSplit", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommDestroy) = Bind<ipc::HandleArgs, &Session::NcclDestroy>(
      {.name = "ncclCommDestroy", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommCount) = Bind<ipc::HandleArgs, &Session::NcclCount>(
      {.name = "ncclCommCount", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommUserRank) = Bind<ipc::HandleArgs, &Session::NcclUserRank>(
      {.name = "ncclCommUserRank", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclGroupStart) = Bind<NoArgs, &Session::NcclGroupStart>(
      {.name = "ncclGroupStart", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclGroupEnd) = Bind<NoArgs, &Session::NcclGroupEnd>({.name = "ncclGroupEnd",
                                                                .placement = Placement::kOwnChoice,
                                                                .result = kNccl,
                                                                .library = Library::kNccl});
  static_assert(offsetof(ipc::NcclCollectiveArgs, comm) == 0 && offsetof(ipc::NcclP2pArgs, comm) == 0,
                "Placement::kNcclStream reads the communicator at the record's start");
  // A collective runs in its stream's context (the communicator's for a default stream), so that
  // a restoring session's gate makes that stream wait for the buffers it names.
  at(Op::kNcclCollective) = Bind<ipc::NcclCollectiveArgs, &Session::NcclCollective>(
      {.name = "NCCL collective",
       .placement = Placement::kNcclStream,
       .handle_offset = offsetof(ipc::NcclCollectiveArgs, stream),
       .library = Library::kNccl});

  // NCCL point-to-point and communicator lifecycle (session_nccl.cc, session_nccl_collectives.cc).
  // Sends and receives are queued in the open group: asynchronous, like collectives.
  constexpr uint32_t kP2pStream = offsetof(ipc::NcclP2pArgs, stream);
  at(Op::kNcclSend) = Bind<ipc::NcclP2pArgs, &Session::NcclSend>({.name = "ncclSend",
                                                                   .placement = Placement::kNcclStream,
                                                                   .handle_offset = kP2pStream,
                                                                   .library = Library::kNccl});
  at(Op::kNcclRecv) = Bind<ipc::NcclP2pArgs, &Session::NcclRecv>({.name = "ncclRecv",
                                                                   .placement = Placement::kNcclStream,
                                                                   .handle_offset = kP2pStream,
                                                                   .library = Library::kNccl});
  at(Op::kNcclGroupEndSync) = Bind<ipc::NcclGroupEndArgs, &Session::NcclGroupEndSync>({.name = "ncclGroupEnd (sends and receives)",
                                                                        .placement = Placement::kOwnChoice,
                                                                        .result = kNccl,
                                                                        .library = Library::kNccl});
  at(Op::kNcclCommFinalize) = Bind<ipc::HandleArgs, &Session::NcclFinalize>(
      {.name = "ncclCommFinalize", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommAbort) = Bind<ipc::HandleArgs, &Session::NcclAbort>(
      {.name = "ncclCommAbort", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommGetAsyncError) = Bind<ipc::HandleArgs, &Session::NcclGetAsyncError>(
      {.name = "ncclCommGetAsyncError", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclCommCuDevice) = Bind<ipc::HandleArgs, &Session::NcclCuDevice>(
      {.name = "ncclCommCuDevice", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclRedOpCreate) = Bind<ipc::NcclRedOpArgs, &Session::NcclRedOpCreate>(
      {.name = "ncclRedOpCreatePreMulSum", .result = kNccl, .library = Library::kNccl});
  at(Op::kNcclRedOpDestroy) = Bind<ipc::NcclRedOpArgs, &Session::NcclRedOpDestroy>(
      {.name = "ncclRedOpDestroy", .result = kNccl, .library = Library::kNccl});

  // CUDA graphs (session_graphs.cc): each runs on its graph's or executable graph's device (the
  // virtual handle at the record's start), a launch and an upload on their stream's.
  constexpr uint32_t kOwner = 0;
  static_assert(offsetof(ipc::GraphNodeArgs, owner) == 0 && offsetof(ipc::GraphNodeRef, owner) == 0 &&
                offsetof(ipc::GraphEdgesArgs, graph) == 0 && offsetof(ipc::GraphInstantiateArgs, graph) == 0 &&
                offsetof(ipc::GraphUpdateArgs, exec) == 0);
  at(Op::kGraphCreate) = Bind<NoArgs, &Session::GraphCreate>({.name = "cudaGraphCreate"});
  at(Op::kGraphDestroy) =
      Bind<ipc::HandleArgs, &Session::GraphDestroy>({.name = "cudaGraphDestroy", .placement = kHandle});
  at(Op::kGraphAddNode) = Bind<ipc::GraphNodeArgs, &Session::GraphAddNode>(
      {.name = "cudaGraphAdd*Node", .shape = kHead, .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphAddDependencies) = Bind<ipc::GraphEdgesArgs, &Session::GraphAddDependencies>(
      {.name = "cudaGraphAddDependencies", .shape = kHead, .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphDestroyNode) = Bind<ipc::GraphNodeRef, &Session::GraphDestroyNode>(
      {.name = "cudaGraphDestroyNode", .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphGetNodes) = Bind<ipc::HandleArgs, &Session::GraphGetNodes>(
      {.name = "cudaGraphGetNodes", .placement = kHandle});
  at(Op::kGraphNodeGetParams) = Bind<ipc::GraphNodeRef, &Session::GraphNodeGetParams>(
      {.name = "cudaGraphKernelNodeGetParams", .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphNodeSetParams) = Bind<ipc::GraphNodeArgs, &Session::GraphNodeSetParams>(
      {.name = "cudaGraphKernelNodeSetParams", .shape = kHead, .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphClone) = Bind<ipc::HandleArgs, &Session::GraphClone>({.name = "cudaGraphClone", .placement = kHandle});
  at(Op::kGraphInstantiate) = Bind<ipc::GraphInstantiateArgs, &Session::GraphInstantiate>(
      {.name = "cudaGraphInstantiate", .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphUpload) = Bind<ipc::StreamEventArgs, &Session::GraphUpload>(
      {.name = "cudaGraphUpload", .placement = kHandle, .handle_offset = kStreamOfPair});
  at(Op::kGraphLaunch) = Bind<ipc::StreamEventArgs, &Session::GraphLaunch>(
      {.name = "cudaGraphLaunch", .shape = kHead, .placement = kHandle, .handle_offset = kStreamOfPair});
  at(Op::kGraphExecUpdate) = Bind<ipc::GraphUpdateArgs, &Session::GraphExecUpdate>(
      {.name = "cudaGraphExecUpdate", .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphExecNodeSetParams) = Bind<ipc::GraphNodeArgs, &Session::GraphExecNodeSetParams>(
      {.name = "cudaGraphExecKernelNodeSetParams", .shape = kHead, .placement = kHandle, .handle_offset = kOwner});
  at(Op::kGraphExecDestroy) =
      Bind<ipc::HandleArgs, &Session::GraphExecDestroy>({.name = "cudaGraphExecDestroy", .placement = kHandle});
  // Stream capture (session_capture.cc), on the stream's device.
  at(Op::kStreamBeginCapture) = Bind<ipc::CaptureArgs, &Session::StreamBeginCapture>(
      {.name = "cudaStreamBeginCapture", .placement = kHandle, .handle_offset = offsetof(ipc::CaptureArgs, stream)});
  at(Op::kStreamEndCapture) = Bind<ipc::CaptureArgs, &Session::StreamEndCapture>(
      {.name = "cudaStreamEndCapture", .placement = kHandle, .handle_offset = offsetof(ipc::CaptureArgs, stream)});
  at(Op::kStreamCaptureInfo) = Bind<ipc::HandleArgs, &Session::StreamCaptureInfo>(
      {.name = "cudaStreamGetCaptureInfo", .placement = kHandle});
  return t;
}

CUresult Session::LibraryReady(const OpHandler& handler) {
  switch (handler.library) {
    case Library::kCuda:
      return CUDA_SUCCESS;
    case Library::kCublas:
      if (driver_->has_cublas()) return CUDA_SUCCESS;
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 60, "pid {}: {} refused: the driver table has no cuBLAS", pid_,
                         handler.name);
      return handler.Unavailable();
    case Library::kCublasLt:
      if (driver_->has_cublaslt()) return CUDA_SUCCESS;
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 60, "pid {}: {} refused: the driver table has no cuBLASLt", pid_,
                         handler.name);
      return handler.Unavailable();
    case Library::kNccl:
      if (driver_->has_nccl() && group_) return CUDA_SUCCESS;
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 60, "pid {}: {} refused: {}", pid_, handler.name,
                         driver_->has_nccl()
                             ? "the function declared 1 GPU (deploy it with --gpus N to use NCCL)"
                             : "the driver table has no NCCL");
      return handler.Unavailable();
  }
  return handler.Unavailable();
}

CUresult Session::Execute(const ipc::RecordView& record, size_t* reply_len) {
  const OpHandler* handler = FindOpHandler(record.header.opcode);
  if (handler == nullptr) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: record {} refused: opcode {} names no call", pid_,
                       record.header.seq, record.header.opcode);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = LibraryReady(*handler); r != CUDA_SUCCESS) return r;
  size_t length = record.header.length;
  if (!handler->Fits(length)) {
    PHOS_LOG_EVERY_SEC(
        Warn, "runtime", 1, "pid {}: {} refused: a record of {} bytes where its arguments take {}{}", pid_,
        handler->name, length, handler->record_bytes, handler->shape == RecordShape::kHead ? " or more" : "");
    return handler->Malformed();
  }
  Call call{.name = handler->name,
            .tail = {record.payload + handler->record_bytes, length - handler->record_bytes},
            .reply = ring_->reply_payload_for_write(),
            .reply_len = reply_len};
  if (CUresult captured = CUDA_SUCCESS; !captures_.empty() && Capture(*handler, record, call, &captured)) return captured;
  return handler->invoke(*this, record, call);
}

CUresult Session::Pad(const NoArgs&, const Call&) {
  return CUDA_SUCCESS;
}

}  // namespace phos::runtime
