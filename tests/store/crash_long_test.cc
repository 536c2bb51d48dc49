#include <gtest/gtest.h>

#include "crash_harness.h"

namespace phos::store::testing {
namespace {

TEST(CrashLongTest, WriterKilledThousandTimes) { RunCrashIterations(1000, 42); }

}  // namespace
}  // namespace phos::store::testing
