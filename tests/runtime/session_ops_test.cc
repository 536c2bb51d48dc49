// The session's call table (runtime/src/session_ops.h): every opcode has one named handler, and
// a record decodes only at its call's size.
#include "session_ops.h"

#include <cublas_v2.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <set>
#include <string>
#include <vector>

namespace phos::runtime {
namespace {

using ipc::Op;

ipc::RecordView RecordOf(Op op, const std::vector<uint8_t>& payload) {
  ipc::RecordView record;
  record.header = {static_cast<uint16_t>(op), 0, static_cast<uint32_t>(payload.size()), 1};
  record.payload = payload.data();
  return record;
}

TEST(SessionOpsTest, EveryOpcodeHasOneNamedHandler) {
  std::set<std::string> names;
  for (uint16_t op = 0; op < static_cast<uint16_t>(Op::kOpCount); ++op) {
    const OpHandler* handler = FindOpHandler(op);
    ASSERT_NE(handler, nullptr) << "opcode " << op;
    ASSERT_NE(handler->name, nullptr) << "opcode " << op;
    EXPECT_TRUE(names.insert(handler->name).second) << "two handlers named " << handler->name;
  }
}

TEST(SessionOpsTest, OpcodesPastTheTableHaveNoHandler) {
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kOpCount)), nullptr);
  EXPECT_EQ(FindOpHandler(0xffff), nullptr);
}

TEST(SessionOpsTest, ArgumentRecordSizesAreTheWireStructs) {
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemAlloc))->record_bytes, sizeof(ipc::SizeArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kLaunch))->record_bytes, sizeof(ipc::LaunchArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasGemm))->record_bytes, sizeof(ipc::GemmArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasLevel1))->record_bytes, sizeof(ipc::BlasLevel1Args));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasLevel2))->record_bytes, sizeof(ipc::BlasLevel2Args));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasLevel3))->record_bytes, sizeof(ipc::BlasLevel3Args));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasLtMatmul))->record_bytes, sizeof(ipc::BlasLtMatmulArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclCollective))->record_bytes,
            sizeof(ipc::NcclCollectiveArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kDeviceGetCount))->record_bytes, 0u);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kDeviceGetProperties))->record_bytes, sizeof(ipc::DeviceArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kDeviceEnablePeer))->record_bytes, sizeof(ipc::PeerArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kDeviceReset))->record_bytes, 0u);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemcpy2D))->record_bytes, sizeof(ipc::Copy2DArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemcpy2D))->shape, RecordShape::kHead);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemset2D))->record_bytes, sizeof(ipc::Memset2DArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemFreeAsync))->record_bytes, sizeof(ipc::StreamPointerArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemFreeAsync))->handle_offset,
            offsetof(ipc::StreamPointerArgs, stream));
  for (Op op : {Op::kNcclSend, Op::kNcclRecv}) {
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->record_bytes, sizeof(ipc::NcclP2pArgs));
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->handle_offset, offsetof(ipc::NcclP2pArgs, stream));
  }
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclGroupEndSync))->record_bytes, sizeof(ipc::NcclGroupEndArgs));
  for (Op op : {Op::kNcclCommFinalize, Op::kNcclCommAbort, Op::kNcclCommGetAsyncError, Op::kNcclCommCuDevice}) {
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->record_bytes, sizeof(ipc::HandleArgs));
  }
  for (Op op : {Op::kNcclRedOpCreate, Op::kNcclRedOpDestroy}) {
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->record_bytes, sizeof(ipc::NcclRedOpArgs));
  }
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kStreamCreateWithPriority))->record_bytes,
            sizeof(ipc::StreamCreateArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kStreamGetInfo))->record_bytes, sizeof(ipc::HandleArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kStreamPriorityRange))->record_bytes, 0u);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kLaunchHostFunc))->record_bytes, sizeof(ipc::HostFnArgs));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kLaunchHostFunc))->shape, RecordShape::kExact);
}

