// Shared pieces of the exec tests: a device with one context, and ops that record what ran.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "exec/event.h"
#include "exec/exec_context.h"
#include "exec/executor.h"
#include "exec/model_clock.h"
#include "exec/stream.h"

namespace phos::sim::testing {

// Appends labels from any thread; the order they ran in.
class Trace {
 public:
  void Add(std::string label) {
    std::lock_guard lock(mu_);
    labels_.push_back(std::move(label));
  }
  std::vector<std::string> labels() const {
    std::lock_guard lock(mu_);
    return labels_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> labels_;
};

// An op on `engine` that takes `cost_s` modelled seconds and appends `label` to `trace` when its
// work runs (at the start of its modelled time).
inline Op TracedOp(Engine engine, double cost_s, Trace* trace, std::string label) {
  Op op;
  op.engine = engine;
  op.cost_seconds = cost_s;
  op.work = [trace, label = std::move(label)] {
    trace->Add(label);
    return CUDA_SUCCESS;
  };
  return op;
}

inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class ExecTest : public ::testing::Test {
 protected:
  explicit ExecTest(double time_scale = 1.0, int workers = 2, double kernel_timeout_seconds = 0,
                    std::function<int64_t()> watchdog_clock = {})
      : clock_(time_scale),
        executor_(std::make_unique<Executor>(0, clock_,
                                             ExecutorOptions{.compute_workers = workers,
                                                             .kernel_timeout_seconds = kernel_timeout_seconds,
                                                             .watchdog_clock = std::move(watchdog_clock)})),
        ctx_(executor_->CreateContext()) {}
  ~ExecTest() override {
    ctx_.reset();
    executor_.reset();
  }

  std::shared_ptr<Stream> NewStream(unsigned flags = CU_STREAM_DEFAULT) {
    std::shared_ptr<Stream> s;
    EXPECT_EQ(ctx_->CreateStream(flags, &s), CUDA_SUCCESS);
    return s;
  }
  std::shared_ptr<Event> NewEvent(unsigned flags = CU_EVENT_DEFAULT) {
    std::shared_ptr<Event> e;
    EXPECT_EQ(Event::Create(flags, &e), CUDA_SUCCESS);
    return e;
  }
  Stream& null_stream() { return *ctx_->null_stream(); }

  ModelClock clock_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ExecContext> ctx_;
};

}  // namespace phos::sim::testing
