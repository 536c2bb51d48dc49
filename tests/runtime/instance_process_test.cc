// What the instance manager reads back from a function's log, and how it bounds the logs
// (runtime/src/instance_process.h).
#include "instance_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace phos::runtime {
namespace {

class LastLogLineTest : public ::testing::Test {
 protected:
  std::string Log(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  const std::string path_ =
      (std::filesystem::temp_directory_path() / ("phos-last-log-line-" + std::to_string(getpid()) + ".log"))
          .string();
};

TEST_F(LastLogLineTest, TheLastNonEmptyLine) {
  EXPECT_EQ(LastLogLine(Log("ready\nloading /m failed: NotFound: cannot read /m/config.json\n\n  \n")),
            "loading /m failed: NotFound: cannot read /m/config.json");
  EXPECT_EQ(LastLogLine(Log("one line, no newline")), "one line, no newline");
  EXPECT_EQ(LastLogLine(Log("")), "");
  EXPECT_EQ(LastLogLine(path_ + ".missing"), "");
}

TEST_F(LastLogLineTest, OnlyPrintableAsciiAndOnlyTheTail) {
  // Whatever a function writes goes into a JSON answer: bytes that are not printable ASCII (an
  // invalid UTF-8 sequence here) become '?'.
  EXPECT_EQ(LastLogLine(Log("x\nbad \xff\xfe\tbyte\x01\n")), "bad ???byte?");
  // A line longer than the 4 KiB read is cut at its start, not read whole.
  EXPECT_EQ(LastLogLine(Log("first\n" + std::string(10000, 'a'))), std::string(4096, 'a'));
}

// A log past the limit is cut: its last `max_bytes` go to <log>.1, it starts again with a line
// saying so, and
// a writer appending to it (as a function's stdout does) goes on at its new start. Smaller logs
// and files that are not logs are left alone.
TEST(BoundFunctionLogsTest, ALogPastTheLimitIsCutAndItsWriterGoesOnAtItsStart) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("phos-bound-logs-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string big = (dir / "fn-1.log").string();
  const std::string small = (dir / "fn-2.log").string();
  const std::string other = (dir / "notes.txt").string();
  std::string flood(3u << 20, 'x');
  flood.replace(flood.size() - 4, 4, "tail");
  int writer = open(big.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(write(writer, flood.data(), flood.size()), static_cast<ssize_t>(flood.size()));
  std::ofstream(small) << "a few lines\n";
  std::ofstream(other) << flood;

  EXPECT_EQ(BoundFunctionLogs(dir.string(), 2u << 20), 1);
  EXPECT_EQ(fs::file_size(big + ".1"), uintmax_t{2} << 20) << "the last 2 MiB, no more";
  EXPECT_EQ(LastLogLine(big + ".1"), std::string(4092, 'x') + "tail");  // its last 4 KiB
  EXPECT_EQ(LastLogLine(big),
            "[phosd] this log passed its limit of 2 MiB and was cut here; its last 2 MiB before the cut are in "
            "fn-1.log.1");
  const uintmax_t marker = fs::file_size(big);
  EXPECT_LT(marker, 200u);
  ASSERT_EQ(write(writer, "after\n", 6), 6);
  close(writer);
  EXPECT_EQ(fs::file_size(big), marker + 6) << "the writer went on at the log's new end";
  EXPECT_EQ(LastLogLine(big), "after");
  EXPECT_EQ(fs::file_size(small), 12u);
  EXPECT_EQ(fs::file_size(other), flood.size());
  EXPECT_FALSE(fs::exists(small + ".1"));
  // Below the limit now: nothing more to cut.
  EXPECT_EQ(BoundFunctionLogs(dir.string(), 2u << 20), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phos::runtime
