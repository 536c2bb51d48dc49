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

// A function the file takes from the libraries it loads (an undefined dynamic symbol).
struct ElfImport {
  std::string name;
  // A weak import that no library defines resolves to a null address instead of stopping the
  // loader.
  bool weak = false;
  // The loader binds it when the file loads: the file is linked with -z now (DT_BIND_NOW,
  // DF_BIND_NOW, DF_1_NOW) or refers to the symbol other than through a PLT slot (its address
  // taken). Otherwise it is bound lazily, at its first call, and a missing one ends the process
  // there ("symbol lookup error").
  bool bound_at_load = false;
};

struct ElfFile {
  uint8_t elf_class = 0;  // ELFCLASS32 or ELFCLASS64
  uint16_t machine = 0;   // EM_X86_64, EM_AARCH64, ...
  uint16_t type = 0;      // ET_EXEC, ET_DYN, ...
  // A PT_INTERP header: the file names a dynamic loader (a dynamically linked executable).
  bool has_interpreter = false;
  // A .dynamic section: the file takes part in dynamic linking at all.
  bool dynamic = false;
  std::string soname;                // DT_SONAME; empty when there is none
  std::vector<std::string> needed;   // DT_NEEDED, in order
  std::vector<std::string> rpath;    // DT_RPATH, split at ':'
  std::vector<std::string> runpath;  // DT_RUNPATH, split at ':'
  // Functions (STT_FUNC, STT_GNU_IFUNC) the file exports, sorted, without symbol versions.
  std::vector<std::string> exports;
  // Functions and untyped symbols the file imports, sorted by name.
  std::vector<ElfImport> imports;
  // Functions defined in the static symbol table (.symtab), sorted; empty when stripped.
  std::vector<std::string> static_functions;
  // Section names, in file order.
  std::vector<std::string> sections;
};

// Reads `path` (a regular file; anything else is refused before it is opened for reading).
Result<ElfFile> ReadElfFile(const std::string& path);

}  // namespace phos::surface
