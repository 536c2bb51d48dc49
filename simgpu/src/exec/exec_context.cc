#include "exec/exec_context.h"

#include <algorithm>

#include "exec/executor.h"
#include "exec/stream.h"
#include "exec/task_graph.h"

namespace phos::sim {

ExecContext::ExecContext(Executor& executor)
    : state_(std::make_shared<ContextState>(&executor, executor.clock().time_scale())) {
  auto null_state = std::make_shared<StreamState>(state_, /*is_null=*/true, /*blocking=*/true);
  state_->Register(null_state.get());
  null_stream_ = std::shared_ptr<Stream>(new Stream(std::move(null_state)));
}

ExecContext::~ExecContext() {
  state_->WaitAll();
  // Whoever still holds the NULL stream (or another stream) keeps the state alive; it stays
  // usable, and its work still runs on the executor.
  null_stream_.reset();
}

CUresult ExecContext::CreateStream(unsigned flags, std::shared_ptr<Stream>* out, int priority) {
  if (out == nullptr || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto state = std::make_shared<StreamState>(state_, /*is_null=*/false, flags == CU_STREAM_DEFAULT,
                                             std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority));
  state_->Register(state.get());
  *out = std::shared_ptr<Stream>(new Stream(std::move(state)));
  return CUDA_SUCCESS;
}

CUresult ExecContext::Synchronize() {
  state_->WaitAll();
  return state_->sticky_error();
}

CUresult ExecContext::sticky_error() const {
  return state_->sticky_error();
}

Executor& ExecContext::executor() const {
  return state_->executor();
}

}  // namespace phos::sim
