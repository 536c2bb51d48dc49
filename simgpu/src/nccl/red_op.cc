#include "nccl/red_op.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "nccl/collective.h"
#include "nccl/errors.h"
#include "nccl/reduce.h"

namespace phos::sim::nccl {

ncclResult_t CreatePreMulSum(const DeviceAccess& devices, RankComm& rank, ncclRedOp_t* op, void* scalar,
                             ncclDataType_t type, ncclScalarResidence_t residence) {
  constexpr const char* kCall = "ncclRedOpCreatePreMulSum";
  if (op == nullptr) return Fail(ncclInvalidArgument, fmt::format("{}: op is NULL", kCall));
  const size_t elem = DataTypeSize(type);
  if (elem == 0) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: datatype {} is not served", kCall, static_cast<int>(type)));
  }
  UserRedOp made;
  made.type = type;
  made.residence = residence;
  switch (residence) {
    case ncclScalarHostImmediate:
      if (scalar == nullptr) return Fail(ncclInvalidArgument, fmt::format("{}: scalar is NULL", kCall));
      std::memcpy(made.value, scalar, elem);  // read now, as the residence says
      break;
    case ncclScalarDevice:
      if (ncclResult_t r =
              CheckDeviceBuffer(devices, kCall, "scalar", scalar, elem, Access::kRead, rank.device());
          r != ncclSuccess) {
        return r;
      }
      made.device_scalar = reinterpret_cast<CUdeviceptr>(scalar);
      break;
    default:
      return Fail(ncclInvalidArgument, fmt::format("{}: residence {} is not an ncclScalarResidence_t", kCall,
                                                   static_cast<int>(residence)));
  }
  std::lock_guard lock(rank.ops_mu);
  // The lowest value from ncclNumOps not in use, as NCCL hands them out again once destroyed.
  int value = ncclNumOps;
  while (rank.ops.count(value) != 0) ++value;
  rank.ops.emplace(value, made);
  *op = static_cast<ncclRedOp_t>(value);
  return ncclSuccess;
}

ncclResult_t DestroyRedOp(RankComm& rank, ncclRedOp_t op) {
  std::lock_guard lock(rank.ops_mu);
  if (rank.ops.erase(static_cast<int>(op)) == 0) {
    return Fail(
        ncclInvalidArgument,
        fmt::format("ncclRedOpDestroy: op {} was not made by ncclRedOpCreatePreMulSum on this communicator",
                    static_cast<int>(op)));
  }
  return ncclSuccess;
}

ncclResult_t FindUserOp(RankComm& rank, const char* call, ncclRedOp_t op, ncclDataType_t type,
                        UserRedOp* out) {
  std::lock_guard lock(rank.ops_mu);
  auto it = rank.ops.find(static_cast<int>(op));
  if (it == rank.ops.end()) {
    return Fail(ncclInvalidArgument, fmt::format("{}: reduction op {} is neither built in nor made on this "
                                                 "communicator",
                                                 call, static_cast<int>(op)));
  }
  if (it->second.type != type) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: reduction op {} was made for datatype {}, the call's is {}", call,
                            static_cast<int>(op), static_cast<int>(it->second.type), static_cast<int>(type)));
  }
  *out = it->second;
  return ncclSuccess;
}

}  // namespace phos::sim::nccl