TEST(SessionOpsTest, LaunchAttributeAndModuleGlobalRecordsAreTheirWireStructs) {
  auto handler = [](Op op) { return FindOpHandler(static_cast<uint16_t>(op)); };
  EXPECT_EQ(handler(Op::kFuncGetAttributes)->record_bytes, sizeof(ipc::FunctionArgs));
  EXPECT_EQ(handler(Op::kFuncSetAttribute)->record_bytes, sizeof(ipc::FuncAttributeArgs));
  EXPECT_EQ(handler(Op::kFuncSetCacheConfig)->record_bytes, sizeof(ipc::FuncCacheConfigArgs));
  EXPECT_EQ(handler(Op::kOccupancyMaxBlocks)->record_bytes, sizeof(ipc::OccupancyArgs));
  EXPECT_EQ(handler(Op::kOccupancyDynamicSMem)->record_bytes, sizeof(ipc::OccupancySMemArgs));
  for (Op op : {Op::kFuncGetAttributes, Op::kFuncSetAttribute, Op::kFuncSetCacheConfig, Op::kOccupancyMaxBlocks,
                Op::kOccupancyDynamicSMem}) {
    // The function on the caller's current device, as the runtime's calls mean it.
    EXPECT_EQ(handler(op)->shape, RecordShape::kExact) << handler(op)->name;
    EXPECT_EQ(handler(op)->placement, Placement::kCurrentDevice) << handler(op)->name;
  }
  // Attributes and parameters follow a launch with attributes, which runs on its stream's device.
  EXPECT_EQ(handler(Op::kLaunchEx)->record_bytes, sizeof(ipc::LaunchExArgs));
  EXPECT_EQ(handler(Op::kLaunchEx)->shape, RecordShape::kHead);
  EXPECT_EQ(handler(Op::kLaunchEx)->placement, Placement::kHandleDevice);
  EXPECT_EQ(handler(Op::kLaunchEx)->handle_offset, offsetof(ipc::LaunchExArgs, launch) + offsetof(ipc::LaunchArgs, stream));
  // A global's name follows its lookup, on the current device (whose instance of the module it is).
  EXPECT_EQ(handler(Op::kModuleGlobalGet)->record_bytes, sizeof(ipc::FunctionGetArgs));
  EXPECT_EQ(handler(Op::kModuleGlobalGet)->shape, RecordShape::kHead);
  EXPECT_EQ(handler(Op::kModuleGlobalGet)->placement, Placement::kCurrentDevice);
  std::vector<uint8_t> short_launch(sizeof(ipc::LaunchExArgs) - 1, 0);
  ipc::LaunchExArgs out{};
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kLaunchEx, short_launch), &out));
  EXPECT_EQ(handler(Op::kOccupancyMaxBlocks)->Malformed(), CUDA_ERROR_INVALID_VALUE);
}

TEST(SessionOpsTest, ExactRecordsDecodeOnlyAtTheirSize) {
  ipc::MemsetArgs memset{.dst = 0x10, .bytes = 64, .stream = 16, .value = 7, .element_bytes = 0};
  std::vector<uint8_t> bytes(sizeof(memset));
  std::memcpy(bytes.data(), &memset, sizeof(memset));
  ipc::MemsetArgs out{};
  ASSERT_TRUE(DecodeRecord(RecordOf(Op::kMemset, bytes), &out));
  EXPECT_EQ(out.bytes, 64u);
  EXPECT_EQ(out.value, 7u);
  std::vector<uint8_t> shorter(bytes.begin(), bytes.end() - 1);
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kMemset, shorter), &out));
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kMemset, longer), &out));
  // Another call's argument record does not decode from this call's bytes.
  ipc::HandleArgs handle{};
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kMemset, bytes), &handle));
}

