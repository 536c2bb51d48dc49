// The loader's search order (ld.so(8)) as CandidatePaths gives it, the ld.so cache as ldconfig
// prints it, the system search path as ld.so prints it, PATH as execvp searches it, and the
// libraries CheckProgram reads against those the loader itself resolves (ldd).
#include "phos/surface/library_search.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "phos/surface/check.h"
#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::RunTool;
using testing::ScratchDir;
using testing::Words;
using testing::WriteText;

LoaderEnvironment Environment() {
  LoaderEnvironment env;
  env.ld_library_path = {"/env1", "/env2"};
  env.cache = ParseLdconfigCache(
      "3 libs found in cache `/etc/ld.so.cache'\n"
      "\tlibz.so.1 (libc6,x86-64) => /cache/x86_64/libz.so.1\n"
      "\tlibz.so.1 (libc6) => /cache/i386/libz.so.1\n"
      "\tlibm.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /cache/x86_64/libm.so.6\n");
  env.system_dirs = {"/system"};
  return env;
}

std::vector<std::string> Paths(const std::vector<Candidate>& candidates) {
  std::vector<std::string> paths;
  for (const Candidate& c : candidates) paths.push_back(c.path);
  return paths;
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

TEST(LibrarySearchTest, SystemSearchPathFromTheLoadersHelp) {
  // glibc 2.36's `ld.so --help`, its lines around the system search path.
  EXPECT_EQ(
      ParseSystemSearchPath("Shared library search path:\n"
                            "  (libraries located via /etc/ld.so.cache)\n"
                            "  /lib/x86_64-linux-gnu (system search path)\n"
                            "  /usr/lib/x86_64-linux-gnu (system search path)\n"
                            "  /lib (system search path)\n"
                            "  /usr/lib (system search path)\n"
                            "\n"
                            "Subdirectories of glibc-hwcaps directories, in priority order:\n"
                            "  x86-64-v3 (supported, searched)\n"),
      (std::vector<std::string>{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}));
  EXPECT_TRUE(ParseSystemSearchPath("ld.so: unrecognized option '--help'\n").empty());
}

TEST(LibrarySearchTest, RpathOfTheChainThenEnvironmentThenRunpathThenCacheThenSystem) {
  // The needing library has an RPATH and no RUNPATH: its RPATH, then its loader's, first.
  std::vector<SearchScope> chain = {{"/lib/dir/libx.so", "/lib/dir", {"$ORIGIN/own", "/own2"}, {}},
                                    {"/exe/dir/exe", "/exe/dir", {"${ORIGIN}/exe-rpath"}, {}}};
  const std::vector<Candidate> candidates = CandidatePaths("libz.so.1", chain, Environment());
  EXPECT_EQ(Paths(candidates), (std::vector<std::string>{"/lib/dir/own/libz.so.1", "/own2/libz.so.1",
                                                         "/exe/dir/exe-rpath/libz.so.1", "/env1/libz.so.1",
                                                         "/env2/libz.so.1", "/cache/x86_64/libz.so.1",
                                                         "/cache/i386/libz.so.1", "/system/libz.so.1"}));
  ASSERT_EQ(candidates.size(), 8u);
  EXPECT_EQ(DescribeSource(candidates[2]), "the DT_RPATH of /exe/dir/exe");
  EXPECT_EQ(DescribeSource(candidates[3]), "LD_LIBRARY_PATH");
  EXPECT_EQ(DescribeSource(candidates[5]), "the ld.so cache");
  EXPECT_EQ(DescribeSource(candidates[7]), "the system search path");
}

TEST(LibrarySearchTest, ARunpathTurnsOffEveryRpath) {
  std::vector<SearchScope> chain = {{"/lib/dir/l.so", "/lib/dir", {"/ignored-own-rpath"}, {"$ORIGIN/../run"}},
                                    {"/exe/dir/exe", "/exe/dir", {"/ignored-exe-rpath"}, {}}};
  const std::vector<Candidate> candidates = CandidatePaths("libq.so", chain, Environment());
  EXPECT_EQ(Paths(candidates), (std::vector<std::string>{"/env1/libq.so", "/env2/libq.so",
                                                         "/lib/dir/../run/libq.so", "/system/libq.so"}));
  EXPECT_EQ(DescribeSource(candidates[2]), "the DT_RUNPATH of /lib/dir/l.so");
}

TEST(LibrarySearchTest, AFileWithARunpathLendsNoRpathToWhatItLoads) {
  // glibc drops the DT_RPATH of a file that also has a DT_RUNPATH, wherever it is in the chain.
  std::vector<SearchScope> chain = {{"/lib/l.so", "/lib", {"/requester-rpath"}, {}},
                                    {"/mid/m.so", "/mid", {"/mid-rpath"}, {"/mid-runpath"}},
                                    {"/exe/exe", "/exe", {"/exe-rpath"}, {}}};
  LoaderEnvironment env;
  EXPECT_EQ(Paths(CandidatePaths("libq.so", chain, env)),
            (std::vector<std::string>{"/requester-rpath/libq.so", "/exe-rpath/libq.so"}));
}

TEST(LibrarySearchTest, OnlyTheNeedingFilesRunpathCounts) {
  std::vector<SearchScope> chain = {{"/lib/dir/l.so", "/lib/dir", {}, {}},
                                    {"/exe/dir/exe", "/exe/dir", {}, {"/exe-runpath"}}};
  EXPECT_EQ(Paths(CandidatePaths("libq.so", chain, Environment())),
            (std::vector<std::string>{"/env1/libq.so", "/env2/libq.so", "/system/libq.so"}));
}

TEST(LibrarySearchTest, OtherTokensAreSkippedAndAnEmptyEntryIsTheCurrentDirectory) {
  // An empty entry is the current directory (glibc's fillin_rpath), in a run path as in
  // LD_LIBRARY_PATH; $ORIGIN in LD_LIBRARY_PATH is the executable's directory.
  std::vector<SearchScope> chain = {
      {"/o/l.so", "/o", {}, {"$LIB/x", "", "$ORIGINAL/y", "/a$PLATFORM", "$ORIGIN"}},
      {"/exe/exe", "/exe", {}, {}}};
  LoaderEnvironment env;
  env.ld_library_path = {"", "$ORIGIN/lib"};
  EXPECT_EQ(Paths(CandidatePaths("libq.so", chain, env)),
            (std::vector<std::string>{"./libq.so", "/exe/lib/libq.so", "./libq.so", "/o/libq.so"}));
  std::vector<SearchScope> rpath_chain = {{"/o/l.so", "/o", {"/r", ""}, {}}};
  EXPECT_EQ(Paths(CandidatePaths("libq.so", rpath_chain, LoaderEnvironment())),
            (std::vector<std::string>{"/r/libq.so", "./libq.so"}));
}

TEST(LibrarySearchTest, ANameWithASlashIsItsOwnPath) {
  const std::vector<Candidate> candidates =
      CandidatePaths("./libq.so", {{"/o/l", "/o", {"/r"}, {}}}, Environment());
  EXPECT_EQ(Paths(candidates), (std::vector<std::string>{"./libq.so"}));
  EXPECT_EQ(candidates[0].source, CandidateSource::kPath);
}

TEST(LibrarySearchTest, PhosRunPutsPhosLibrariesBeforeTheCallersPath) {
  const char* saved = std::getenv("LD_LIBRARY_PATH");
  const std::string old = saved != nullptr ? saved : "";
  setenv("LD_LIBRARY_PATH", "/a;/b:", 1);
  EXPECT_EQ(RunLibraryPath("/phos/lib/frontend"), "/phos/lib/frontend:/a;/b:");
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun("/phos/lib/frontend");
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->ld_library_path, (std::vector<std::string>{"/phos/lib/frontend", "/a", "/b", ""}));
  unsetenv("LD_LIBRARY_PATH");
  EXPECT_EQ(RunLibraryPath("/phos/lib/frontend"), "/phos/lib/frontend");
  if (saved != nullptr) setenv("LD_LIBRARY_PATH", old.c_str(), 1);
}

