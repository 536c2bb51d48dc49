// `phos-fn check PROGRAM` on programs built against NVIDIA's libraries, each prediction held
// against what the dynamic loader really does with the program on phos's libraries
// (LD_LIBRARY_PATH=<build>/lib/phos/frontend first, as phos-fn run sets it; no phosd is needed to load).
#include "phos/surface/check.h"

#include <elf.h>

#include <cstdlib>
#include <functional>

#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::Ran;
using testing::ReadText;
using testing::RunTool;
using testing::ScratchDir;
using testing::Words;
using testing::WriteText;

Ran Check(const std::string& program) {
  return RunTool({PHOS_PHOS_FN, "check", program});
}

// LD_LIBRARY_PATH as phos-fn run sets it: phos's libraries, then the caller's.
std::string PhosLibraryPath() {
  std::string path = PHOS_FRONTEND_LIB_DIR;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    path += ":" + std::string(old);
  return path;
}

// The program run as phos-fn run runs it, standard error included.
Ran OnPhosLibraries(std::vector<std::string> argv,
                    std::vector<std::pair<std::string, std::string>> env = {}) {
  env.emplace_back("LD_LIBRARY_PATH", PhosLibraryPath());
  return RunTool(std::move(argv), std::move(env), /*with_stderr=*/true);
}

// The file ldd (the loader) takes for `name` under phos-fn run's LD_LIBRARY_PATH; empty: none.
std::string LoaderTakes(const std::string& program, const std::string& name) {
  for (const std::string& line : Lines(OnPhosLibraries({"ldd", program}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() >= 3 && w[0] == name && w[1] == "=>") return w[2];
    if (w.size() == 2 && w[0] == name) return w[0];  // a DT_NEEDED path: "/path/libx.so (0x...)"
  }
  return "";
}

bool IsPhosLibrary(const std::string& path, const std::string& soname) {
  return std::filesystem::canonical(path) ==
         std::filesystem::canonical(std::string(PHOS_FRONTEND_LIB_DIR "/") + soname);
}

std::string LastLine(const std::string& out) {
  std::vector<std::string> lines = Lines(out);
  return lines.empty() ? "" : lines.back();
}

bool Has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

TEST(CheckTest, AProgramUsingServedFunctionsRuns) {
  Ran r = Check(PHOS_PLAIN_CUDA_PROGRAM);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(LastLine(r.out), "runs");
  // Its imports, as nm lists them, each named and served.
  for (const char* f : {"cudaMalloc", "cudaMemcpy", "cudaFree", "cublasCreate_v2", "cublasSgemm_v2"}) {
    EXPECT_TRUE(Has(r.out, std::string("  served   ") + f + " ")) << f << "\n" << r.out;
  }
  EXPECT_FALSE(Has(r.out, "lacks")) << r.out;
  // The loader takes phos's libraries for it, though its run path names the toolkit's.
  EXPECT_TRUE(IsPhosLibrary(LoaderTakes(PHOS_PLAIN_CUDA_PROGRAM, "libcudart.so.13"), "libcudart.so.13"));
  // (integration_run_test runs this program through phosd, and it computes its SGEMM right.)
}

TEST(CheckTest, ALazilyBoundMissingFunctionLoadsAndFailsAtItsCall) {
  Ran r = Check(PHOS_CHECK_LACKING);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "  lacks    cudaGraphicsUnregisterResource ")) << r.out;
  EXPECT_EQ(LastLine(r.out), "loads; these calls fail: cudaGraphicsUnregisterResource (missing)");
  EXPECT_TRUE(Has(r.out, "bound lazily: its first call ends the process")) << r.out;
  EXPECT_FALSE(Has(r.out, "will not load")) << r.out;

  // The loader agrees: the program starts, and ends where it calls the function.
  Ran started = OnPhosLibraries({PHOS_CHECK_LACKING});
  EXPECT_EQ(started.exit_code, 0) << started.out;
  EXPECT_EQ(started.out, "started\n");
  Ran called = OnPhosLibraries({PHOS_CHECK_LACKING, "call"});
  EXPECT_NE(called.exit_code, 0);
  EXPECT_TRUE(Has(called.out, "started\n")) << called.out;
  EXPECT_TRUE(Has(called.out, "symbol lookup error")) << called.out;
  EXPECT_TRUE(Has(called.out, "cudaGraphicsUnregisterResource")) << called.out;
}

