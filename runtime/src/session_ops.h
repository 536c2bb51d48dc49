// The session's table of calls: one named handler per ring opcode, with the size of its argument
// record, the context it runs in and the result code a refusal speaks. The record is decoded
// and size-checked here, in one place, from bytes the function process wrote (and may still be
// rewriting): a handler only ever sees its own typed copy. Private to the API server.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "phos/ipc/ring.h"
#include "phos/ipc/wire.h"

namespace phos::runtime {

class Session;

// The argument record of calls that take none.
struct NoArgs {};

// Where a record's payload ends.
enum class RecordShape : uint8_t {
  kExact,  // the argument record and nothing else
  kHead,   // the argument record, then bytes the handler reads (copy data, an image, a name)
};

// Which context a record runs in (Session::Route).
enum class Placement : uint8_t {
  kCurrentDevice,  // the session's current device (cudaSetDevice)
  kDeviceZero,     // modules live in device 0's context; other devices load them on first launch
  kHandleDevice,   // the device of the stream, event or cuBLAS handle at `handle_offset`; the
                   // current device when it names none (the default stream)
  kOwnChoice,      // the handler picks its contexts itself
  kNcclStream,     // NCCL work: kHandleDevice, but a default stream is the communicator's device's
                   // (the u64 virtual communicator at the argument record's start)
};

// What the call's result code is, and so how a refusal is spelled.
enum class ResultKind : uint8_t { kCuResult, kCublasStatus, kNcclResult };

// A library the call needs in the driver table (and, for NCCL, a device group).
enum class Library : uint8_t { kCuda, kCublas, kCublasLt, kNccl };

// What a handler gets besides its typed arguments.
struct Call {
  const char* name;  // the handler's name, for logs
  // kHead records: the bytes after the argument record, still in the ring (the producer may
  // rewrite them: a handler copies what it checks before acting on it).
  std::span<const uint8_t> tail;
  uint8_t* reply;  // the ring's reply area
  size_t* reply_len;

  template <typename V>
  void Reply(const V& value) const {
    std::memcpy(reply, &value, sizeof(value));
    *reply_len = sizeof(value);
  }
};

struct OpHandler {
  const char* name = nullptr;  // the call it serves, as the function wrote it ("cudaMalloc")
  size_t record_bytes = 0;     // of the argument record
  RecordShape shape = RecordShape::kExact;
  Placement placement = Placement::kCurrentDevice;
  uint32_t handle_offset = 0;  // kHandleDevice: of the u64 virtual handle in the argument record
  ResultKind result = ResultKind::kCuResult;
  Library library = Library::kCuda;
  // Copies the argument record out of `record` (already size-checked) and runs the handler.
  CUresult (*invoke)(Session& session, const ipc::RecordView& record, const Call& call) = nullptr;

  // The answer to a record that does not decode.
  CUresult Malformed() const;
  // The answer when `library` is missing.
  CUresult Unavailable() const;
  // Whether `length` payload bytes hold this call's record.
  bool Fits(size_t length) const {
    return shape == RecordShape::kExact ? length == record_bytes : length >= record_bytes;
  }
};

// The handler of `opcode`; null for an opcode no handler serves.
const OpHandler* FindOpHandler(uint16_t opcode);

// Copies the argument record of `record` into `out` when the record is a well-formed call of its
// opcode and T is that call's argument record; false otherwise.
template <typename T>
bool DecodeRecord(const ipc::RecordView& record, T* out) {
  const OpHandler* handler = FindOpHandler(record.header.opcode);
  if (handler == nullptr || handler->record_bytes != sizeof(T) || !handler->Fits(record.header.length))
    return false;
  std::memcpy(out, record.payload, sizeof(T));
  return true;
}

}  // namespace phos::runtime
