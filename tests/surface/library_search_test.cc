// The loader's search order (ld.so(8)) as CandidatePaths gives it, the ld.so cache as ldconfig
// prints it, and the libraries CheckProgram reads against those the loader itself resolves
// (ldd).
#include "phos/surface/library_search.h"

#include "phos/surface/check.h"
#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::RunTool;
using testing::Words;

LoaderEnvironment Environment() {
  LoaderEnvironment env;
  env.ld_library_path = {"/env1", "/env2"};
  env.cache = ParseLdconfigCache(
      "3 libs found in cache `/etc/ld.so.cache'\n"
      "\tlibz.so.1 (libc6,x86-64) => /cache/x86_64/libz.so.1\n"
      "\tlibz.so.1 (libc6) => /cache/i386/libz.so.1\n"
      "\tlibm.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /cache/x86_64/libm.so.6\n");
  env.default_dirs = {"/default"};
  return env;
}

TEST(LibrarySearchTest, LdconfigCacheEntries) {
  LoaderEnvironment env = Environment();
  ASSERT_EQ(env.cache.size(), 3u);
  auto [first, end] = env.cache.equal_range("libz.so.1");
  ASSERT_NE(first, end);
  EXPECT_EQ(first->second, "/cache/x86_64/libz.so.1");
  EXPECT_EQ(std::next(first)->second, "/cache/i386/libz.so.1");
  EXPECT_EQ(env.cache.find("libm.so.6")->second, "/cache/x86_64/libm.so.6");
}

TEST(LibrarySearchTest, RpathOfTheChainThenEnvironmentThenRunpathThenCacheThenDefaults) {
  // The needing library has an RPATH and no RUNPATH: its RPATH, then its loader's, first.
  std::vector<SearchScope> chain = {{"/lib/dir", {"$ORIGIN/own", "/own2"}, {}},
                                    {"/exe/dir", {"${ORIGIN}/exe-rpath"}, {"/exe-runpath"}}};
  EXPECT_EQ(
      CandidatePaths("libz.so.1", chain, Environment()),
      (std::vector<std::string>{"/lib/dir/own/libz.so.1", "/own2/libz.so.1", "/exe/dir/exe-rpath/libz.so.1",
                                "/env1/libz.so.1", "/env2/libz.so.1", "/cache/x86_64/libz.so.1",
                                "/cache/i386/libz.so.1", "/default/libz.so.1"}));
}

TEST(LibrarySearchTest, ARunpathTurnsOffEveryRpath) {
  std::vector<SearchScope> chain = {{"/lib/dir", {"/ignored-own-rpath"}, {"$ORIGIN/../run"}},
                                    {"/exe/dir", {"/ignored-exe-rpath"}, {}}};
  EXPECT_EQ(CandidatePaths("libq.so", chain, Environment()),
            (std::vector<std::string>{"/env1/libq.so", "/env2/libq.so", "/lib/dir/../run/libq.so",
                                      "/default/libq.so"}));
}

TEST(LibrarySearchTest, OnlyTheNeedingFilesRunpathCounts) {
  std::vector<SearchScope> chain = {{"/lib/dir", {}, {}}, {"/exe/dir", {}, {"/exe-runpath"}}};
  EXPECT_EQ(CandidatePaths("libq.so", chain, Environment()),
            (std::vector<std::string>{"/env1/libq.so", "/env2/libq.so", "/default/libq.so"}));
}

TEST(LibrarySearchTest, TokensOtherThanOriginAndEmptyEntriesAreSkipped) {
  std::vector<SearchScope> chain = {{"/o", {}, {"$LIB/x", "", "$ORIGINAL/y", "/a$PLATFORM", "$ORIGIN"}}};
  LoaderEnvironment env;
  env.default_dirs = {};
  EXPECT_EQ(CandidatePaths("libq.so", chain, env), (std::vector<std::string>{"/o/libq.so"}));
}

TEST(LibrarySearchTest, ANameWithASlashIsItsOwnPath) {
  EXPECT_EQ(CandidatePaths("./libq.so", {{"/o", {"/r"}, {}}}, Environment()),
            (std::vector<std::string>{"./libq.so"}));
}

TEST(LibrarySearchTest, ThisMachinesCacheHoldsTheCLibrary) {
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_GT(env->cache.count("libc.so.6"), 0u);
}

// What ldd (the loader itself, with --list) resolves: name -> path.
std::map<std::string, std::string> LoaderResolves(const std::string& program) {
  std::map<std::string, std::string> out;
  for (const std::string& line : Lines(RunTool({"ldd", program}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() >= 3 && w[1] == "=>") out[w[0]] = w[2];
    // The loader itself: "/lib64/ld-linux-x86-64.so.2 (0x...)".
    if (w.size() == 2 && w[0].starts_with("/")) out[std::filesystem::path(w[0]).filename().string()] = w[0];
  }
  return out;
}

TEST(LibrarySearchTest, CheckReadsTheLibrariesTheLoaderLoads) {
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  for (const char* program : {PHOS_PLAIN_CUDA_PROGRAM, PHOS_CHECK_WITH_HELPER, PHOS_PHOS_FN}) {
    SCOPED_TRACE(program);
    Result<CheckReport> report = CheckProgram(program, *surface, *env);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    const std::map<std::string, std::string> loader = LoaderResolves(program);
    ASSERT_FALSE(loader.empty());
    ASSERT_GT(report->objects.size(), 1u);
    // Every library check read is the file the loader takes for that name. (The loader also
    // loads NVIDIA's libraries and what they need, which check leaves to phos's.)
    for (size_t i = 1; i < report->objects.size(); ++i) {
      const std::string& path = report->objects[i];
      const std::string name = std::filesystem::path(path).filename().string();
      auto it = loader.find(name);
      ASSERT_NE(it, loader.end()) << path << " is not among the loader's libraries";
      EXPECT_EQ(std::filesystem::canonical(path), std::filesystem::canonical(it->second)) << name;
    }
  }
}

TEST(LibrarySearchTest, TheProgramsOwnLibraryIsFoundThroughOrigin) {
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok());
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok());
  Result<CheckReport> report = CheckProgram(PHOS_CHECK_WITH_HELPER, *surface, *env);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_GE(report->objects.size(), 2u);
  EXPECT_EQ(std::filesystem::canonical(report->objects[1]), std::filesystem::canonical(PHOS_CHECK_HELPER));
}

}  // namespace
}  // namespace phos::surface