TEST(CheckTest, AMissingFunctionBoundAtLoadStopsTheProgramLoading) {
  Ran r = Check(PHOS_CHECK_LACKING_NOW);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out), "will not load: missing cudaGraphicsUnregisterResource");

  Ran loaded = OnPhosLibraries({PHOS_CHECK_LACKING_NOW});
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_FALSE(Has(loaded.out, "started")) << loaded.out;
  EXPECT_TRUE(Has(loaded.out, "undefined symbol: cudaGraphicsUnregisterResource")) << loaded.out;
}

Result<CheckReport> CheckInProcess(const std::string& program, const Surface& surface,
                                   const std::function<void(LoaderEnvironment*)>& change = {}) {
  Result<LoaderEnvironment> env = LoaderEnvironment::ForPhosRun(PHOS_FRONTEND_LIB_DIR);
  if (!env.ok()) return env.status();
  if (change) change(&*env);
  return CheckProgram(program, surface, *env);
}

TEST(CheckTest, LdBindNowBindsEveryImportAtLoad) {
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<CheckReport> report =
      CheckInProcess(PHOS_CHECK_LACKING, *surface, [](LoaderEnvironment* env) { env->bind_now = true; });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->load_failures.empty());
  EXPECT_EQ(report->verdict(), Verdict::kWillNotLoad);
  EXPECT_EQ(LastLine(FormatReport(*report)), "will not load: missing cudaGraphicsUnregisterResource");

  Ran loaded = OnPhosLibraries({PHOS_CHECK_LACKING}, {{"LD_BIND_NOW", "1"}});
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_FALSE(Has(loaded.out, "started")) << loaded.out;
}

TEST(CheckTest, ImportsOfTheLibrariesAProgramLoadsCount) {
  Ran r = Check(PHOS_CHECK_WITH_HELPER);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // The import is the helper's, found through the program's $ORIGIN run path.
  bool helper_line = false;
  for (const std::string& line : Lines(r.out)) {
    if (Has(line, "lacks    cudaGraphicsUnregisterResource") && Has(line, "check_helper/libcheck_helper.so"))
      helper_line = true;
  }
  EXPECT_TRUE(helper_line) << r.out;
  EXPECT_TRUE(Has(r.out, "loads; these calls fail: cudaGraphicsUnregisterResource")) << r.out;
  EXPECT_EQ(OnPhosLibraries({PHOS_CHECK_WITH_HELPER}).out, "started\n");
}

TEST(CheckTest, AProgramsOwnCudaNamedFunctionIsNoneOfNvidias) {
  // cuda_init comes from the program's own library, which defines it: no line, no failure. Its
  // cudaHostAlloc is served, with the note of what phos refuses of it (refused.tsv).
  Ran r = Check(PHOS_CHECK_OWN_CUDA_NAMED);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "cuda_init")) << r.out;
  EXPECT_TRUE(Has(r.out, "  served   cudaHostAlloc")) << r.out;
  EXPECT_TRUE(Has(r.out, "cudaErrorNotSupported for flags with cudaHostAllocMapped")) << r.out;
  EXPECT_EQ(LastLine(r.out), "runs");
  // The loader agrees: on phos's libraries the program loads and its cuda_init answers.
  Ran ran = OnPhosLibraries({PHOS_CHECK_OWN_CUDA_NAMED});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_TRUE(Has(ran.out, "cuda_init: the program's own\nstarted 7\n")) << ran.out;
}

TEST(CheckTest, AStaticallyLinkedRuntimeCannotBeRedirected) {
  Ran r = Check(PHOS_CHECK_STATIC_CUDART);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "cannot be redirected")) << r.out;
  EXPECT_TRUE(Has(r.out, "cudaMalloc among them")) << r.out;
  EXPECT_TRUE(Has(r.out, "-cudart shared")) << r.out;
  EXPECT_FALSE(Has(r.out, "\nruns\n")) << r.out;
}

