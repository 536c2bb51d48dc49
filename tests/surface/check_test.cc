// `phos-fn check PROGRAM` on programs built against NVIDIA's libraries, each prediction held
// against what the dynamic loader really does with the program on phos's libraries
// (LD_LIBRARY_PATH=<build>/lib/frontend, as phos-fn run sets it; no phosd is needed to load).
#include "phos/surface/check.h"

#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::Ran;
using testing::ReadText;
using testing::RunTool;
using testing::ScratchDir;
using testing::WriteText;

Ran Check(const std::string& program) {
  return RunTool({PHOS_PHOS_FN, "check", program});
}

// The program run as phos-fn run runs it, standard error included.
Ran OnPhosLibraries(std::vector<std::string> argv,
                    std::vector<std::pair<std::string, std::string>> env = {}) {
  env.emplace_back("LD_LIBRARY_PATH", PHOS_FRONTEND_LIB_DIR);
  return RunTool(std::move(argv), std::move(env), /*with_stderr=*/true);
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
  // (integration_run_test runs this program through phosd, and it computes its SGEMM right.)
}

TEST(CheckTest, ALazilyBoundMissingFunctionLoadsAndFailsAtItsCall) {
  Ran r = Check(PHOS_CHECK_LACKING);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "  lacks    cudaGraphCreate ")) << r.out;
  EXPECT_EQ(LastLine(r.out), "loads; these calls fail: cudaGraphCreate (missing)");
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
  EXPECT_TRUE(Has(called.out, "cudaGraphCreate")) << called.out;
}

TEST(CheckTest, AMissingFunctionBoundAtLoadStopsTheProgramLoading) {
  Ran r = Check(PHOS_CHECK_LACKING_NOW);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(LastLine(r.out), "will not load: missing cudaGraphCreate");

  Ran loaded = OnPhosLibraries({PHOS_CHECK_LACKING_NOW});
  EXPECT_NE(loaded.exit_code, 0);
  EXPECT_FALSE(Has(loaded.out, "started")) << loaded.out;
  EXPECT_TRUE(Has(loaded.out, "undefined symbol: cudaGraphCreate")) << loaded.out;
}

TEST(CheckTest, LdBindNowBindsEveryImportAtLoad) {
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  env->bind_now = true;
  Result<CheckReport> report = CheckProgram(PHOS_CHECK_LACKING, *surface, *env);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->missing_libraries.empty());
  EXPECT_EQ(report->verdict(), Verdict::kWillNotLoad);
  EXPECT_EQ(LastLine(FormatReport(*report, *surface)), "will not load: missing cudaGraphCreate");

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
    if (Has(line, "lacks    cudaGraphCreate") && Has(line, "check_helper/libcheck_helper.so"))
      helper_line = true;
  }
  EXPECT_TRUE(helper_line) << r.out;
  EXPECT_TRUE(Has(r.out, "loads; these calls fail: cudaGraphCreate")) << r.out;
  EXPECT_EQ(OnPhosLibraries({PHOS_CHECK_WITH_HELPER}).out, "started\n");
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
  // Stripped, the program's own cudaMalloc is gone from its symbols; kernels (.nv_fatbin) it
  // registers without importing __cudaRegisterFatBinary still give it away.
  ScratchDir dir;
  const std::string stripped = dir / "stripped";
  ASSERT_EQ(RunTool({"strip", "-o", stripped, PHOS_CHECK_STATIC_CUDART}).exit_code, 0);
  Ran plain = Check(stripped);
  EXPECT_FALSE(Has(plain.out, "cannot be redirected")) << plain.out;  // nothing left to tell
  WriteText(dir / "fatbin", std::string(64, '\0'));
  const std::string with_kernels = dir / "with_kernels";
  ASSERT_EQ(RunTool({"objcopy", "--add-section", ".nv_fatbin=" + (dir / "fatbin"), stripped, with_kernels})
                .exit_code,
            0);
  Ran r = Check(with_kernels);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "holds CUDA kernels (.nv_fatbin) but imports no __cudaRegisterFatBinary")) << r.out;
}

