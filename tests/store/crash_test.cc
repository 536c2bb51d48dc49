#include <gtest/gtest.h>

#include "crash_harness.h"

namespace phos::store::testing {
namespace {

TEST(CrashTest, WriterKilledDuringCommitAndGcLeavesOldOrNewState) { RunCrashIterations(50, 20260101); }

}  // namespace
}  // namespace phos::store::testing