TEST(CheckTest, AStrippedStaticRuntimeIsKnownByItsKernels) {
  // Stripped, the program's own cudaMalloc is gone from its symbols: nothing is left to tell,
  // and it imports no CUDA function, which is no "runs". Kernels (.nv_fatbin) it registers
  // without importing __cudaRegisterFatBinary still give it away.
  ScratchDir dir;
  const std::string stripped = dir / "stripped";
  ASSERT_EQ(RunTool({"strip", "-o", stripped, PHOS_CHECK_STATIC_CUDART}).exit_code, 0);
  Ran plain = Check(stripped);
  EXPECT_EQ(plain.exit_code, 1) << plain.out;
  EXPECT_EQ(LastLine(plain.out), "no CUDA imports found; libraries it dlopens are not seen");
  WriteText(dir / "fatbin", std::string(64, '\0'));
  const std::string with_kernels = dir / "with_kernels";
  ASSERT_EQ(RunTool({"objcopy", "--add-section", ".nv_fatbin=" + (dir / "fatbin"), stripped, with_kernels})
                .exit_code,
            0);
  Ran r = Check(with_kernels);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "holds CUDA kernels (.nv_fatbin) but imports no __cudaRegisterFatBinary")) << r.out;
}

TEST(CheckTest, AStaticallyLinkedProgramTakesNoLibrary) {
  Ran r = Check(PHOS_CHECK_STATIC_PROGRAM);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out), std::string("cannot be redirected: ") + PHOS_CHECK_STATIC_PROGRAM +
                                 " is statically linked: no dynamic loader runs for it, so phos's libraries "
                                 "cannot be loaded into it");
  EXPECT_TRUE(Has(RunTool({"ldd", PHOS_CHECK_STATIC_PROGRAM}, {}, true).out, "not a dynamic executable"));
}

TEST(CheckTest, AProgramImportingNoCudaFunctionIsNoRuns) {
  // sh, found in PATH as phos-fn run's execvp finds it.
  Ran r = RunTool({PHOS_PHOS_FN, "check", "sh"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out), "no CUDA imports found; libraries it dlopens are not seen");
  std::string sh = RunTool({"/bin/sh", "-c", "command -v sh"}).out;
  ASSERT_FALSE(sh.empty());
  sh.pop_back();
  EXPECT_TRUE(r.out.starts_with(sh + ": 0 CUDA function imports")) << r.out;
}

TEST(CheckTest, AnotherCudaVersionsRuntimeCannotBeRedirected) {
  Ran r = Check(PHOS_CHECK_OTHER_CUDA_PROGRAM);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out),
            "cannot be redirected: " PHOS_CHECK_OTHER_CUDA_PROGRAM
            " needs libcudart.so.12, another version of the CUDA runtime than the "
            "libcudart.so.13 phos stands in for: rebuild it against the CUDA toolkit phos serves");
  EXPECT_FALSE(
      IsPhosLibrary(LoaderTakes(PHOS_CHECK_OTHER_CUDA_PROGRAM, "libcudart.so.12"), "libcudart.so.13"));
}

TEST(CheckTest, ADtRpathToTheToolkitKeepsNvidiasRuntime) {
  // Its DT_RPATH is searched before LD_LIBRARY_PATH: the loader takes NVIDIA's libcudart.
  const std::string nvidia = LoaderTakes(PHOS_CHECK_RPATH_CUDART, "libcudart.so.13");
  ASSERT_FALSE(nvidia.empty());
  ASSERT_FALSE(IsPhosLibrary(nvidia, "libcudart.so.13"));
  Ran r = Check(PHOS_CHECK_RPATH_CUDART);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, std::string("cannot be redirected: ") + PHOS_CHECK_RPATH_CUDART + " loads " +
                             nvidia + " for libcudart.so.13: the DT_RPATH of " + PHOS_CHECK_RPATH_CUDART +
                             " is searched before LD_LIBRARY_PATH"))
      << r.out;
  EXPECT_FALSE(Has(r.out, "\nruns\n")) << r.out;
}

