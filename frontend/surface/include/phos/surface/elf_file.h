// What the dynamic loader sees of an ELF file: its dynamic function symbols (defined and
// imported), the libraries it needs and where it says to look for them. Read with libelf from a
// file that may be anything a user points phos-fn check at: a truncated or garbage file is an
// error naming the file and what is wrong, never a crash, and no file is mapped (a file
// truncated while it is read cannot fault the reader).
//
//   PHOS_ASSIGN_OR_RETURN(ElfFile elf, ReadElfFile("./my_program"));
//   for (const ElfImport& i : elf.imports) ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::surface {

// When the loader binds an import to its definition.
enum class Binding {
  // At its first call, through its PLT slot: a missing one ends the process there ("symbol
  // lookup error").
  kLazy,
  // When the file loads: it is linked with -z now (DT_BIND_NOW, DF_BIND_NOW, DF_1_NOW), or refers
  // to the symbol other than through a PLT slot (its address taken). A missing one stops the load.
  kAtLoad,
  // The file is for a machine whose PLT relocation phos does not know (it knows x86-64, i386,
  // AArch64, ppc64 and RISC-V), and it is not linked with -z now.
  kUnknown,
};

// A function the file takes from the libraries it loads (an undefined dynamic symbol).
struct ElfImport {
  std::string name;
  // A weak import that no library defines resolves to a null address instead of stopping the
  // loader.
  bool weak = false;
  Binding binding = Binding::kLazy;
  // The library its symbol version names (.gnu.version_r): "libcudart.so.13" for
  // cudaMalloc@libcudart.so.13, "libc.so.6" for malloc@GLIBC_2.2.5. Empty: it has no version,
  // and the loader takes the first definition of the name it finds.
  std::string version_library;
};

struct ElfFile {
  uint8_t elf_class = 0;  // ELFCLASS32 or ELFCLASS64
  uint16_t machine = 0;   // EM_X86_64, EM_AARCH64, ...
  uint16_t type = 0;      // ET_EXEC, ET_DYN, ...
  // The dynamic loader its PT_INTERP names ("/lib64/ld-linux-x86-64.so.2"); empty when it names
  // none (a library, or an executable linked statically).
  std::string interpreter;
  // A .dynamic section: the file takes part in dynamic linking at all.
  bool dynamic = false;
  // DT_FLAGS_1 has DF_1_PIE: a position-independent executable (ET_DYN, yet no library).
  bool pie = false;
  std::string soname;                // DT_SONAME; empty when there is none
  std::vector<std::string> needed;   // DT_NEEDED, in order
  std::vector<std::string> rpath;    // DT_RPATH, split at ':' (an empty entry kept: the current directory)
  std::vector<std::string> runpath;  // DT_RUNPATH, likewise
  // Functions (STT_FUNC, STT_GNU_IFUNC) the file exports, sorted, without symbol versions.
  std::vector<std::string> exports;
  // Functions and untyped symbols the file imports, sorted by name.
  std::vector<ElfImport> imports;
  // Those functions of ElfReadOptions::static_functions_among that the static symbol table
  // (.symtab) defines, sorted; empty when not asked for, or when the file is stripped.
  std::vector<std::string> static_functions;
  // A .nv_fatbin section: CUDA kernels that nvcc embedded.
  bool cuda_kernels = false;
};

struct ElfReadOptions {
  // The functions to look for in the static symbol table, sorted; null: .symtab is not read (it
  // can be large, and only a program that may hold the CUDA runtime itself needs it).
  // Default: null.
  const std::vector<std::string>* static_functions_among = nullptr;
};

// Reads `path` (a regular file; anything else is refused before it is opened for reading). An
// executable or shared library (ET_EXEC, ET_DYN) with no loadable segment (PT_LOAD) is an error.
Result<ElfFile> ReadElfFile(const std::string& path, const ElfReadOptions& options = {});

}  // namespace phos::surface
