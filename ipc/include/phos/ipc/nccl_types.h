// NCCL data types as both ends of the wire size them: the frontend checks a collective's type
// before queueing it, the API server sizes its buffers from it.
#pragma once

#include <nccl.h>

#include <cstdint>

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

}  // namespace phos::ipc
