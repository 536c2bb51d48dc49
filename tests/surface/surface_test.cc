// Surface: the states from its three sources, the checks between them (a refusal of a function
// phos does not export is a lie and an error), and the committed refusals against the built
// libraries as nm lists them.
#include "phos/surface/surface.h"

#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::NmExports;
using testing::ReadText;

constexpr size_t kCudart = 0, kCublas = 1, kCublasLt = 2, kNccl = 3, kDriver = 4;

// A small surface: cudart exports cudaMalloc, cudaFree and cudaHostAlloc of NVIDIA's four;
// cuBLAS cublasCreate_v2; NCCL nothing; no cuBLASLt or driver library.
SurfaceSources Small(std::string_view refusals) {
  SurfaceSources s;
  s.nvidia = {"# test toolkit: cudart\ncudaFree\ncudaHostAlloc\ncudaMalloc\ncudaMemcpy\n",
              "# test toolkit: cublas\ncublasCreate_v2\ncublasSgemm_v2\n",
              "# test toolkit: cublasLt\ncublasLtCreate\n", "# test toolkit: nccl\nncclAllReduce\n",
              "# test toolkit: driver\ncuInit\ncuMemAlloc_v2\n"};
  s.refusals = refusals;
  s.phos[kCudart] = PhosLibrary{"/phos/lib/frontend/libphos-cudart.so",
                                {"cudaMalloc", "cudaFree", "cudaHostAlloc", "__phosRemoteCall"}};
  s.phos[kCublas] = PhosLibrary{"/phos/lib/frontend/libphos-cublas.so", {"cublasCreate_v2"}};
  s.phos[kNccl] = PhosLibrary{"/phos/lib/frontend/libphos-nccl.so", {}};
  return s;
}

TEST(SurfaceTest, StatesFromTheThreeSources) {
  Result<Surface> s =
      Surface::Build(Small("# comment\n"
                           "cudaFree\trefused\tcudaErrorNotSupported\tnever frees\n"
                           "cudaHostAlloc\tpartial\tcudaErrorNotSupported\tmapped memory\n"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->Lookup("cudaMalloc", kCudart).state, State::kServed);
  EXPECT_TRUE(s->Lookup("cudaMalloc", kCudart).error.empty());

  FunctionState freed = s->Lookup("cudaFree", kCudart);
  EXPECT_EQ(freed.state, State::kRefused);
  EXPECT_EQ(freed.error, "cudaErrorNotSupported");
  EXPECT_EQ(freed.note, "never frees");

  FunctionState host = s->Lookup("cudaHostAlloc", kCudart);
  EXPECT_EQ(host.state, State::kServed);  // partial support is served, with its note
  EXPECT_EQ(host.error, "cudaErrorNotSupported");
  EXPECT_EQ(host.note, "mapped memory");

  EXPECT_EQ(s->Lookup("cudaMemcpy", kCudart).state, State::kLacks);
  EXPECT_EQ(s->Lookup("cublasSgemm_v2", kCublas).state, State::kLacks);
  EXPECT_EQ(s->Lookup("cublasLtCreate", kCublasLt).state, State::kLacks);  // no library at all
  EXPECT_EQ(s->Lookup("cuInit", kDriver).state, State::kLacks);
  EXPECT_FALSE(s->Phos(kCublasLt));
  ASSERT_TRUE(s->Phos(kCudart));
  EXPECT_EQ(s->Phos(kCudart)->file(), "libphos-cudart.so");
  EXPECT_EQ(s->NvidiaOrigin(kCudart), "test toolkit: cudart");
  EXPECT_EQ(s->NvidiaFunctions(kDriver), (std::vector<std::string>{"cuInit", "cuMemAlloc_v2"}));
}

TEST(SurfaceTest, LibraryOfAFunctionByListThenByPrefix) {
  Result<Surface> s = Surface::Build(Small(""));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->LibraryOf("cudaMalloc"), kCudart);
  EXPECT_EQ(s->LibraryOf("cuInit"), kDriver);
  EXPECT_EQ(s->LibraryOf("ncclAllReduce"), kNccl);
  // Functions of a newer toolkit than the lists: by prefix, the longest winning.
  EXPECT_EQ(s->LibraryOf("cudaSomethingNew"), kCudart);
  EXPECT_EQ(s->LibraryOf("__cudaRegisterSomethingNew"), kCudart);
  EXPECT_EQ(s->LibraryOf("cublasLtSomethingNew"), kCublasLt);
  EXPECT_EQ(s->LibraryOf("cublasSomethingNew"), kCublas);
  EXPECT_EQ(s->LibraryOf("ncclSomethingNew"), kNccl);
  // The driver has no prefix: "cu" is libcurl's too.
  EXPECT_EQ(s->LibraryOf("curl_easy_init"), std::nullopt);
  EXPECT_EQ(s->LibraryOf("cuSomethingNew"), std::nullopt);
  EXPECT_EQ(s->LibraryOf("malloc"), std::nullopt);
  EXPECT_EQ(s->LibraryOf("__phosRemoteCall"), std::nullopt);
}

