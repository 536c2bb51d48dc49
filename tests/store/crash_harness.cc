#include "crash_harness.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "crash_workload.h"
#include "phos/base/subprocess.h"
#include "store_test_util.h"
#include "../testing/wait_until.h"

namespace phos::store::testing {

void RunCrashIterations(int iterations, unsigned seed) {
  TempDir dir;
  std::mt19937 rng(seed);
  int killed_mid_run = 0;
  int max_snapshots = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string child_seed = std::to_string(rng());
    const std::string progress = dir.path() + "/writer-progress";
    std::filesystem::remove(progress);
    Result<Subprocess> writer = Subprocess::Spawn(
        {.argv = {PHOS_STORE_CRASH_WRITER, dir.path(), child_seed}, .stdout_file = progress});
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    // Every other kill lands once the writer has committed (its first line of progress): however
    // slow its start (a sanitizer build opens RocksDB in far more than the window below), some
    // kills come after real work. The others may land anywhere, start-up included.
    if (i % 2 == 1) {
      ASSERT_TRUE(::phos::testing::WaitUntil([&] {
        std::error_code ec;
        return std::filesystem::file_size(progress, ec) > 0 && !ec;
      })) << "the crash writer committed nothing (iteration " << i << ")";
    }
    // The writer's RocksDB open takes a few ms; kill anywhere from before it to well into its
    // loop (each op fsyncs, so a few ms each).
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 60000));
    Result<ExitStatus> how = writer->Stop(std::chrono::milliseconds(0), SIGKILL);
    ASSERT_TRUE(how.ok()) << how.status().ToString();
    if (how->exited()) {
      FAIL() << "crash writer exited by itself with " << how->exit_code << " (iteration " << i << ")";
    }
    ++killed_mid_run;
    int snapshots = 0;
    Status s = CheckCrashStore(dir.path(), &snapshots);
    ASSERT_TRUE(s.ok()) << "after kill " << i << ": " << s.ToString();
    max_snapshots = std::max(max_snapshots, snapshots);
  }
  EXPECT_EQ(killed_mid_run, iterations);
  // The kills landed after real work, not only during start-up.
  EXPECT_GT(max_snapshots, 0);
}

}  // namespace phos::store::testing