TEST(SessionOpsTest, HeadRecordsTakeTrailingBytesButNotFewer) {
  std::vector<uint8_t> launch(sizeof(ipc::LaunchArgs) + 24, 0);
  ipc::LaunchArgs out{};
  EXPECT_TRUE(DecodeRecord(RecordOf(Op::kLaunch, launch), &out));
  launch.resize(sizeof(ipc::LaunchArgs) - 1);
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kLaunch, launch), &out));
}

TEST(SessionOpsTest, RefusalsSpeakTheCallsResultCode) {
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemcpyDtoH))->Malformed(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasSetStream))->Malformed(),
            static_cast<CUresult>(CUBLAS_STATUS_INVALID_VALUE));
  // Asynchronous library calls answer through the session's sticky CUresult.
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasGemm))->Malformed(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclCommSplit))->Malformed(),
            static_cast<CUresult>(ncclInvalidArgument));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclCollective))->Malformed(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kBlasCreate))->Unavailable(),
            static_cast<CUresult>(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclGroupStart))->Unavailable(),
            static_cast<CUresult>(ncclSystemError));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclCollective))->Unavailable(),
            CUDA_ERROR_NOT_SUPPORTED);
  // Sends and receives are asynchronous like collectives; the group's end that waits, and the
  // communicator calls, answer in ncclResult_t.
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclSend))->Malformed(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclRecv))->Unavailable(), CUDA_ERROR_NOT_SUPPORTED);
  for (Op op : {Op::kNcclGroupEndSync, Op::kNcclCommFinalize, Op::kNcclCommAbort, Op::kNcclCommGetAsyncError,
                Op::kNcclCommCuDevice, Op::kNcclRedOpCreate, Op::kNcclRedOpDestroy}) {
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->Malformed(), static_cast<CUresult>(ncclInvalidArgument));
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->Unavailable(), static_cast<CUresult>(ncclSystemError));
  }
}