void ExpectRejected(std::string_view refusals, const std::string& why) {
  Result<Surface> s = Surface::Build(Small(refusals));
  ASSERT_FALSE(s.ok()) << refusals;
  EXPECT_NE(s.status().message().find(why), std::string::npos) << s.status().message();
}

TEST(SurfaceTest, ARefusalOfAFunctionPhosDoesNotExportIsAnError) {
  ExpectRejected("cudaMemcpy\trefused\tcudaErrorNotSupported\tx\n",
                 "refused.tsv:1: cudaMemcpy is not exported by libphos-cudart.so");
  ExpectRejected("cublasLtCreate\trefused\tCUBLAS_STATUS_NOT_SUPPORTED\tx\n",
                 "cublasLtCreate is not exported by phos (it has no libcublasLt.so.13)");
  ExpectRejected(
      "\ncudaFree\tpartial\tcudaErrorInvalidValue\tx\nncclAllReduce\tpartial\tncclInvalidUsage\tx\n",
      "refused.tsv:3: ncclAllReduce is not exported by libphos-nccl.so");
}

TEST(SurfaceTest, MalformedRefusalsAreErrorsNamingTheLine) {
  ExpectRejected("__phosRemoteCall\trefused\tcudaErrorNotSupported\tx\n", "is no function of NVIDIA's lists");
  ExpectRejected("cudaFree\tsometimes\tcudaErrorNotSupported\tx\n", "refused.tsv:1: kind 'sometimes'");
  ExpectRejected("cudaFree\trefused\tcudaErrorNotSupported\n", "refused.tsv:1: want symbol");
  ExpectRejected("cudaFree refused cudaErrorNotSupported why\n", "refused.tsv:1: want symbol");
  ExpectRejected("cudaFree\trefused\t\twhy\n", "refused.tsv:1: want symbol");
  ExpectRejected("cudaFree\trefused\tcudaErrorNotSupported\tx\ncudaFree\tpartial\tcudaErrorInvalidValue\ty\n",
                 "refused.tsv:2: cudaFree is listed twice");
}

TEST(SurfaceTest, MalformedNvidiaListsAreErrors) {
  SurfaceSources s = Small("");
  s.nvidia[kNccl] = "ncclAllReduce\n";
  Result<Surface> no_origin = Surface::Build(s);
  ASSERT_FALSE(no_origin.ok());
  EXPECT_NE(no_origin.status().message().find("nvidia/nccl.txt: the first line"), std::string::npos);
  s.nvidia[kNccl] = "# t\nncclBroadcast\nncclAllReduce\n";
  Result<Surface> unsorted = Surface::Build(s);
  ASSERT_FALSE(unsorted.ok());
  EXPECT_NE(unsorted.status().message().find("nvidia/nccl.txt:3: not sorted"), std::string::npos);
  s.nvidia[kNccl] = "# t\nnccl AllReduce\n";
  EXPECT_FALSE(Surface::Build(s).ok());
}