TEST(CheckTest, AnotherCudaVersionsRuntimeCannotBeRedirected) {
  Ran r = Check(PHOS_CHECK_OTHER_CUDA_PROGRAM);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "cannot be redirected: " PHOS_CHECK_OTHER_CUDA_PROGRAM
                         " needs libcudart.so.12, and phos stands in for libcudart.so.13 only"))
      << r.out;
  EXPECT_FALSE(Has(r.out, "loads;")) << r.out;
}

TEST(CheckTest, ALibraryPhosHasNoneOfYetAnswersOutsidePhosd) {
  Ran r = Check(PHOS_CHECK_CUBLASLT);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "  lacks    cublasLtCreate ")) << r.out;
  // The loader, given phos's libraries first, still takes NVIDIA's libcublasLt.so.13 (from the
  // program's run path): the check names that file.
  std::string nvidia;
  for (const std::string& line : Lines(OnPhosLibraries({"ldd", PHOS_CHECK_CUBLASLT}).out)) {
    std::vector<std::string> w = testing::Words(line);
    if (w.size() >= 3 && w[0] == "libcublasLt.so.13") nvidia = w[2];
  }
  ASSERT_FALSE(nvidia.empty());
  EXPECT_TRUE(Has(r.out, "NVIDIA's " + nvidia + " answers it, outside phosd")) << r.out;
  EXPECT_EQ(LastLine(r.out),
            "loads; these calls fail: cublasLtCreate (NVIDIA's, outside phosd), cublasLtDestroy (NVIDIA's, "
            "outside phosd)");
}

TEST(CheckTest, ARefusedFunctionIsACallThatFailsWithItsError) {
  // No function is refused outright today (refused.tsv holds partial support only): a surface
  // with one more refusal shows the wording.
  Result<SurfaceSources> sources = SurfaceSources::WithLibrariesIn(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(sources.ok()) << sources.status().ToString();
  std::string refusals =
      std::string(sources->refusals) + "cudaMalloc\trefused\tcudaErrorNotSupported\ta test's\n";
  sources->refusals = refusals;
  Result<Surface> surface = Surface::Build(*sources);
  ASSERT_TRUE(surface.ok()) << surface.status().ToString();
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  Result<CheckReport> report = CheckProgram(PHOS_PLAIN_CUDA_PROGRAM, *surface, *env);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->verdict(), Verdict::kCallsFail);
  const std::string out = FormatReport(*report, *surface);
  EXPECT_TRUE(Has(out, "  refused  cudaMalloc ")) << out;
  EXPECT_TRUE(Has(out, "returns cudaErrorNotSupported: a test's")) << out;
  EXPECT_EQ(LastLine(out), "loads; these calls fail: cudaMalloc (returns cudaErrorNotSupported)");
}

TEST(CheckTest, PartialSupportIsServedWithItsNote) {
  // cudaHostAlloc refuses cudaHostAllocMapped only (refused.tsv); a program importing it runs.
  Result<Surface> surface = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(surface.ok());
  Result<LoaderEnvironment> env = LoaderEnvironment::FromProcess();
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  Result<CheckReport> report = CheckProgram(PHOS_PHOS_FN, *surface, *env);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->verdict(), Verdict::kRuns);  // phos-fn imports no CUDA function
  CheckReport with_host_alloc = *report;
  with_host_alloc.imports.push_back(
      {"cudaHostAlloc", "prog", false, true, surface->Lookup("cudaHostAlloc", 0), ""});
  EXPECT_EQ(with_host_alloc.verdict(), Verdict::kRuns);
  const std::string out = FormatReport(with_host_alloc, *surface);
  EXPECT_TRUE(Has(out, "  served   cudaHostAlloc")) << out;
  EXPECT_TRUE(Has(out, "cudaErrorNotSupported for flags with cudaHostAllocMapped")) << out;
  EXPECT_EQ(LastLine(out), "runs");
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

  Ran absent = RunTool({PHOS_PHOS_FN, "check", dir / "absent"}, {}, true);
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_TRUE(Has(absent.out, "No such file")) << absent.out;

  Ran neither = RunTool({PHOS_PHOS_FN, "check"}, {}, true);
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_TRUE(Has(neither.out, "give a PROGRAM or --table")) << neither.out;
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