TEST(LibrarySearchTest, ThisMachinesCacheHoldsTheCLibrary) {
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_GT(env->cache.count("libc.so.6"), 0u);
  EXPECT_FALSE(env->system_dirs.empty());
}

TEST(LibrarySearchTest, PathIsSearchedAsTheShellSearchesIt) {
  const char* path = std::getenv("PATH");
  ASSERT_NE(path, nullptr);
  Result<std::string> sh = FindProgram("sh", path);
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  // The shell's own search of the same PATH.
  EXPECT_EQ(*sh + "\n", RunTool({"/bin/sh", "-c", "command -v sh"}, {{"PATH", path}}).out);

  ScratchDir dir;
  ASSERT_EQ(mkdir((dir / "a").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((dir / "b").c_str(), 0700), 0);
  WriteText(dir / "a/prog", "#!/bin/sh\n");  // not executable: passed over
  WriteText(dir / "b/prog", "#!/bin/sh\n");
  ASSERT_EQ(chmod((dir / "b/prog").c_str(), 0700), 0);
  const std::string scratch_path = dir / "a" + ":" + dir / "b";
  Result<std::string> prog = FindProgram("prog", scratch_path.c_str());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  EXPECT_EQ(*prog, dir / "b/prog");
  EXPECT_EQ(*FindProgram("./prog", scratch_path.c_str()), "./prog");  // a slash: no search
  Result<std::string> absent = FindProgram("no-such-program", scratch_path.c_str());
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
}

// What ldd (the loader itself, with --list) resolves under phos-fn run's LD_LIBRARY_PATH: every
// library it loads, symbolic links resolved.
std::set<std::filesystem::path> LoaderLoads(const std::string& program) {
  std::string path = PHOS_FRONTEND_LIB_DIR;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    path += ":" + std::string(old);
  std::set<std::filesystem::path> out;
  for (const std::string& line : Lines(RunTool({"ldd", program}, {{"LD_LIBRARY_PATH", path}}).out)) {
    std::vector<std::string> w = Words(line);
    EXPECT_FALSE(w.size() >= 3 && w[2] == "not") << program << ": " << line;  // "=> not found"
    if (w.size() >= 3 && w[1] == "=>") out.insert(std::filesystem::canonical(w[2]));
    // The loader itself: "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso.so.1 is no file.
    if (w.size() == 2 && w[0].starts_with("/")) out.insert(std::filesystem::canonical(w[0]));
  }
  return out;
}

std::set<std::filesystem::path> CheckReads(const CheckReport& report) {
  std::set<std::filesystem::path> out;
  for (size_t i = 1; i < report.objects.size(); ++i)
    out.insert(std::filesystem::canonical(report.objects[i]));
  return out;
}

TEST(LibrarySearchTest, CheckReadsTheLibrariesTheLoaderLoads) {
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  for (const char* program : {PHOS_PLAIN_CUDA_PROGRAM, PHOS_CHECK_WITH_HELPER, PHOS_CHECK_CUBLASLT,
                              PHOS_CHECK_RPATH_CUDART, PHOS_CHECK_OWN_CUDA_NAMED, PHOS_PHOS_FN}) {
    SCOPED_TRACE(program);
    Result<CheckReport> report = CheckProgram(program, *surface, *env);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->load_failures.empty());
    const std::set<std::filesystem::path> loader = LoaderLoads(program);
    ASSERT_GT(loader.size(), 1u);
    EXPECT_EQ(CheckReads(*report), loader);
  }
}

TEST(LibrarySearchTest, TheSystemSearchPathFindsWhatTheCacheFinds) {
  // Without the cache, every library must come from the system search path: the same files.
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  env->cache.clear();
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<CheckReport> report = CheckProgram(PHOS_PHOS_FN, *surface, *env);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->load_failures.empty());
  EXPECT_EQ(CheckReads(*report), LoaderLoads(PHOS_PHOS_FN));
}

TEST(LibrarySearchTest, TheProgramsOwnLibraryIsFoundThroughOrigin) {
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(env.ok());
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok());
  Result<CheckReport> report = CheckProgram(PHOS_CHECK_WITH_HELPER, *surface, *env);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  // Among the libraries it loads (a sanitizer build's runtime comes first in such a build).
  const std::filesystem::path helper = std::filesystem::canonical(PHOS_CHECK_HELPER);
  EXPECT_TRUE(std::any_of(report->objects.begin() + 1, report->objects.end(),
                          [&](const std::string& o) { return std::filesystem::canonical(o) == helper; }))
      << "the helper library was not found through $ORIGIN";
}

}  // namespace
}  // namespace phos::surface