// The committed refusals, read from the source tree: symbol and kind of each row.
std::vector<std::pair<std::string, std::string>> CommittedRefusals() {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const std::string& line : Lines(ReadText(PHOS_SOURCE_DIR "/frontend/surface/refused.tsv"))) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    rows.emplace_back(line.substr(0, tab), line.substr(tab + 1, line.find('\t', tab + 1) - tab - 1));
  }
  return rows;
}

// NVIDIA's list of a library, read from the source tree.
std::set<std::string> CommittedNvidiaList(size_t library) {
  std::vector<std::string> lines = Lines(ReadText(std::string(PHOS_SOURCE_DIR "/frontend/surface/nvidia/") +
                                                  std::string(Libraries()[library].name) + ".txt"));
  return {lines.begin() + (lines.empty() ? 0 : 1), lines.end()};
}

TEST(SurfaceTest, EveryCommittedRefusalIsExportedByItsLibrary) {
  ASSERT_TRUE(Surface::Load(PHOS_FRONTEND_LIB_DIR).ok());
  const std::vector<std::pair<std::string, std::string>> rows = CommittedRefusals();
  ASSERT_FALSE(rows.empty());
  for (const auto& [symbol, kind] : rows) {
    EXPECT_TRUE(kind == "refused" || kind == "partial") << symbol << ": " << kind;
    bool exported = false;
    for (size_t i = 0; i < kLibraryCount; ++i) {
      if (CommittedNvidiaList(i).count(symbol) == 0) continue;
      const std::string phos_library =
          std::string(PHOS_FRONTEND_LIB_DIR "/") + std::string(Libraries()[i].soname);
      exported |= std::filesystem::exists(phos_library) && NmExports(phos_library).count(symbol) != 0;
    }
    EXPECT_TRUE(exported) << symbol << " is in refused.tsv but exported by none of phos's libraries";
  }
}

TEST(SurfaceTest, EveryCudaNamedExportOfPhosIsNvidias) {
  // An export NVIDIA's library does not have is a misspelling no program binds to.
  Result<Surface> s = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (size_t i = 0; i < kLibraryCount; ++i) {
    const std::string path = std::string(PHOS_FRONTEND_LIB_DIR "/") + std::string(Libraries()[i].soname);
    if (!std::filesystem::exists(path)) continue;
    const std::set<std::string> nvidia = CommittedNvidiaList(i);
    for (const std::string& name : NmExports(path)) {
      if (s->LibraryOf(name) == i) {
        EXPECT_EQ(nvidia.count(name), 1u) << path << " exports " << name;
      }
    }
  }
}

TEST(SurfaceTest, LoadReadsTheLibrariesUnderNvidiasSonames) {
  Result<Surface> s = Surface::Load(PHOS_FRONTEND_LIB_DIR);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (auto [library, file] :
       {std::pair{kCudart, "libphos-cudart.so"}, std::pair{kCublas, "libphos-cublas.so"},
        std::pair{kCublasLt, "libphos-cublasLt.so"}, std::pair{kNccl, "libphos-nccl.so"},
        std::pair{kDriver, "libphos-cuda.so"}}) {
    ASSERT_TRUE(s->Phos(library)) << file;
    EXPECT_EQ(s->Phos(library)->path,
              std::filesystem::canonical(std::string(PHOS_FRONTEND_LIB_DIR "/") + file));
  }
  EXPECT_EQ(s->Lookup("cudaMalloc", kCudart).state, State::kServed);
  EXPECT_EQ(s->Lookup("cudaGraphicsUnregisterResource", kCudart).state, State::kLacks);

  Result<Surface> missing = Surface::Load(PHOS_FRONTEND_LIB_DIR "/no-such-directory");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-directory"), std::string::npos);
}

}  // namespace
}  // namespace phos::surface
