// ReadElfFile against binutils (readelf, nm) on real programs and libraries, on copies of them
// made for other machines, and on files that are not ELF, are cut short or are corrupted: each
// of those an error naming the file, none a crash.
#include "phos/surface/elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
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
  std::map<std::string, bool> imports;                 // name -> weak
  std::map<std::string, std::string> version_library;  // import -> the library its version names
  std::set<std::string> bound_at_load;                 // imports a relocation other than a PLT slot refers to
  std::vector<std::string> needed;
  std::string soname, rpath, runpath, interpreter;
  bool bind_now = false, pie = false, nv_fatbin = false;
};

std::string Bracketed(const std::string& line) {
  const size_t open = line.find('['), close = line.rfind(']');
  return open == std::string::npos || close == std::string::npos ? ""
                                                                 : line.substr(open + 1, close - open - 1);
}

Readelf ReadWithReadelf(const std::string& path) {
  Readelf r;
  // "  0x0010:   Name: GLIBC_2.2.5  Flags: none  Version: 3" under "000000: Version: 1  File: libc.so.6".
  std::map<std::string, std::string> version_files;  // version index -> file
  std::string file;
  for (const std::string& line : Lines(RunTool({"readelf", "-V", "-W", path}).out)) {
    std::vector<std::string> w = Words(line);
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      if (w[i] == "File:") file = w[i + 1];
      if (w[i] == "Name:" && w[w.size() - 2] == "Version:") version_files[w.back()] = file;
    }
  }
  for (const std::string& line : Lines(RunTool({"readelf", "--dyn-syms", "-W", path}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() < 8 || w[0].back() != ':' || w[0] == "0:") continue;
    const std::string& type = w[3];
    const std::string& bind = w[4];
    const std::string name = WithoutVersion(w[7]);
    if (bind != "GLOBAL" && bind != "WEAK") continue;
    if (w[6] == "UND" && (type == "FUNC" || type == "NOTYPE")) {
      r.imports[name] = bind == "WEAK";
      // "cudaGraphicsUnregisterResource@libcudart.so.13 (4)": the version's index.
      if (w.size() >= 9 && w[8].size() > 2)
        r.version_library[name] = version_files[w[8].substr(1, w[8].size() - 2)];
    }
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
    if (line.find("(FLAGS_1)") != std::string::npos && line.find(" PIE") != std::string::npos) r.pie = true;
  }
  for (const std::string& line : Lines(RunTool({"readelf", "-r", "-W", path}).out)) {
    std::vector<std::string> w = Words(line);
    // A PLT slot is R_<machine>_JUMP_SLOT or R_<machine>_JMP_SLOT, whatever the machine.
    const bool plt = w.size() >= 3 && (w[2].ends_with("_JUMP_SLOT") || w[2].ends_with("_JMP_SLOT"));
    if (w.size() >= 5 && w[2].starts_with("R_") && !plt) r.bound_at_load.insert(WithoutVersion(w[4]));
  }
  for (const std::string& line : Lines(RunTool({"readelf", "-l", "-W", path}).out)) {
    if (line.find("Requesting program interpreter:") != std::string::npos) {
      r.interpreter = Bracketed(line).substr(std::string("Requesting program interpreter: ").size());
    }
  }
  for (const std::string& line : Lines(RunTool({"readelf", "-S", "-W", path}).out)) {
    if (line.find(" .nv_fatbin ") != std::string::npos) r.nv_fatbin = true;
  }
  return r;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : ":") + parts[i];
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
  std::map<std::string, std::string> versions;
  for (const ElfImport& i : elf->imports) {
    imports[i.name] = i.weak;
    if (!i.version_library.empty()) versions[i.name] = i.version_library;
    const bool at_load = want.bind_now || want.bound_at_load.count(i.name) != 0;
    EXPECT_EQ(i.binding, at_load ? Binding::kAtLoad : Binding::kLazy) << i.name;
  }
  EXPECT_EQ(imports, want.imports);
  EXPECT_EQ(versions, want.version_library);
  EXPECT_EQ(elf->needed, want.needed);
  EXPECT_EQ(elf->soname, want.soname);
  EXPECT_EQ(Join(elf->rpath), want.rpath);
  EXPECT_EQ(Join(elf->runpath), want.runpath);
  EXPECT_EQ(elf->interpreter, want.interpreter);
  EXPECT_EQ(elf->pie, want.pie);
  EXPECT_EQ(elf->cuda_kernels, want.nv_fatbin);
}

