// Held tasks (Stream::EnqueueHeld): the pieces of a cross-stream rendezvous. An op or marker
// that waits for both its stream and an outside release.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

using Labels = std::vector<std::string>;

class HeldTaskTest : public ExecTest {};

TEST_F(HeldTaskTest, HeldOpWaitsForItsRelease) {
  Trace trace;
  auto stream = NewStream();
  std::shared_ptr<HeldTask> held =
      stream->EnqueueHeld(TracedOp(Engine::kCompute, 0, &trace, "held"), /*marker=*/false);
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "after"));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(trace.labels().empty());
  EXPECT_EQ(stream->Query(), CUDA_ERROR_NOT_READY);
  held->Release();
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"held", "after"}));
}

TEST_F(HeldTaskTest, ReleasedMarkerStillWaitsForItsStream) {
  Trace trace;
  auto stream = NewStream();
  stream->Enqueue(TracedOp(Engine::kCopyH2D, 0.1, &trace, "slow"));
  std::shared_ptr<HeldTask> gate = stream->EnqueueHeld(Op{}, /*marker=*/true);
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "after"));
  gate->Release();
  gate->Release();  // only the first release counts
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"slow", "after"}));
}

TEST_F(HeldTaskTest, ReleaseWithAnErrorFailsTheContext) {
  Trace trace;
  auto stream = NewStream();
  std::shared_ptr<HeldTask> gate = stream->EnqueueHeld(Op{}, /*marker=*/true);
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "dropped"));
  gate->Release(CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(stream->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(trace.labels().empty());
  EXPECT_EQ(ctx_->sticky_error(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

// Dropping the handle releases the task: no stream waits forever for a party that is gone.
TEST_F(HeldTaskTest, DroppedHandleReleases) {
  Trace trace;
  auto stream = NewStream();
  stream->EnqueueHeld(Op{}, /*marker=*/true).reset();
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "after"));
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"after"}));
}

}  // namespace
}  // namespace phos::sim::testing