TEST(SessionOpsTest, CallsNamingAHandleRunOnItsDevice) {
  const OpHandler* set_stream = FindOpHandler(static_cast<uint16_t>(Op::kBlasSetStream));
  EXPECT_EQ(set_stream->placement, Placement::kHandleDevice);
  EXPECT_EQ(set_stream->handle_offset, offsetof(ipc::StreamEventArgs, event));
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kModuleChunk))->placement, Placement::kDeviceZero);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kMemAlloc))->placement, Placement::kCurrentDevice);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kNcclCollective))->handle_offset,
            offsetof(ipc::NcclCollectiveArgs, stream));
  // NCCL work on a default stream runs on its communicator's device.
  for (Op op : {Op::kNcclCollective, Op::kNcclSend, Op::kNcclRecv}) {
    EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(op))->placement, Placement::kNcclStream);
  }
  // A stream's information and its host functions run in the stream's context.
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kStreamGetInfo))->placement, Placement::kHandleDevice);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kLaunchHostFunc))->placement, Placement::kHandleDevice);
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kLaunchHostFunc))->handle_offset, offsetof(ipc::HostFnArgs, stream));
  // A new stream is the current device's.
  EXPECT_EQ(FindOpHandler(static_cast<uint16_t>(Op::kStreamCreateWithPriority))->placement, Placement::kCurrentDevice);
  // cuBLAS compute records run on their handle's device; the handle leads each record.
  for (Op op : {Op::kBlasGemm, Op::kBlasLevel1, Op::kBlasLevel2, Op::kBlasLevel3}) {
    const OpHandler* h = FindOpHandler(static_cast<uint16_t>(op));
    EXPECT_EQ(h->placement, Placement::kHandleDevice) << h->name;
    EXPECT_EQ(h->handle_offset, 0u) << h->name;
    EXPECT_EQ(h->Malformed(), CUDA_ERROR_INVALID_VALUE) << h->name;
  }
  // cublasLtMatmul carries no handle of phosd's: it runs on its stream's device, and answers in
  // CUresult (asynchronous), refused as not supported when the driver table has no cuBLASLt.
  const OpHandler* lt = FindOpHandler(static_cast<uint16_t>(Op::kBlasLtMatmul));
  EXPECT_EQ(lt->placement, Placement::kHandleDevice);
  EXPECT_EQ(lt->handle_offset, offsetof(ipc::BlasLtMatmulArgs, stream));
  EXPECT_EQ(lt->Malformed(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(lt->Unavailable(), CUDA_ERROR_NOT_SUPPORTED);
}

TEST(SessionOpsTest, GraphRecordsRunOnTheirGraphsOrStreamsDevice) {
  auto handler = [](Op op) { return FindOpHandler(static_cast<uint16_t>(op)); };
  // A node's record carries its dependencies and a kernel's parameters after it.
  for (Op op : {Op::kGraphAddNode, Op::kGraphNodeSetParams, Op::kGraphExecNodeSetParams}) {
    EXPECT_EQ(handler(op)->record_bytes, sizeof(ipc::GraphNodeArgs)) << handler(op)->name;
    EXPECT_EQ(handler(op)->shape, RecordShape::kHead) << handler(op)->name;
  }
  EXPECT_EQ(handler(Op::kGraphAddDependencies)->shape, RecordShape::kHead);
  // Everything about a graph or an executable graph runs on its device, named first in the record.
  for (Op op : {Op::kGraphDestroy, Op::kGraphAddNode, Op::kGraphAddDependencies, Op::kGraphDestroyNode,
                Op::kGraphGetNodes, Op::kGraphNodeGetParams, Op::kGraphClone, Op::kGraphInstantiate,
                Op::kGraphExecUpdate, Op::kGraphExecNodeSetParams, Op::kGraphExecDestroy}) {
    EXPECT_EQ(handler(op)->placement, Placement::kHandleDevice) << handler(op)->name;
    EXPECT_EQ(handler(op)->handle_offset, 0u) << handler(op)->name;
    EXPECT_EQ(handler(op)->shape == RecordShape::kExact, op != Op::kGraphAddNode && op != Op::kGraphAddDependencies &&
                                                             op != Op::kGraphExecNodeSetParams)
        << handler(op)->name;
  }
  // A launch, an upload and a capture run on their stream's device.
  for (Op op : {Op::kGraphLaunch, Op::kGraphUpload}) {
    EXPECT_EQ(handler(op)->record_bytes, sizeof(ipc::StreamEventArgs));
    EXPECT_EQ(handler(op)->handle_offset, offsetof(ipc::StreamEventArgs, stream));
  }
  for (Op op : {Op::kStreamBeginCapture, Op::kStreamEndCapture}) {
    EXPECT_EQ(handler(op)->record_bytes, sizeof(ipc::CaptureArgs));
    EXPECT_EQ(handler(op)->handle_offset, offsetof(ipc::CaptureArgs, stream));
  }
  EXPECT_EQ(handler(Op::kGraphCreate)->placement, Placement::kCurrentDevice);
  std::vector<uint8_t> short_node(sizeof(ipc::GraphNodeArgs) - 1, 0);
  ipc::GraphNodeArgs out{};
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kGraphAddNode, short_node), &out));
}

TEST(SessionOpsTest, HostFunctionRecordsDecodeTheirSlot) {
  ipc::HostFnArgs launch{.stream = 32, .slot = 17, .pad = 0};
  std::vector<uint8_t> bytes(sizeof(launch));
  std::memcpy(bytes.data(), &launch, sizeof(launch));
  ipc::HostFnArgs out{};
  ASSERT_TRUE(DecodeRecord(RecordOf(Op::kLaunchHostFunc, bytes), &out));
  EXPECT_EQ(out.slot, 17u);
  EXPECT_EQ(out.stream, 32u);
  bytes.pop_back();
  EXPECT_FALSE(DecodeRecord(RecordOf(Op::kLaunchHostFunc, bytes), &out));
}

}  // namespace
}  // namespace phos::runtime