TEST(ElfFileTest, ProgramsAndLibrariesReadAsBinutilsReadThem) {
  for (const char* path :
       {PHOS_PLAIN_CUDA_PROGRAM, PHOS_CHECK_LACKING, PHOS_CHECK_LACKING_NOW, PHOS_CHECK_HELPER,
        PHOS_CHECK_WITH_HELPER, PHOS_CHECK_RPATH_CUDART, PHOS_FRONTEND_LIB_DIR "/libcudart.so.13",
        PHOS_FRONTEND_LIB_DIR "/libcublas.so.13", PHOS_PHOS_FN}) {
    ExpectSameAsBinutils(path);
  }
}

TEST(ElfFileTest, ImportsNameTheLibraryTheirVersionComesFrom) {
  Result<ElfFile> elf = ReadElfFile(PHOS_CHECK_LACKING);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  std::map<std::string, std::string> versions;
  for (const ElfImport& i : elf->imports) versions[i.name] = i.version_library;
  EXPECT_EQ(versions["cudaGraphicsUnregisterResource"], "libcudart.so.13");  // NVIDIA's libcudart versions its functions
  // __libc_start_main@GLIBC_2.34 (not printf: a sanitizer build's runtime defines that one)
  EXPECT_EQ(versions["__libc_start_main"], "libc.so.6");
  EXPECT_EQ(versions["__gmon_start__"], "");                  // weak, unversioned
}

TEST(ElfFileTest, LazyAndLoadTimeBindingOfAnImport) {
  for (auto [path, binding] :
       {std::pair{PHOS_CHECK_LACKING, Binding::kLazy}, std::pair{PHOS_CHECK_LACKING_NOW, Binding::kAtLoad}}) {
    Result<ElfFile> elf = ReadElfFile(path);
    ASSERT_TRUE(elf.ok()) << elf.status().ToString();
    auto it = std::find_if(elf->imports.begin(), elf->imports.end(),
                           [](const ElfImport& i) { return i.name == "cudaGraphicsUnregisterResource"; });
    ASSERT_NE(it, elf->imports.end()) << path;
    EXPECT_EQ(it->binding, binding) << path;
    EXPECT_FALSE(it->weak);
  }
}

// A copy of `path` in `dir` that says it is for `machine`, its PLT relocations given the type
// `plt` and every other relocation the type `other` (libelf rewrites the copy in place).
std::string ForMachine(const ScratchDir& dir, const std::string& path, uint16_t machine, uint32_t plt,
                       uint32_t other) {
  const std::string copy = dir / ("machine-" + std::to_string(machine));
  WriteText(copy, ReadText(path));
  elf_version(EV_CURRENT);
  const int fd = open(copy.c_str(), O_RDWR | O_CLOEXEC);
  Elf* elf = elf_begin(fd, ELF_C_RDWR, nullptr);
  EXPECT_NE(elf, nullptr) << elf_errmsg(-1);
  GElf_Ehdr ehdr;
  gelf_getehdr(elf, &ehdr);
  ehdr.e_machine = machine;
  gelf_update_ehdr(elf, &ehdr);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    gelf_getshdr(scn, &shdr);
    if (shdr.sh_type != SHT_RELA) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    for (int i = 0; i < static_cast<int>(shdr.sh_size / shdr.sh_entsize); ++i) {
      GElf_Rela r;
      gelf_getrela(data, i, &r);
      const bool was_plt = GELF_R_TYPE(r.r_info) == R_X86_64_JUMP_SLOT;
      r.r_info = GELF_R_INFO(GELF_R_SYM(r.r_info), was_plt ? plt : other);
      gelf_update_rela(data, i, &r);
    }
    elf_flagdata(data, ELF_C_SET, ELF_F_DIRTY);
  }
  elf_flagelf(elf, ELF_C_SET, ELF_F_LAYOUT);  // the file keeps its layout: only these bytes change
  EXPECT_GE(elf_update(elf, ELF_C_WRITE), 0) << elf_errmsg(-1);
  elf_end(elf);
  close(fd);
  return copy;
}

TEST(ElfFileTest, PltSlotsOfPpc64AndRiscVAreLazy) {
  // readelf names the relocations by each machine's own table: its *_JMP_SLOT / *_JUMP_SLOT are
  // the PLT slots.
  ScratchDir dir;
  ExpectSameAsBinutils(ForMachine(dir, PHOS_CHECK_LACKING, EM_PPC64, R_PPC64_JMP_SLOT, R_PPC64_ADDR64));
  ExpectSameAsBinutils(ForMachine(dir, PHOS_CHECK_LACKING, EM_RISCV, R_RISCV_JUMP_SLOT, R_RISCV_64));
}

