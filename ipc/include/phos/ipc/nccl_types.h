// NCCL data types and reductions as both ends of the wire check them: the frontend before
// queueing a collective, the API server before it reaches NCCL (and sizes buffers from the type).
#pragma once

#include <nccl.h>

#include <cstdint>

#include "phos/ipc/wire.h"

namespace phos::ipc {

// Bytes per element of an ncclDataType_t; 0 for anything else.
inline uint64_t NcclTypeBytes(int32_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// Whether a collective of `kind` (NcclCollectiveKind) reduces, and so names an op.
inline bool NcclReduces(int32_t kind) {
  return kind == static_cast<int32_t>(NcclCollectiveKind::kAllReduce) ||
         kind == static_cast<int32_t>(NcclCollectiveKind::kReduceScatter) ||
         kind == static_cast<int32_t>(NcclCollectiveKind::kReduce);
}

// One of NCCL's built-in reductions; the others a collective may name are those
// ncclRedOpCreatePreMulSum made on its communicator (from ncclNumOps up), which phosd keeps.
inline bool NcclBuiltInOp(int32_t op) { return op >= 0 && op < ncclNumOps; }

}  // namespace phos::ipc
