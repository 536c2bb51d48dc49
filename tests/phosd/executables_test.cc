#include "executables.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "phos/http/digest.h"

namespace phos::phosd {
namespace {

namespace fs = std::filesystem;

class ExecutablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phosd-executables-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ + "/functions/sub");
    fs::create_directories(root_ + "/functions-other");
    MakeExecutable(root_ + "/functions/fn");
    MakeExecutable(root_ + "/functions/sub/fn2");
    MakeExecutable(root_ + "/functions-other/evil");
    std::ofstream(root_ + "/functions/data") << "not executable";
    auto opened = Executables::Open({.functions_dirs = {root_ + "/functions"},
                                     .artifacts_dir = root_ + "/data/artifacts",
                                     .max_artifact_bytes = 1024});
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    executables_ = std::move(*opened);
  }
  void TearDown() override {
    executables_.reset();
    fs::remove_all(root_);
  }
  static void MakeExecutable(const std::string& path) {
    std::ofstream(path) << "#!/bin/true\n";
    chmod(path.c_str(), 0755);
  }

  std::string root_;
  std::unique_ptr<Executables> executables_;
};

TEST_F(ExecutablesTest, FilesUnderTheFunctionsDirectoryResolveToTheirRealPath) {
  Result<std::string> fn = executables_->Resolve(root_ + "/functions/fn");
  ASSERT_TRUE(fn.ok()) << fn.status().ToString();
  EXPECT_EQ(*fn, fs::canonical(root_ + "/functions/fn").string());
  Result<std::string> nested = executables_->Resolve(root_ + "/functions/sub/../sub/fn2");
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_EQ(*nested, fs::canonical(root_ + "/functions/sub/fn2").string());
  // A link inside pointing inside is followed, and the file it names is what is kept.
  fs::create_symlink(root_ + "/functions/fn", root_ + "/functions/link");
  Result<std::string> linked = executables_->Resolve(root_ + "/functions/link");
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(*linked, fs::canonical(root_ + "/functions/fn").string());
}

TEST_F(ExecutablesTest, NothingElseOnTheHostResolves) {
  for (const std::string& path :
       {std::string("/bin/sh"), root_ + "/functions/../functions-other/evil", root_ + "/functions-other/evil",
        root_ + "/functions/missing", root_ + "/functions/data", root_ + "/functions/sub",
        std::string("functions/fn"), std::string("")}) {
    Result<std::string> r = executables_->Resolve(path);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << path;
  }
  // A symbolic link in the functions directory that points outside it.
  fs::create_symlink("/bin/sh", root_ + "/functions/sh");
  Result<std::string> escaped = executables_->Resolve(root_ + "/functions/sh");
  EXPECT_EQ(escaped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(escaped.status().message().find("not under a functions directory"), std::string::npos)
      << escaped.status().message();
  // A directory that only shares the functions directory's name as a prefix.
  EXPECT_FALSE(executables_->Resolve(root_ + "/functions-other/evil").ok());
}

TEST_F(ExecutablesTest, ArtifactsAreStoredByContentAndChecked) {
  const std::string bytes = "#!/bin/true\nartifact\n";
  const std::string hash = http::Sha256Hex(bytes);
  Result<std::string> stored = executables_->StoreArtifact(bytes, hash);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, hash);
  Result<std::string> path = executables_->ArtifactPath(hash);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), bytes.size());
  // Deploys may name it.
  Result<std::string> resolved = executables_->Resolve(*path);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  // The same bytes again: the same artifact; without a hash to check: stored all the same.
  EXPECT_EQ(executables_->StoreArtifact(bytes, "").value(), hash);
  // Nothing but the artifacts themselves is left in the directory (no temporary files).
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(executables_->options().artifacts_dir))
    ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(ExecutablesTest, BadArtifactsAreRefused) {
  const std::string bytes = "#!/bin/true\n";
  Result<std::string> mismatch = executables_->StoreArtifact(bytes, http::Sha256Hex("other bytes"));
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("mismatch"), std::string::npos) << mismatch.status().message();
  EXPECT_EQ(executables_->ArtifactPath(http::Sha256Hex(bytes)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(executables_->StoreArtifact(bytes, "not-a-hash").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(executables_->StoreArtifact("", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(executables_->StoreArtifact(std::string(1025, 'x'), "").status().code(),
            StatusCode::kInvalidArgument);
  for (const char* name : {"../../functions/fn", "ABCDEF", "", "/etc/passwd"}) {
    EXPECT_EQ(executables_->ArtifactPath(name).status().code(), StatusCode::kInvalidArgument) << name;
  }
}

TEST_F(ExecutablesTest, UploadsAreStoredOnTheirOwnThread) {
  std::promise<Result<std::string>> done;
  executables_->StoreArtifactAsync("#!/bin/true\nasync\n", "",
                                   [&](Result<std::string> r) { done.set_value(std::move(r)); });
  Result<std::string> stored = done.get_future().get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(executables_->ArtifactPath(*stored).ok());
}

TEST(ExecutablesOpenTest, NeedsAnExistingFunctionsDirectory) {
  EXPECT_FALSE(Executables::Open({.functions_dirs = {}, .artifacts_dir = "/tmp/x"}).ok());
  EXPECT_FALSE(
      Executables::Open({.functions_dirs = {"/nonexistent-phos-dir"}, .artifacts_dir = "/tmp/phos-a"}).ok());
}

}  // namespace
}  // namespace phos::phosd