TEST(ElfFileTest, OnAnUnknownMachineTheBindingIsUnknownUnlessBoundNow) {
  ScratchDir dir;
  // s390x: phos does not know its PLT relocation.
  Result<ElfFile> lazy = ReadElfFile(ForMachine(dir, PHOS_CHECK_LACKING, EM_S390, R_390_JMP_SLOT, R_390_64));
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
  ASSERT_FALSE(lazy->imports.empty());
  for (const ElfImport& i : lazy->imports) EXPECT_EQ(i.binding, Binding::kUnknown) << i.name;

  ScratchDir now_dir;
  Result<ElfFile> now =
      ReadElfFile(ForMachine(now_dir, PHOS_CHECK_LACKING_NOW, EM_S390, R_390_JMP_SLOT, R_390_64));
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  for (const ElfImport& i : now->imports) EXPECT_EQ(i.binding, Binding::kAtLoad) << i.name;  // -z now
}

// The text (T, t, W, w) symbols nm lists for `path`'s static symbol table.
std::set<std::string> NmStaticFunctions(const std::string& path) {
  std::set<std::string> out;
  for (const std::string& line : Lines(RunTool({"nm", "--defined-only", path}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() == 3 && (w[1] == "T" || w[1] == "t" || w[1] == "W" || w[1] == "w")) out.insert(w[2]);
  }
  return out;
}

TEST(ElfFileTest, TheStaticSymbolTableIsSearchedForTheFunctionsAskedFor) {
  const std::vector<std::string> among = {"cudaFree", "cudaGetErrorString", "cudaMalloc",
                                          "cudaNoSuchFunction", "main"};
  ElfReadOptions options;
  options.static_functions_among = &among;
  Result<ElfFile> elf = ReadElfFile(PHOS_CHECK_STATIC_CUDART, options);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  const std::set<std::string> nm = NmStaticFunctions(PHOS_CHECK_STATIC_CUDART);
  std::vector<std::string> want;
  for (const std::string& f : among) {
    if (nm.count(f) != 0) want.push_back(f);
  }
  ASSERT_GE(want.size(), 3u);  // the static runtime's cudaMalloc and cudaGetErrorString, and main
  EXPECT_EQ(elf->static_functions, want);
  EXPECT_TRUE(std::none_of(elf->imports.begin(), elf->imports.end(),
                           [](const ElfImport& i) { return i.name.starts_with("cuda"); }));

  Result<ElfFile> unasked = ReadElfFile(PHOS_CHECK_STATIC_CUDART);
  ASSERT_TRUE(unasked.ok());
  EXPECT_TRUE(unasked->static_functions.empty());
}

TEST(ElfFileTest, AStaticProgramNamesNoLoader) {
  Result<ElfFile> elf = ReadElfFile(PHOS_CHECK_STATIC_PROGRAM);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  const Readelf want = ReadWithReadelf(PHOS_CHECK_STATIC_PROGRAM);
  EXPECT_EQ(elf->interpreter, want.interpreter);
  EXPECT_TRUE(elf->interpreter.empty());
  EXPECT_FALSE(elf->dynamic);
  EXPECT_EQ(elf->type, ET_EXEC);
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

TEST(ElfFileTest, AnExecutableOrLibraryWithNothingToLoadIsAnError) {
  // A real library's ELF header alone, its program and section headers gone (e_phnum and
  // e_shoff 0): nothing the loader could map.
  ScratchDir dir;
  std::string header = ReadText(PHOS_CHECK_HELPER).substr(0, sizeof(Elf64_Ehdr));
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, header.data(), sizeof(ehdr));
  ASSERT_EQ(ehdr.e_type, ET_DYN);
  ehdr.e_phoff = ehdr.e_shoff = 0;
  ehdr.e_phnum = ehdr.e_shnum = ehdr.e_shstrndx = 0;
  std::memcpy(header.data(), &ehdr, sizeof(ehdr));
  WriteText(dir / "hollow", header);
  ExpectError(dir / "hollow", "no loadable segment");
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
    if (!elf.ok()) continue;
    // Every name read is a string of the file's own string tables: NUL-terminated bytes of the
    // mutant, not memory the reader strayed into.
    auto in_file = [&](const std::string& name) { return bytes.find(name + '\0') != std::string::npos; };
    for (const std::string& name : elf->exports) EXPECT_TRUE(in_file(name)) << name;
    for (const ElfImport& i : elf->imports) {
      EXPECT_TRUE(in_file(i.name)) << i.name;
      EXPECT_TRUE(i.version_library.empty() || in_file(i.version_library)) << i.version_library;
    }
    for (const std::string& name : elf->needed) EXPECT_TRUE(in_file(name)) << name;
    EXPECT_TRUE(elf->soname.empty() || in_file(elf->soname)) << elf->soname;
  }
  // Both outcomes happen: the corruption reached what the reader checks, and much of the file is
  // bytes the reader never looks at.
  EXPECT_GT(errors, 0);
  EXPECT_GT(read, 0);
}

}  // namespace
}  // namespace phos::surface