TEST(CheckTest, TheRuntimeNamedByPathOrByItsLinkNameIsNotPhoss) {
  // By path: the loader takes that very file; check names it, and does not take the stand-in's
  // own cudaMalloc for a runtime linked in statically.
  const std::string by_path = LoaderTakes(
      PHOS_CHECK_PATH_CUDART_PROGRAM, std::filesystem::path(PHOS_CHECK_PATH_CUDART_PROGRAM).parent_path() /
                                          "check_path_cudart/libcudart.so.13");
  ASSERT_FALSE(by_path.empty());
  EXPECT_FALSE(IsPhosLibrary(by_path, "libcudart.so.13"));
  Ran path = Check(PHOS_CHECK_PATH_CUDART_PROGRAM);
  EXPECT_EQ(path.exit_code, 1) << path.out;
  EXPECT_TRUE(Has(path.out, "needs " + by_path + " by its path, so the loader takes that file")) << path.out;
  EXPECT_FALSE(Has(path.out, "statically")) << path.out;

  // By the unversioned link name, which phos's directory does not hold.
  const std::string unversioned = LoaderTakes(PHOS_CHECK_UNVERSIONED_CUDART_PROGRAM, "libcudart.so");
  ASSERT_FALSE(unversioned.empty());
  EXPECT_FALSE(IsPhosLibrary(unversioned, "libcudart.so.13"));
  Ran link_name = Check(PHOS_CHECK_UNVERSIONED_CUDART_PROGRAM);
  EXPECT_EQ(link_name.exit_code, 1) << link_name.out;
  EXPECT_TRUE(Has(link_name.out, "needs libcudart.so, the CUDA runtime's unversioned link name"))
      << link_name.out;
  EXPECT_FALSE(Has(link_name.out, "statically")) << link_name.out;
}

TEST(CheckTest, ACublasLtProgramLoadsPhossLibraryAndRuns) {
  Ran r = Check(PHOS_CHECK_CUBLASLT);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "  served   cublasLtCreate ")) << r.out;
  EXPECT_TRUE(Has(r.out, "  served   cublasLtDestroy ")) << r.out;
  // The loader, given phos's libraries first, takes phos's libcublasLt.so.13 over NVIDIA's on the
  // program's run path.
  const std::string taken = LoaderTakes(PHOS_CHECK_CUBLASLT, "libcublasLt.so.13");
  ASSERT_FALSE(taken.empty());
  EXPECT_TRUE(IsPhosLibrary(taken, "libcublasLt.so.13")) << taken;
  EXPECT_EQ(LastLine(r.out), "runs");
}

TEST(CheckTest, ARefusedFunctionIsACallThatFailsWithItsError) {
  // The plain program calls no function phos refuses outright: a surface with one more refusal
  // shows the wording.
  Result<SurfaceSources> sources = SurfaceSources::WithLibrariesIn(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(sources.ok()) << sources.status().ToString();
  std::string refusals =
      std::string(sources->refusals) + "cudaMalloc\trefused\tcudaErrorNotSupported\ta test's\n";
  sources->refusals = refusals;
  Result<Surface> surface = Surface::Build(*sources);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<CheckReport> report = CheckInProcess(PHOS_PLAIN_CUDA_PROGRAM, *surface);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->verdict(), Verdict::kCallsFail);
  const std::string out = FormatReport(*report);
  EXPECT_TRUE(Has(out, "  refused  cudaMalloc ")) << out;
  EXPECT_TRUE(Has(out, "returns cudaErrorNotSupported: a test's")) << out;
  EXPECT_EQ(LastLine(out), "loads; these calls fail: cudaMalloc (returns cudaErrorNotSupported)");
}

TEST(CheckTest, AFileTheLoaderCannotLoadStopsItThere) {
  // A file named like the helper library that is no ELF file, in a directory searched before
  // the program's run path: the loader stops at it rather than looking further.
  ScratchDir dir;
  const std::string libs = dir / "libs";
  ASSERT_TRUE(std::filesystem::create_directory(libs));
  std::string text;
  while (text.size() < 256) text += "no ELF file at all, though it is named like a library\n";
  WriteText(libs + "/libcheck_helper.so", text);
  const std::string path = PhosLibraryPath() + ":" + libs;
  Ran loaded = RunTool({PHOS_CHECK_WITH_HELPER}, {{"LD_LIBRARY_PATH", path}}, /*with_stderr=*/true);
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_TRUE(Has(loaded.out, "invalid ELF header")) << loaded.out;

  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<CheckReport> report = CheckInProcess(PHOS_CHECK_WITH_HELPER, *surface, [&](LoaderEnvironment* env) {
    env->ld_library_path.push_back(libs);
  });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->verdict(), Verdict::kWillNotLoad);
  ASSERT_EQ(report->load_failures.size(), 1u);
  EXPECT_TRUE(Has(report->load_failures[0],
                  "libcheck_helper.so (needed by " PHOS_CHECK_WITH_HELPER ") cannot be loaded: " + libs +
                      "/libcheck_helper.so: not an ELF file"))
      << report->load_failures[0];
}

