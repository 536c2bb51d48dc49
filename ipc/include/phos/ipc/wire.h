// Messages between a function process's frontend (libphos-cudart / libphos-cublas) and phosd's
// API server: the hello on the control socket, the ring's record header, and one plain struct
// per opcode. Both sides are built from this header; a change to any struct, or to what a field
// means, bumps kWireVersion (the hello refuses a mismatched peer, naming both versions).
#pragma once

#include <cstddef>
#include <cstdint>

namespace phos::ipc {

inline constexpr uint32_t kWireMagic = 0x534f4850;  // "PHOS" little-endian
inline constexpr uint32_t kWireVersion = 14;
inline constexpr size_t kTokenChars = 32;        // 128-bit token, hex
inline constexpr size_t kAnswerMessageChars = 200;

// Frontend -> server, first datagram on the control socket.
struct Hello {
  uint32_t magic;
  uint32_t wire_version;
  int32_t pid;
  uint32_t reserved;
  char token[kTokenChars];
};
static_assert(sizeof(Hello) == 48);

// Server -> frontend. status 0 = accepted, with the ring's memfd attached (SCM_RIGHTS).
struct Answer {
  uint32_t magic;
  uint32_t wire_version;  // the server's
  int32_t status;         // 0 ok, otherwise a cudaError_t value for the frontend to report
  uint32_t reserved;
  uint64_t ring_bytes;    // size of the memfd
  char message[kAnswerMessageChars];  // NUL-terminated reason when refused
};
static_assert(sizeof(Answer) == 224);

// Record flags.
inline constexpr uint16_t kFlagReply = 1;  // the frontend waits for completion and reads the reply area

// A ring record: this header, then `length` payload bytes, padded to kRecordAlign.
struct RecordHeader {
  uint16_t opcode;
  uint16_t flags;
  uint32_t length;
  uint64_t seq;
};
static_assert(sizeof(RecordHeader) == 16);
// 16, the header size: the space left before the ring's end is then always room for a header.
inline constexpr size_t kRecordAlign = 16;

// The reply area holds this header then `length` bytes.
struct ReplyHeader {
  int32_t result;   // CUresult / cublasStatus_t of the call (0 = success)
  uint32_t length;
  uint64_t seq;
};
static_assert(sizeof(ReplyHeader) == 16);

enum class Op : uint16_t {
  kPad = 0,               // filler to the end of the ring; no payload meaning
  kDeviceGetCount,        // -> i32
  kDeviceGetProperties,   // DeviceArgs -> DeviceProperties: every attribute, name, UUID, memory
  kDriverGetVersion,      // -> i32
  kMemAlloc,              // SizeArgs -> u64 device pointer
  kMemFree,               // PointerArgs
  kMemcpyHtoD,            // CopyArgs + bytes (host data rides in the record)
  kMemcpyDtoH,            // CopyArgs -> bytes (reply area)
  kMemcpyDtoD,            // CopyArgs
  kMemset,                // MemsetArgs
  kDeviceSynchronize,
  kStreamCreate,          // FlagsArgs -> u64 virtual stream
  kStreamDestroy,         // HandleArgs
  kStreamSynchronize,     // HandleArgs
  kStreamQuery,           // HandleArgs
  kStreamWaitEvent,       // StreamEventArgs
  kEventCreate,           // FlagsArgs -> u64 virtual event
  kEventDestroy,          // HandleArgs
  kEventRecord,           // StreamEventArgs
  kEventSynchronize,      // HandleArgs
  kEventQuery,            // HandleArgs
  kEventElapsedTime,      // StreamEventArgs (stream = start event) -> f32 ms
  kModuleChunk,           // ModuleChunkArgs + bytes; the last chunk loads the module
  kFunctionGet,           // FunctionGetArgs + name -> FunctionInfo
  kLaunch,                // LaunchArgs + parameter buffer
  kBlasCreate,            // -> u64 virtual handle
  kBlasDestroy,           // HandleArgs
  kBlasSetStream,         // StreamEventArgs (event = handle); the frontend remembers the stream
  kBlasSetMathMode,       // BlasModeArgs
  // cuBLAS compute calls (runtime/src/session_blas*.cc): asynchronous, but a Level 1 reduction
  // in host pointer mode, whose result is the reply (8 bytes: a float, double or int32).
  kBlasGemm,              // GemmArgs: every GEMM, single, strided or pointer-array batched
  kBlasLevel2,            // BlasLevel2Args
  // Multi-device sessions and NCCL (runtime/src/session_devices.cc, session_nccl.cc). NCCL handle
  // calls answer with an ncclResult_t; collectives are asynchronous (failures: sticky CUresult).
  kSetDevice,             // DeviceArgs (the session's device ordinal); async when the frontend
                          // switches for a thread, sync (validated) from cudaSetDevice
  kNcclCommInitAll,       // NcclInitAllArgs -> u64 virtual communicator per rank
  kNcclCommInitRank,      // NcclInitRankArgs -> u64 virtual communicator (rank on the current device)
  kNcclCommSplit,         // NcclSplitArgs -> u64 virtual communicator (0: NCCL_SPLIT_NOCOLOR)
  kNcclCommDestroy,       // HandleArgs
  kNcclCommCount,         // HandleArgs -> i32
  kNcclCommUserRank,      // HandleArgs -> i32
  kNcclGroupStart,
  kNcclGroupEnd,
  kNcclCollective,        // NcclCollectiveArgs
  // Devices as a whole (runtime/src/session_devices.cc).
  kMemGetInfo,            // -> MemInfo, of the current device as the session may use it
  kDeviceReset,           // frees what the session made on the current device
  kDeviceCanAccessPeer,   // PeerArgs -> i32
  kDeviceEnablePeer,      // PeerArgs (device: the current one; flags)
  kDeviceDisablePeer,     // PeerArgs (device: the current one)
  // Pitched copies and sets, stream-ordered frees (runtime/src/session_memory.cc).
  kMemcpy2D,              // Copy2DArgs; host to device: + width * height bytes, the rows packed;
                          // device to host -> width * height bytes, the rows packed (reply area)
  kMemset2D,              // Memset2DArgs
  kMemFreeAsync,          // StreamPointerArgs; asynchronous: the free follows the stream's work
  // Streams and host callbacks (runtime/src/session_streams.cc, host_fn_gates.h).
  kStreamCreateWithPriority,  // StreamCreateArgs -> u64 virtual stream
  kStreamGetInfo,             // HandleArgs -> StreamInfo
  kStreamPriorityRange,       // -> StreamPriorityRange, of the current device
  kLaunchHostFunc,            // HostFnArgs; asynchronous: when the stream reaches it, phosd posts the
                              // slot to the ring's host-function queue to the frontend (ring.h) and
                              // holds the stream's later work until the slot comes back on the queue
                              // to the server (the function returned); a refusal is posted too
  // cuBLAS routines besides GEMM (runtime/src/session_blas.cc).
  kBlasLevel1,            // BlasLevel1Args
  kBlasLevel3,            // BlasLevel3Args (the routines of Level 3 besides GEMM)
  // Launch attributes and module globals (runtime/src/session_functions.cc).
  kFuncGetAttributes,     // FunctionArgs -> FunctionAttributes
  kFuncSetAttribute,      // FuncAttributeArgs
  kFuncSetCacheConfig,    // FuncCacheConfigArgs
  kOccupancyMaxBlocks,    // OccupancyArgs -> i32 blocks per multiprocessor
  kOccupancyDynamicSMem,  // OccupancySMemArgs -> u64 bytes
  kLaunchEx,              // LaunchExArgs + attribute_count LaunchAttribute + parameter buffer
  kModuleGlobalGet,       // FunctionGetArgs + name -> GlobalInfo
  // NCCL point-to-point and communicator lifecycle (runtime/src/session_nccl*.cc).
  kNcclSend,              // NcclP2pArgs; asynchronous, queued until the group's end (refused outside one)
  kNcclRecv,              // NcclP2pArgs; likewise
  kNcclGroupEndSync,      // NcclGroupEndArgs: the outermost ncclGroupEnd of a thread's group that
                          // issued sends or receives, or had a call refused by the frontend: runs
                          // the group, or refuses all of it, and answers its ncclResult_t
  kNcclCommFinalize,      // HandleArgs
  kNcclCommAbort,         // HandleArgs
  kNcclCommGetAsyncError, // HandleArgs -> i32 ncclResult_t
  kNcclCommCuDevice,      // HandleArgs -> i32, the session's device ordinal
  kNcclRedOpCreate,       // NcclRedOpArgs -> i32 ncclRedOp_t (ncclRedOpCreatePreMulSum)
  kNcclRedOpDestroy,      // NcclRedOpArgs (comm, op)
  // cuBLASLt (runtime/src/session_blas_lt.cc): descriptors, layouts and preferences stay in the
  // frontend; the matmul carries what they say.
  kBlasLtMatmul,          // BlasLtMatmulArgs; asynchronous
  // Modules the driver API loads and unloads (cuModuleLoadData, cuModuleUnload; session_modules.cc).
  kModuleLoadResult,      // HandleArgs (module id) -> the CUresult its image loaded with
  kModuleUnload,          // HandleArgs (module id): unloaded on every device, its kernels and globals gone
  // CUDA graphs and stream capture (runtime/src/session_graphs.cc, session_capture.cc). A graph
  // is phosd's list of checked nodes; instantiation builds the driver's graph from it.
  kGraphCreate,           // -> u64 virtual graph, on the current device
  kGraphDestroy,          // HandleArgs
  kGraphAddNode,          // GraphNodeArgs + dependency_count u32 node indices + the kernel's
                          // parameter buffer -> u32 node index
  kGraphAddDependencies,  // GraphEdgesArgs + count GraphEdge
  kGraphDestroyNode,      // GraphNodeRef
  kGraphGetNodes,         // HandleArgs -> u32 count, u32 pad, count GraphNodeInfo (live nodes)
  kGraphNodeGetParams,    // GraphNodeRef -> GraphNode + the kernel's parameter buffer
  kGraphNodeSetParams,    // GraphNodeArgs (owner: graph; node) + the kernel's parameter buffer
  kGraphClone,            // HandleArgs -> u64 virtual graph
  kGraphInstantiate,      // GraphInstantiateArgs -> u64 virtual executable graph
  kGraphUpload,           // StreamEventArgs (event: the executable graph)
  kGraphLaunch,           // StreamEventArgs (event: the executable graph) + one u32 host-function
                          // slot per host node, in node index order; asynchronous
  kGraphExecUpdate,       // GraphUpdateArgs -> GraphUpdateInfo (a refused update answers success,
                          // the reason in the reply)
  kGraphExecNodeSetParams,  // GraphNodeArgs (owner: executable graph; node) + parameter buffer
  kGraphExecDestroy,      // HandleArgs
  kStreamBeginCapture,    // CaptureArgs
  kStreamEndCapture,      // CaptureArgs -> u64 virtual graph
  kStreamCaptureInfo,     // HandleArgs -> CaptureInfo + dependency_count u32 node indices
  kOpCount
};

// Limits on what a peer may ask for; anything larger is refused before it is read.
inline constexpr uint32_t kMaxNameBytes = 4096;
inline constexpr uint32_t kMaxParamBytes = 32764;  // CUDA 12.1+ kernel parameter limit
inline constexpr uint32_t kMaxParams = 1024;
inline constexpr uint64_t kMaxModuleBytes = 1ull << 30;

struct DeviceArgs { int32_t device; uint32_t pad; };
struct PeerArgs { int32_t device; int32_t peer; uint32_t flags; uint32_t pad; };
struct MemInfo { uint64_t free_bytes; uint64_t total_bytes; };

// Reply to kDeviceGetProperties: what cudaGetDeviceProperties and cudaDeviceGetAttribute answer
// from, fetched once per device by the frontend. Slots are CUdevice_attribute values (CUDA 13
// uses 1-147); a slot the driver does not answer holds its error.
inline constexpr uint32_t kDeviceAttributeSlots = 160;
inline constexpr size_t kDeviceNameBytes = 256;
struct DeviceProperties {
  int32_t attributes[kDeviceAttributeSlots];
  int32_t results[kDeviceAttributeSlots];  // CUresult of each attribute (0: answered)
  char name[kDeviceNameBytes];             // NUL-terminated
  uint8_t uuid[16];
  uint64_t total_memory;
};
static_assert(sizeof(PeerArgs) == 16 && sizeof(MemInfo) == 16 && sizeof(DeviceProperties) == 1560);
struct SizeArgs { uint64_t bytes; };
struct PointerArgs { uint64_t ptr; };
struct FlagsArgs { uint32_t flags; uint32_t pad; };
struct HandleArgs { uint64_t handle; };
struct StreamEventArgs { uint64_t stream; uint64_t event; };
struct CopyArgs { uint64_t dst; uint64_t src; uint64_t bytes; uint64_t stream; };
// A memset of `bytes` bytes: `value`'s low byte (element_bytes 0 or 1: cudaMemset, cuMemsetD8), or
// its low 2 or 4 bytes repeated (element_bytes 2 or 4: cuMemsetD16, cuMemsetD32), where `dst` and
// `bytes` are multiples of the element.
struct MemsetArgs { uint64_t dst; uint64_t bytes; uint64_t stream; uint32_t value; uint32_t element_bytes; };
// A 2D copy: `height` rows of `width` bytes. The host side of a host-to-device or device-to-host
// copy is packed (its pitch is `width`; its address field is 0): the frontend lays the rows out.
enum class Copy2DKind : uint32_t { kHostToDevice = 0, kDeviceToHost, kDeviceToDevice };
struct Copy2DArgs {
  uint64_t dst, dst_pitch;
  uint64_t src, src_pitch;
  uint64_t width, height;  // bytes per row, rows
  uint64_t stream;
  uint32_t kind;           // Copy2DKind
  uint32_t pad;
};
struct Memset2DArgs { uint64_t dst; uint64_t pitch; uint64_t width; uint64_t height; uint64_t stream; uint32_t value; uint32_t pad; };
struct StreamPointerArgs { uint64_t ptr; uint64_t stream; };
// Streams. A priority outside the device's range is clamped to it, as the driver does.
struct StreamCreateArgs { uint32_t flags; int32_t priority; };
struct StreamInfo {
  uint32_t flags;    // CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING
  int32_t priority;
  int32_t device;    // the session device the stream belongs to
  uint32_t pad;
  uint64_t id;       // unique in the session and stable across a snapshot: the virtual handle (1: the legacy stream)
};
struct StreamPriorityRange { int32_t least; int32_t greatest; };  // greatest <= least: lower is higher
// Host functions (cudaLaunchHostFunc, cudaStreamAddCallback). The function runs in the function
// process; phosd only orders it in its stream. `slot` names it until it returned: at most
// kMaxHostFnSlots are pending at once in a session.
inline constexpr uint32_t kMaxHostFnSlots = 4096;
struct HostFnArgs { uint64_t stream; uint32_t slot; uint32_t pad; };
// The slot of a kLaunchHostFunc on a capturing stream, sent with a reply: it becomes a host node
// of the capture's graph (reply: its u32 node index), whose function takes a slot at each launch.
inline constexpr uint32_t kCapturedHostFnSlot = 0xffffffffu;
// An entry of a host-function queue (ring.h). To the frontend: the slot's place in its stream was
// reached (result 0: run the function, then post the slot back) or phosd refused the
// kLaunchHostFunc (result: the CUresult, also the session's asynchronous error; the function is
// not run). To the server: the slot's function returned (result unused).
struct HostFnEvent { uint32_t slot; int32_t result; };
static_assert(sizeof(StreamCreateArgs) == 8 && sizeof(StreamInfo) == 24 && sizeof(StreamPriorityRange) == 8);
static_assert(sizeof(HostFnArgs) == 16);
static_assert(sizeof(HostFnEvent) == 8);
static_assert(sizeof(Copy2DArgs) == 64 && sizeof(Memset2DArgs) == 48 && sizeof(StreamPointerArgs) == 16);
struct ModuleChunkArgs {
  uint64_t module_id;   // chosen by the frontend, unique per session
  uint64_t total_bytes;
  uint64_t offset;
  uint32_t is_fatbin;   // 1: an NVIDIA fatbin from __cudaRegisterFatBinary; 0: a simgpu module image
  uint32_t pad;
};
struct FunctionGetArgs {
  uint64_t module_id;   // 0: search every module of the session, in registration order
  uint32_t name_bytes;  // the mangled name follows, not NUL-terminated
  uint32_t pad;
};
// Reply to kFunctionGet: a server-side function id and the parameter layout.
struct FunctionInfo {
  uint64_t function;
  uint32_t param_count;
  uint32_t param_bytes;  // size of the parameter buffer (end of the last parameter)
};
// After FunctionInfo in the reply: param_count ParamSlot entries.
struct ParamSlot { uint32_t offset; uint32_t size; };
struct LaunchArgs {
  uint64_t function;
  uint64_t stream;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t param_bytes;  // the packed parameter buffer follows
};
// Launch attributes and module globals. `function` is a kFunctionGet id of the session.
struct FunctionArgs { uint64_t function; };
// Reply to kFuncGetAttributes: every CUfunction_attribute slot (CUDA 13 has 0-15) with its value
// and the driver's CUresult for it.
inline constexpr uint32_t kFunctionAttributeSlots = 16;
struct FunctionAttributes {
  int32_t values[kFunctionAttributeSlots];
  int32_t results[kFunctionAttributeSlots];  // CUresult of each attribute (0: answered)
};
struct FuncAttributeArgs { uint64_t function; int32_t attribute; int32_t value; };  // CUfunction_attribute
struct FuncCacheConfigArgs { uint64_t function; int32_t config; int32_t pad; };    // CUfunc_cache
struct OccupancyArgs {
  uint64_t function;
  uint64_t dynamic_smem_bytes;
  int32_t block_size;
  uint32_t flags;  // CUoccupancy_flags
};
struct OccupancySMemArgs { uint64_t function; int32_t blocks; int32_t block_size; };
// A launch attribute as CUlaunchAttribute lays it out (id, padding, a 64-byte value); an event a
// value names (programmatic or launch completion event) is the session's virtual event id.
inline constexpr uint32_t kLaunchAttributeValueBytes = 64;
struct LaunchAttribute {
  uint32_t id;  // CUlaunchAttributeID
  uint32_t pad;
  uint8_t value[kLaunchAttributeValueBytes];
};
// cudaLaunchKernelExC: a launch, then `attribute_count` LaunchAttribute records, then the packed
// parameter buffer.
inline constexpr uint32_t kMaxLaunchAttributes = 32;
struct LaunchExArgs {
  LaunchArgs launch;
  uint32_t attribute_count;
  uint32_t pad;
};
// Reply to kModuleGlobalGet: the global's device address and size in the current device's
// instance of its module.
struct GlobalInfo { uint64_t address; uint64_t bytes; };
static_assert(sizeof(FunctionAttributes) == 128 && sizeof(FuncAttributeArgs) == 16 && sizeof(FuncCacheConfigArgs) == 16);
static_assert(sizeof(OccupancyArgs) == 24 && sizeof(OccupancySMemArgs) == 16 && sizeof(LaunchAttribute) == 72);
static_assert(sizeof(LaunchExArgs) == 56 && sizeof(GlobalInfo) == 16);

struct BlasModeArgs { uint64_t handle; int32_t mode; int32_t pad; };
// cuBLAS. A scalar (alpha, beta; rot's c and s) travels by value in host pointer mode, its bytes
// those of the routine's scalar type (__half, float, double, cuComplex, cuDoubleComplex); in
// device pointer mode its first 8 bytes are the device address cuBLAS reads it from when the call
// runs. `pointer_mode` is the cublasPointerMode_t the call was made in (the frontend keeps each
// handle's mode; phosd sets it on the library's handle for every call).
struct BlasScalar { uint8_t bytes[16]; };
// phos's cap on the matrices of one pointer-array batched GEMM: phosd reads its three arrays of
// device pointers (8 bytes each) and checks every matrix before the call runs.
inline constexpr int32_t kMaxBlasPointerBatch = 65536;
enum class BlasBatch : int32_t {
  kNone = 0,  // one GEMM
  kStrided,   // `batch` GEMMs, matrix i at a + i * stride_a elements (likewise b, c)
  kPointers,  // `batch` GEMMs, matrix i at a[i]: a, b and c are device arrays of device pointers
};
struct GemmArgs {
  uint64_t handle;
  int32_t trans_a, trans_b;
  int32_t m, n, k;
  int32_t lda, ldb, ldc;
  int32_t a_type, b_type, c_type;  // cudaDataType
  int32_t compute_type;            // cublasComputeType_t; its scalar type is alpha's and beta's
  int32_t algo;                    // cublasGemmAlgo_t
  int32_t batch_kind;              // BlasBatch
  int32_t batch;                   // matrices of a batched call
  int32_t pointer_mode;
  uint64_t a, b, c;
  int64_t stride_a, stride_b, stride_c;  // kStrided, in elements
  BlasScalar alpha, beta;
};
enum class BlasLevel1 : int32_t { kAxpy = 0, kDot, kNrm2, kScal, kAsum, kIamax, kIamin, kCopy, kSwap, kRot, kCount };
struct BlasLevel1Args {
  uint64_t handle;
  int32_t routine;       // BlasLevel1
  int32_t type;          // cudaDataType of x and y: CUDA_R_32F or CUDA_R_64F
  int32_t pointer_mode;
  int32_t n, incx, incy;
  uint64_t x, y;
  uint64_t result;       // dot, nrm2, asum, iamax, iamin in device pointer mode: where it goes
  BlasScalar alpha;      // axpy, scal: alpha; rot: c
  BlasScalar beta;       // rot: s
};
enum class BlasLevel2 : int32_t { kGemv = 0, kGer, kSymv, kTrsv, kTrmv, kCount };
struct BlasLevel2Args {
  uint64_t handle;
  int32_t routine;       // BlasLevel2
  int32_t type;          // CUDA_R_32F or CUDA_R_64F
  int32_t pointer_mode;
  int32_t trans;         // gemv, trsv, trmv: cublasOperation_t
  int32_t uplo;          // symv, trsv, trmv: cublasFillMode_t
  int32_t diag;          // trsv, trmv: cublasDiagType_t
  int32_t m, n;          // gemv, ger: A is m x n; symv, trsv, trmv: n x n (m unused)
  int32_t lda, incx, incy;
  int32_t pad;
  uint64_t a, x, y;      // ger: y is the second vector, A is written
  BlasScalar alpha, beta;
};
enum class BlasLevel3 : int32_t { kTrsm = 0, kSyrk, kGeam, kDgmm, kCount };
struct BlasLevel3Args {
  uint64_t handle;
  int32_t routine;       // BlasLevel3
  int32_t type;          // CUDA_R_32F or CUDA_R_64F
  int32_t pointer_mode;
  int32_t side;          // trsm, dgmm: cublasSideMode_t
  int32_t uplo;          // trsm, syrk: cublasFillMode_t
  int32_t trans_a;       // trsm, syrk, geam
  int32_t trans_b;       // geam
  int32_t diag;          // trsm
  int32_t m, n, k;       // trsm, geam, dgmm: B or C is m x n; syrk: C is n x n, op(A) n x k
  int32_t lda, ldb, ldc;
  int32_t incx;          // dgmm: of the vector x, which `b` names
  int32_t pad;
  uint64_t a, b, c;      // trsm: B is solved in place (c unused)
  BlasScalar alpha, beta;
};
static_assert(sizeof(GemmArgs) == 152 && sizeof(BlasLevel1Args) == 88 && sizeof(BlasLevel2Args) == 112);
static_assert(sizeof(BlasLevel3Args) == 128);

// cuBLASLt. A matrix as its cublasLtMatrixLayout_t describes it: `rows` x `cols` elements of
// `type`, column- or row-major (cublasLtOrder_t) with leading dimension `ld`, and `batch_count`
// matrices `batch_stride` elements apart.
struct BlasLtLayout {
  int32_t type;          // cudaDataType
  int32_t order;         // CUBLASLT_ORDER_COL or CUBLASLT_ORDER_ROW
  uint64_t rows, cols;
  int64_t ld;
  int64_t batch_stride;  // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET
  int32_t batch_count;
  int32_t pad;
};
// cublasLtMatmul: D = epilogue(alpha op(A) op(B) + beta C + bias), its descriptor's settings, the
// four layouts and every pointer the call names. alpha and beta are host values of `scale_type`
// (the frontend serves CUBLASLT_POINTER_MODE_HOST only); the handle is the frontend's (phosd runs
// the call on a cuBLASLt handle of its own in the stream's context).
struct BlasLtMatmulArgs {
  uint64_t stream;
  int32_t compute_type;  // cublasComputeType_t
  int32_t scale_type;    // cudaDataType of alpha and beta
  int32_t trans_a, trans_b;
  uint32_t epilogue;     // cublasLtEpilogue_t
  int32_t bias_type;     // cudaDataType of the bias vector; -1: D's type (cuBLASLt's default)
  uint64_t a, b, c, d;
  uint64_t bias;         // the bias epilogues: D's rows elements
  uint64_t workspace;
  uint64_t workspace_bytes;
  BlasScalar alpha, beta;
  BlasLtLayout layout_a, layout_b, layout_c, layout_d;
};
static_assert(sizeof(BlasLtLayout) == 48 && sizeof(BlasLtMatmulArgs) == 312);

// NCCL. phos's own limit on the ranks of one communicator a function creates (ncclCommInitAll's
// devices, ncclCommInitRank's nranks): 72, one NVLink domain (GB200 NVL72), so the wire format
// does not stand in the way of any node phos runs on. What a session may actually use is the
// device count of its device group, checked by phosd at run time.
inline constexpr int32_t kMaxNcclRanks = 72;
inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct NcclInitAllArgs { int32_t ndev; int32_t pad; int32_t devices[kMaxNcclRanks]; };
struct NcclInitRankArgs { int32_t nranks; int32_t rank; uint8_t id[kNcclUniqueIdBytes]; };
struct NcclSplitArgs { uint64_t comm; int32_t color; int32_t key; };
enum class NcclCollectiveKind : int32_t { kAllReduce = 0, kBroadcast, kAllGather, kReduceScatter, kReduce };
struct NcclCollectiveArgs {
  uint64_t comm;
  uint64_t stream;
  uint64_t send;
  uint64_t recv;
  uint64_t count;     // elements, as the NCCL call's count (sendcount / recvcount for gather / scatter)
  int32_t kind;       // NcclCollectiveKind
  int32_t datatype;   // ncclDataType_t
  int32_t op;         // ncclRedOp_t (reductions): a built-in one, or one kNcclRedOpCreate made on `comm`
  int32_t root;       // broadcast, reduce
};
// ncclSend (buffer: sendbuff) or ncclRecv (buffer: recvbuff).
struct NcclP2pArgs {
  uint64_t comm;
  uint64_t stream;
  uint64_t buffer;
  uint64_t count;     // elements
  int32_t datatype;   // ncclDataType_t
  int32_t peer;       // rank in `comm`
};
// refused: the ncclResult_t the frontend gave a call of the group (0: none); phosd then runs none
// of it and answers that.
struct NcclGroupEndArgs { int32_t refused; int32_t pad; };
// ncclRedOpCreatePreMulSum (comm, scalar, datatype, residence) and ncclRedOpDestroy (comm, op).
struct NcclRedOpArgs {
  uint64_t comm;
  uint64_t scalar;    // ncclScalarHostImmediate: the scalar's bytes (little-endian, the datatype's
                      // size); ncclScalarDevice: its device address
  int32_t datatype;   // ncclDataType_t
  int32_t residence;  // ncclScalarResidence_t
  int32_t op;         // ncclRedOpDestroy: the op
  int32_t pad;
};
static_assert(sizeof(NcclInitAllArgs) == 296 && sizeof(NcclInitRankArgs) == 136 && sizeof(NcclSplitArgs) == 16);
static_assert(sizeof(NcclCollectiveArgs) == 56 && sizeof(NcclP2pArgs) == 40 && sizeof(NcclRedOpArgs) == 32);
static_assert(sizeof(NcclGroupEndArgs) == 8);

// CUDA graphs. A node is named by its graph's virtual id and its index there (creation order,
// never reused in that graph); the frontend makes a cudaGraphNode_t of the pair.
inline constexpr uint32_t kMaxGraphNodes = 65536;              // per graph
inline constexpr uint32_t kMaxGraphNodeDependencies = 4096;    // per node, and per kGraphAddDependencies
inline constexpr uint32_t kNoGraphNode = 0xffffffffu;
// One node as phosd checks it (the call it stands for): `type` is a CUgraphNodeType. Kernel:
// `launch` (stream unused), its parameter buffer after the record. Memcpy (device to device):
// `height` rows of `width` bytes from src (src_pitch apart) to dst (dst_pitch apart). Memset:
// `height` rows of `width` elements of `element_size` bytes (1, 2, 4), `dst_pitch` apart, set to
// `value`. Event record and wait: the virtual `event`. Empty and host: nothing (a host node's
// function and its argument stay in the function process).
struct GraphNode {
  uint32_t type;
  uint32_t element_size;
  LaunchArgs launch;
  uint64_t dst, dst_pitch, src, src_pitch, width, height;
  uint64_t event;
  uint32_t value;
  uint32_t pad;
};
struct GraphNodeArgs {
  uint64_t owner;             // graph (add, set) or executable graph (exec set)
  uint32_t node;              // set: the node's index; add: unused
  uint32_t dependency_count;  // add: the u32 indices that follow
  GraphNode params;
};
struct GraphNodeRef { uint64_t owner; uint32_t node; uint32_t pad; };
struct GraphEdge { uint32_t from; uint32_t to; };
struct GraphEdgesArgs { uint64_t graph; uint32_t count; uint32_t pad; };
struct GraphNodeInfo { uint32_t node; uint32_t type; uint32_t dependency_count; uint32_t pad; };
struct GraphInstantiateArgs { uint64_t graph; uint64_t flags; };
struct GraphUpdateArgs { uint64_t exec; uint64_t graph; };
// Reply to kGraphExecUpdate: the CUgraphExecUpdateResult and the nodes it names (kNoGraphNode:
// none), of the updating graph.
struct GraphUpdateInfo { int32_t result; uint32_t error_node; uint32_t error_from_node; uint32_t pad; };
// Stream capture. `mode` is the CUstreamCaptureMode of kStreamBeginCapture; `invalidated` (end)
// says the frontend refused a call that its mode prohibits, which invalidated the capture.
struct CaptureArgs { uint64_t stream; uint32_t mode; uint32_t invalidated; };
struct CaptureInfo {
  uint32_t status;            // CUstreamCaptureStatus
  uint32_t dependency_count;  // the stream's capture dependencies, which follow as u32 nodes
  uint64_t id;                // unique per capture sequence in the session
  uint64_t graph;             // the virtual graph being captured into
};
static_assert(sizeof(GraphNode) == 120 && sizeof(GraphNodeArgs) == 136 && sizeof(GraphNodeRef) == 16);
static_assert(sizeof(GraphEdgesArgs) == 16 && sizeof(GraphNodeInfo) == 16 && sizeof(GraphUpdateInfo) == 16);
static_assert(sizeof(CaptureArgs) == 16 && sizeof(CaptureInfo) == 24);

static_assert(sizeof(CopyArgs) == 32 && sizeof(MemsetArgs) == 32 && sizeof(LaunchArgs) == 48);
static_assert(sizeof(ModuleChunkArgs) == 32 && sizeof(FunctionGetArgs) == 16 && sizeof(FunctionInfo) == 16);

}  // namespace phos::ipc
