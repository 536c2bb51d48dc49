// ReadElfFile against binutils (readelf, nm) on real programs and libraries, and on files that
// are not ELF, are cut short or are corrupted: each of those an error naming the file, none a
// crash.
#include "phos/surface/elf_file.h"

#include <sys/stat.h>

#include <random>

#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::ReadText;
using testing::RunTool;
using testing::ScratchDir;
using testing::WithoutVersion;
using testing::Words;
using testing::WriteText;

// What readelf says of a file's dynamic linking.
struct Readelf {
  std::set<std::string> exports;
  std::map<std::string, bool> imports;  // name -> weak
  std::set<std::string> bound_at_load;  // imports a relocation other than a PLT slot refers to
  std::vector<std::string> needed;
  std::string soname, rpath, runpath;
  bool bind_now = false;
};

std::string Bracketed(const std::string& line) {
  const size_t open = line.find('['), close = line.rfind(']');
  return open == std::string::npos || close == std::string::npos ? ""
                                                                 : line.substr(open + 1, close - open - 1);
}

Readelf ReadWithReadelf(const std::string& path) {
  Readelf r;
  for (const std::string& line : Lines(RunTool({"readelf", "--dyn-syms", "-W", path}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() < 8 || w[0].back() != ':' || w[0] == "0:") continue;
    const std::string& type = w[3];
    const std::string& bind = w[4];
    const std::string name = WithoutVersion(w[7]);
    if (bind != "GLOBAL" && bind != "WEAK") continue;
    if (w[6] == "UND" && (type == "FUNC" || type == "NOTYPE")) r.imports[name] = bind == "WEAK";
    if (w[6] != "UND" && (type == "FUNC" || type == "IFUNC")) r.exports.insert(name);
  }
  for (const std::string& line : Lines(RunTool({"readelf", "-d", "-W", path}).out)) {
    if (line.find("(NEEDED)") != std::string::npos) r.needed.push_back(Bracketed(line));
    if (line.find("(SONAME)") != std::string::npos) r.soname = Bracketed(line);
    if (line.find("(RPATH)") != std::string::npos) r.rpath = Bracketed(line);
    if (line.find("(RUNPATH)") != std::string::npos) r.runpath = Bracketed(line);
    if (line.find("(BIND_NOW)") != std::string::npos) r.bind_now = true;
    if ((line.find("(FLAGS)") != std::string::npos && line.find("BIND_NOW") != std::string::npos) ||
        (line.find("(FLAGS_1)") != std::string::npos && line.find(" NOW") != std::string::npos)) {
      r.bind_now = true;
    }
  }
  for (const std::string& line : Lines(RunTool({"readelf", "-r", "-W", path}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() >= 5 && w[2].starts_with("R_") && w[2] != "R_X86_64_JUMP_SLOT" &&
        w[2] != "R_AARCH64_JUMP_SLOT") {
      r.bound_at_load.insert(WithoutVersion(w[4]));
    }
  }
  return r;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ":") + p;
  return s;
}

void ExpectSameAsBinutils(const std::string& path) {
  SCOPED_TRACE(path);
  Result<ElfFile> elf = ReadElfFile(path);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  const Readelf want = ReadWithReadelf(path);
  ASSERT_FALSE(want.exports.empty() && want.imports.empty()) << "readelf listed nothing";

  EXPECT_EQ(std::set<std::string>(elf->exports.begin(), elf->exports.end()), want.exports);
  EXPECT_EQ(std::set<std::string>(elf->exports.begin(), elf->exports.end()), testing::NmExports(path));
  std::map<std::string, bool> imports;
  for (const ElfImport& i : elf->imports) {
    imports[i.name] = i.weak;
    EXPECT_EQ(i.bound_at_load, want.bind_now || want.bound_at_load.count(i.name) != 0) << i.name;
  }
  EXPECT_EQ(imports, want.imports);
  EXPECT_EQ(elf->needed, want.needed);
  EXPECT_EQ(elf->soname, want.soname);
  EXPECT_EQ(Join(elf->rpath), want.rpath);
  EXPECT_EQ(Join(elf->runpath), want.runpath);
}

TEST(ElfFileTest, ProgramsAndLibrariesReadAsBinutilsReadThem) {
  for (const char* path :
       {PHOS_PLAIN_CUDA_PROGRAM, PHOS_CHECK_LACKING, PHOS_CHECK_LACKING_NOW, PHOS_CHECK_HELPER,
        PHOS_CHECK_WITH_HELPER, PHOS_FRONTEND_LIB_DIR "/libcudart.so.13",
        PHOS_FRONTEND_LIB_DIR "/libcublas.so.13", PHOS_PHOS_FN}) {
    ExpectSameAsBinutils(path);
  }
}

TEST(ElfFileTest, LazyAndLoadTimeBindingOfAnImport) {
  for (auto [path, at_load] :
       {std::pair{PHOS_CHECK_LACKING, false}, std::pair{PHOS_CHECK_LACKING_NOW, true}}) {
    Result<ElfFile> elf = ReadElfFile(path);
    ASSERT_TRUE(elf.ok()) << elf.status().ToString();
    auto it = std::find_if(elf->imports.begin(), elf->imports.end(),
                           [](const ElfImport& i) { return i.name == "cudaGraphCreate"; });
    ASSERT_NE(it, elf->imports.end()) << path;
    EXPECT_EQ(it->bound_at_load, at_load) << path;
    EXPECT_FALSE(it->weak);
  }
}

TEST(ElfFileTest, StaticSymbolTableListsTheFunctionsLinkedIn) {
  Result<ElfFile> elf = ReadElfFile(PHOS_CHECK_STATIC_CUDART);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_TRUE(std::binary_search(elf->static_functions.begin(), elf->static_functions.end(), "cudaMalloc"));
  EXPECT_TRUE(std::none_of(elf->imports.begin(), elf->imports.end(),
                           [](const ElfImport& i) { return i.name.starts_with("cuda"); }));
  EXPECT_TRUE(elf->has_interpreter);
}

void ExpectError(const std::string& path, const std::string& why) {
  Result<ElfFile> elf = ReadElfFile(path);
  ASSERT_FALSE(elf.ok()) << path;
  EXPECT_NE(elf.status().message().find(path), std::string::npos) << elf.status().message();
  EXPECT_NE(elf.status().message().find(why), std::string::npos) << elf.status().message();
}

TEST(ElfFileTest, WhatIsNoElfFileIsAnErrorSayingSo) {
  ScratchDir dir;
  ExpectError(dir / "absent", "No such file");
  ExpectError(dir / "", "not a regular file");
  WriteText(dir / "empty", "");
  ExpectError(dir / "empty", "not an ELF file");
  WriteText(dir / "script", "#!/bin/sh\necho hello\n");
  ExpectError(dir / "script", "not an ELF file");
  // A FIFO is refused before it is opened: reading it would wait for a writer.
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  ExpectError(dir / "fifo", "not a regular file");
}

TEST(ElfFileTest, EveryTruncationOfAProgramIsAnError) {
  ScratchDir dir;
  const std::string whole = ReadText(PHOS_CHECK_LACKING);
  ASSERT_GT(whole.size(), 4096u);
  // Every length up to the ELF header's end and past it, then spread over the file: the section
  // headers sit at its end, so each cut loses some of them.
  std::vector<size_t> lengths;
  for (size_t n = 1; n < 200; ++n) lengths.push_back(n);
  for (size_t n = 200; n < whole.size(); n += whole.size() / 97) lengths.push_back(n);
  lengths.push_back(whole.size() - 1);
  for (size_t n : lengths) {
    const std::string path = dir / ("cut-" + std::to_string(n));
    WriteText(path, whole.substr(0, n));
    Result<ElfFile> elf = ReadElfFile(path);
    EXPECT_FALSE(elf.ok()) << "cut at " << n;
    if (!elf.ok()) {
      EXPECT_NE(elf.status().message().find(path), std::string::npos) << elf.status().message();
    }
  }
}

TEST(ElfFileTest, CorruptedBytesNeverCrashTheReader) {
  ScratchDir dir;
  const std::string whole = ReadText(PHOS_CHECK_HELPER);
  std::mt19937 rng(20240613);
  int errors = 0, read = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string bytes = whole;
    // A few bytes at random places, or one region the reader leans on (ELF header, dynamic
    // section, symbol tables and section headers all get hit over the rounds).
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    const std::string path = dir / "mutant";
    WriteText(path, bytes);
    Result<ElfFile> elf = ReadElfFile(path);
    (elf.ok() ? read : errors)++;
    if (elf.ok()) {
      // What was read is self-consistent: sorted, and every name non-empty.
      EXPECT_TRUE(std::is_sorted(elf->exports.begin(), elf->exports.end()));
      for (const ElfImport& i : elf->imports) EXPECT_FALSE(i.name.empty());
    }
  }
  // Both outcomes happen: the corruption reached what the reader checks, and much of the file is
  // bytes the reader never looks at.
  EXPECT_GT(errors, 0);
  EXPECT_GT(read, 0);
}

}  // namespace
}  // namespace phos::surface