TEST(CheckTest, WhatCannotBeReadIsAnErrorNotAVerdict) {
  ScratchDir dir;
  WriteText(dir / "garbage",
            "\x7f"
            "ELF garbage that is no ELF file at all");
  Ran garbage = RunTool({PHOS_PHOS_FN, "check", dir / "garbage"}, {}, /*with_stderr=*/true);
  EXPECT_EQ(garbage.exit_code, 2) << garbage.out;
  EXPECT_TRUE(Has(garbage.out, dir / "garbage")) << garbage.out;
  EXPECT_FALSE(Has(garbage.out, "runs")) << garbage.out;

  WriteText(dir / "text", "just text\n");
  Ran text = RunTool({PHOS_PHOS_FN, "check", dir / "text"}, {}, true);
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_TRUE(Has(text.out, "not an ELF file")) << text.out;

  const std::string program = ReadText(PHOS_PLAIN_CUDA_PROGRAM);
  WriteText(dir / "truncated", program.substr(0, program.size() / 2));
  Ran truncated = RunTool({PHOS_PHOS_FN, "check", dir / "truncated"}, {}, true);
  EXPECT_EQ(truncated.exit_code, 2) << truncated.out;
  EXPECT_TRUE(Has(truncated.out, dir / "truncated")) << truncated.out;

  // An object file (ET_REL) is neither an executable nor a library.
  std::string relocatable = program;
  relocatable[16] = ET_REL;  // e_type, little-endian
  WriteText(dir / "relocatable", relocatable);
  Ran object = RunTool({PHOS_PHOS_FN, "check", dir / "relocatable"}, {}, true);
  EXPECT_EQ(object.exit_code, 2) << object.out;
  EXPECT_TRUE(Has(object.out, "not an executable or shared library (ELF type 1)")) << object.out;

  Ran absent = RunTool({PHOS_PHOS_FN, "check", dir / "absent"}, {}, true);
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_TRUE(Has(absent.out, "No such file")) << absent.out;

  Ran not_in_path = RunTool({PHOS_PHOS_FN, "check", "phos-no-such-program"}, {}, true);
  EXPECT_EQ(not_in_path.exit_code, 2);
  EXPECT_TRUE(Has(not_in_path.out, "phos-no-such-program: no such program in PATH")) << not_in_path.out;

  Ran neither = RunTool({PHOS_PHOS_FN, "check"}, {}, true);
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_TRUE(Has(neither.out, "give a PROGRAM or --table")) << neither.out;
}

TEST(CheckTest, WithoutPhossLibrariesBesideItCheckSaysSo) {
  // phos-fn finds phos's libraries at ../lib/phos/frontend from itself: a copy elsewhere has none.
  ScratchDir dir;
  ASSERT_TRUE(std::filesystem::create_directory(dir / "bin"));
  std::filesystem::copy_file(PHOS_PHOS_FN, dir / "bin/phos-fn");
  Ran r = RunTool({dir / "bin/phos-fn", "check", PHOS_PLAIN_CUDA_PROGRAM}, {}, true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(Has(r.out, "phos's libraries: no directory " + (dir / "lib/phos/frontend"))) << r.out;
}

TEST(CheckTest, AMissingLibraryStopsTheProgramLoading) {
  // A copy of the helper-using program without its helper directory beside it.
  ScratchDir dir;
  const std::string copy = dir / "with_helper";
  std::filesystem::copy_file(PHOS_CHECK_WITH_HELPER, copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  Ran r = Check(copy);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out), "will not load: missing libcheck_helper.so (needed by " + copy + ")");
  Ran loaded = OnPhosLibraries({copy});
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_TRUE(Has(loaded.out, "libcheck_helper.so")) << loaded.out;
}

}  // namespace
}  // namespace phos::surface
