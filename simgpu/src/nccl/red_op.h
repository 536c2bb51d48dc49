// ncclRedOpCreatePreMulSum and ncclRedOpDestroy on simgpu: reductions made on one rank, named by
// an ncclRedOp_t value from ncclNumOps up, valid for that rank's collectives of their datatype.
#pragma once

#include <nccl.h>

#include "nccl/comm.h"

namespace phos::sim::nccl {

// Makes a pre-multiplied sum on `rank`: ncclInvalidArgument for a NULL op or scalar, a datatype
// simgpu does not serve, a residence that is not ncclScalarDevice / ncclScalarHostImmediate, or a
// device scalar that is not device memory of the rank's device.
ncclResult_t CreatePreMulSum(const DeviceAccess& devices, RankComm& rank, ncclRedOp_t* op, void* scalar,
                             ncclDataType_t type, ncclScalarResidence_t residence);
// ncclInvalidArgument for an op `rank` did not make (built-in ones included).
ncclResult_t DestroyRedOp(RankComm& rank, ncclRedOp_t op);
// The op `rank` made for `type`: ncclInvalidArgument (naming `call`) for one it did not make or
// made for another datatype.
ncclResult_t FindUserOp(RankComm& rank, const char* call, ncclRedOp_t op, ncclDataType_t type,
                        UserRedOp* out);

}  // namespace phos::sim::nccl
