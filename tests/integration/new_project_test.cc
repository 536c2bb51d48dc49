// phos-fn new: the function template under another name, refused for a name that cannot be a
// function's and CMake project's, or a directory that exists. (That the project builds against an
// installed phos and serves is the Install test's: tests/install.)
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "phos/base/subprocess.h"

namespace {

struct Ran {
  int exit_code = -1;
  std::string out;  // standard output and error
};

Ran PhosFn(std::vector<std::string> args) {
  args.insert(args.begin(), PHOS_PHOS_FN);
  phos::SpawnOptions options;
  options.argv = std::move(args);
  options.stderr_to_stdout = true;
  phos::Result<phos::CommandOutput> r = phos::RunCommand(std::move(options), std::chrono::seconds(60));
  if (!r.ok()) return {-1, r.status().ToString()};
  return {r->status.ShellCode(), r->output};
}

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class NewProjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / ("phos-new-project-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(NewProjectTest, WritesTheTemplateUnderTheNameGiven) {
  const auto r = PhosFn({"new", "my-scaler", "--dir", (dir_ / "p").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* file : {"CMakeLists.txt", "kernels.cuh", "main.cc", "README.md", "test/function_test.cc"}) {
    const std::string text = Read(dir_ / "p" / file);
    const std::string original = Read(std::filesystem::path(PHOS_TEMPLATE_DIR) / file);
    ASSERT_FALSE(original.empty()) << file;
    // Every whole word "hello" became the name; nothing else changed.
    size_t words = 0;
    for (size_t at = original.find("hello"); at != std::string::npos; at = original.find("hello", at + 1)) ++words;
    std::string expected = original;
    for (size_t at = expected.find("hello"); at != std::string::npos; at = expected.find("hello", at)) {
      expected.replace(at, 5, "my-scaler");
      at += 9;
    }
    EXPECT_EQ(text, expected) << file << " (" << words << " occurrences)";
  }
  EXPECT_NE(Read(dir_ / "p/CMakeLists.txt").find("phos_add_function(NAME my-scaler"), std::string::npos);
}

TEST_F(NewProjectTest, ABadNameOrAnExistingDirectoryIsRefused) {
  for (const char* bad : {"9lives", "has space", "dots.in.it", "slash/y", "", "test", "modules", "function_test"}) {
    const auto r = PhosFn({"new", bad, "--dir", (dir_ / "bad").string()});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("project name"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "bad")) << bad;
  }
  std::filesystem::create_directories(dir_ / "taken");
  std::ofstream(dir_ / "taken/main.cc") << "mine\n";
  const auto r = PhosFn({"new", "fine", "--dir", (dir_ / "taken").string()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("exists already"), std::string::npos) << r.out;
  EXPECT_EQ(Read(dir_ / "taken/main.cc"), "mine\n");
}

}  // namespace
