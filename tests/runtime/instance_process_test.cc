// What the instance manager reads back from a function's log (runtime/src/instance_process.h).
#include "instance_process.h"

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

}  // namespace
}  // namespace phos::runtime
