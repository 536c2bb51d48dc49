// One GPU session: an instance's context, call ring, executor thread, virtual handles and buffer
// table. Private to the API server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cublas_v2.h>
#include <cuda.h>

#include "phos/base/status.h"
#include "phos/ipc/ring.h"
#include "phos/runtime/buffer_table.h"
#include "phos/runtime/driver_table.h"

namespace phos::runtime {

class Session {
 public:
  // Creates the context and starts the executor thread.
  static Result<std::unique_ptr<Session>> Open(DriverTable* driver, int device, std::unique_ptr<ipc::Ring> ring,
                                               std::string token, int control_fd, int pid);
  // Stops the executor and releases everything the session holds.
  ~Session();

  ipc::Ring& ring() { return *ring_; }
  int control_fd() const { return control_fd_; }
  const std::string& token() const { return token_; }

 private:
  struct Module {
    CUmodule module = nullptr;
    bool is_fatbin = false;
    CUresult load_result = CUDA_SUCCESS;
    uint64_t total_bytes = 0;
    std::vector<uint8_t> pending;  // image bytes until the last chunk arrives
  };
  struct Function {
    CUfunction function = nullptr;
    std::vector<ipc::ParamSlot> params;
    uint32_t param_bytes = 0;
  };

  Session(DriverTable* driver, std::unique_ptr<ipc::Ring> ring, std::string token, int control_fd, int pid);
  void Run();
  void ReleaseAll();
  // Executes one record; writes reply bytes to the reply area and sets *reply_len.
  CUresult Execute(const ipc::RecordView& record, size_t* reply_len);
  CUresult ExecuteBlas(const ipc::RecordView& record, size_t* reply_len);
  CUresult ModuleChunk(const uint8_t* payload, size_t len);
  CUresult FunctionGet(const uint8_t* payload, size_t len, size_t* reply_len);
  CUresult Launch(const uint8_t* payload, size_t len);
  CUresult Gemm(const ipc::GemmArgs& a);
  CUresult Gemv(const ipc::GemvArgs& a);
  // Rejects (and logs) a range this session does not own.
  bool Owns(uint64_t ptr, uint64_t bytes, const char* what);
  Result<CUstream> StreamOf(uint64_t vid) const;
  uint64_t NewHandle() { return next_handle_ += 16; }

  DriverTable* driver_;
  std::unique_ptr<ipc::Ring> ring_;
  std::string token_;
  int control_fd_;
  int pid_;
  CUcontext context_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread executor_;

  // Owned by the executor thread while it runs.
  BufferTable buffers_;
  // Virtual ids are multiples of 16 from 16 on: never 0 (the default stream), 1 or 2
  // (cudaStreamLegacy, cudaStreamPerThread).
  uint64_t next_handle_ = 0;
  std::unordered_map<uint64_t, CUstream> streams_;
  std::unordered_map<uint64_t, CUevent> events_;
  std::unordered_map<uint64_t, cublasHandle_t> blas_;
  std::unordered_map<uint64_t, Module> modules_;
  std::vector<uint64_t> module_order_;
  std::unordered_map<uint64_t, Function> functions_;
  uint64_t module_bytes_ = 0;
};

}  // namespace phos::runtime
