#include "phos/surface/elf_file.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "phos/base/strings.h"
#include "phos/base/unique_fd.h"

namespace phos::surface {
namespace {

struct ElfCloser {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfHandle = std::unique_ptr<Elf, ElfCloser>;

Status ElfError(std::string_view what) {
  return Status::Corruption(std::string(what) + ": " + elf_errmsg(-1));
}

// The section's data converted to `type` (the kind its header says it holds), or an error when
// it is missing, of another kind, or lies outside the file (which libelf checks).
Result<Elf_Data*> SectionData(Elf_Scn* scn, const GElf_Shdr& shdr, Elf_Type type, std::string_view what) {
  if (shdr.sh_type == SHT_NOBITS) return Status::Corruption(std::string(what) + " has no bytes in the file");
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return ElfError(what);
  if (data->d_type != type || (data->d_size != 0 && data->d_buf == nullptr)) {
    return Status::Corruption(std::string(what) + " does not hold what its section type says");
  }
  return data;
}

size_t EntryCount(Elf* elf, const Elf_Data* data, Elf_Type type) {
  const size_t entry = gelf_fsize(elf, type, 1, EV_CURRENT);
  return entry == 0 ? 0 : data->d_size / entry;
}

// The relocation type through which a lazily bound function is called (its PLT slot), per
// machine; any other relocation against a symbol is applied when the file loads. nullopt: a
// machine phos does not know, whose imports' binding is unknown.
std::optional<uint32_t> JumpSlotType(uint16_t machine) {
  switch (machine) {
    case EM_X86_64:
      return R_X86_64_JUMP_SLOT;
    case EM_386:
      return R_386_JMP_SLOT;
    case EM_AARCH64:
      return R_AARCH64_JUMP_SLOT;
    case EM_PPC64:
      return R_PPC64_JMP_SLOT;
    case EM_RISCV:
      return R_RISCV_JUMP_SLOT;
    default:
      return std::nullopt;
  }
}

// DT_RPATH and DT_RUNPATH are lists of directories separated by ':' (glibc's fillin_rpath); an
// empty entry stays: the loader takes it for the current directory.
std::vector<std::string> SearchPathList(std::string_view list) {
  std::vector<std::string> out;
  for (std::string_view dir : Split(list, ":")) out.emplace_back(dir);
  return out;
}

struct Sections {
  size_t dynsym = 0, symtab = 0;    // section indices; 0: none
  size_t versym = 0, verneed = 0;   // .gnu.version and .gnu.version_r; 0: none
  std::vector<size_t> relocations;  // SHT_REL and SHT_RELA sections
};

Status ReadDynamic(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, ElfFile* out, bool* bind_now) {
  PHOS_ASSIGN_OR_RETURN(Elf_Data * data, SectionData(scn, shdr, ELF_T_DYN, ".dynamic"));
  const size_t count = EntryCount(elf, data, ELF_T_DYN);
  for (size_t i = 0; i < count; ++i) {
    GElf_Dyn dyn;
    if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) return ElfError(".dynamic entry");
    if (dyn.d_tag == DT_NULL) break;
    const bool is_string =
        dyn.d_tag == DT_NEEDED || dyn.d_tag == DT_SONAME || dyn.d_tag == DT_RPATH || dyn.d_tag == DT_RUNPATH;
    if (is_string) {
      const char* s = elf_strptr(elf, shdr.sh_link, dyn.d_un.d_val);
      if (s == nullptr) return Status::Corruption(".dynamic names a string outside its string table");
      if (dyn.d_tag == DT_NEEDED) out->needed.emplace_back(s);
      if (dyn.d_tag == DT_SONAME) out->soname = s;
      if (dyn.d_tag == DT_RPATH) out->rpath = SearchPathList(s);
      if (dyn.d_tag == DT_RUNPATH) out->runpath = SearchPathList(s);
    }
    if (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_PIE) != 0) out->pie = true;
    if (dyn.d_tag == DT_BIND_NOW || (dyn.d_tag == DT_FLAGS && (dyn.d_un.d_val & DF_BIND_NOW) != 0) ||
        (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_NOW) != 0)) {
      *bind_now = true;
    }
  }
  return Status::Ok();
}

struct SymbolTable {
  Elf_Data* data = nullptr;
  size_t count = 0;
  size_t strings = 0;  // the string table's section index
};

Result<SymbolTable> OpenSymbols(Elf* elf, size_t index, std::string_view what) {
  Elf_Scn* scn = elf_getscn(elf, index);
  GElf_Shdr shdr;
  if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) return ElfError(what);
  PHOS_ASSIGN_OR_RETURN(Elf_Data * data, SectionData(scn, shdr, ELF_T_SYM, what));
  return SymbolTable{data, EntryCount(elf, data, ELF_T_SYM), shdr.sh_link};
}

// Which dynamic symbols (by index) a relocation refers to other than through a PLT slot
// (`jump_slot`, the machine's PLT relocation type).
Result<std::vector<bool>> SymbolsBoundAtLoad(Elf* elf, const Sections& sections, size_t symbol_count,
                                             uint32_t jump_slot) {
  std::vector<bool> at_load(symbol_count, false);
  for (size_t index : sections.relocations) {
    Elf_Scn* scn = elf_getscn(elf, index);
    GElf_Shdr shdr;
    if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) return ElfError("relocation section");
    if (shdr.sh_link != sections.dynsym) continue;  // relocations of another symbol table
    const bool rela = shdr.sh_type == SHT_RELA;
    PHOS_ASSIGN_OR_RETURN(Elf_Data * data,
                          SectionData(scn, shdr, rela ? ELF_T_RELA : ELF_T_REL, "relocation section"));
    const size_t count = EntryCount(elf, data, rela ? ELF_T_RELA : ELF_T_REL);
    for (size_t i = 0; i < count; ++i) {
      GElf_Xword info = 0;
      if (rela) {
        GElf_Rela r;
        if (gelf_getrela(data, static_cast<int>(i), &r) == nullptr) return ElfError("relocation");
        info = r.r_info;
      } else {
        GElf_Rel r;
        if (gelf_getrel(data, static_cast<int>(i), &r) == nullptr) return ElfError("relocation");
        info = r.r_info;
      }
      const size_t symbol = GELF_R_SYM(info);
      if (symbol == 0 || symbol >= symbol_count) continue;
      if (GELF_R_TYPE(info) != jump_slot) at_load[symbol] = true;
    }
  }
  return at_load;
}

// The library each version index of .gnu.version_r stands for (vna_other -> vn_file).
Result<std::map<uint16_t, std::string>> VersionLibraries(Elf* elf, size_t index) {
  Elf_Scn* scn = elf_getscn(elf, index);
  GElf_Shdr shdr;
  if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) return ElfError(".gnu.version_r");
  PHOS_ASSIGN_OR_RETURN(Elf_Data * data, SectionData(scn, shdr, ELF_T_VNEED, ".gnu.version_r"));
  std::map<uint16_t, std::string> libraries;
  // Entries are chained by offsets the file gives: each entry takes at least 16 bytes, so a chain
  // of more entries than that loops. (libelf checks each entry lies inside the section.)
  size_t budget = data->d_size / 16;
  auto bad = [](size_t offset) { return offset > INT32_MAX; };
  for (size_t offset = 0;;) {
    GElf_Verneed need;
    if (budget-- == 0 || bad(offset) || gelf_getverneed(data, static_cast<int>(offset), &need) == nullptr) {
      return Status::Corruption(".gnu.version_r: an entry outside the section, or a chain that loops");
    }
    const char* file = elf_strptr(elf, shdr.sh_link, need.vn_file);
    if (file == nullptr) return Status::Corruption(".gnu.version_r names a string outside its string table");
    size_t aux = offset + need.vn_aux;
    for (size_t i = 0; i < need.vn_cnt; ++i) {
      GElf_Vernaux version;
      if (budget-- == 0 || bad(aux) || gelf_getvernaux(data, static_cast<int>(aux), &version) == nullptr) {
        return Status::Corruption(".gnu.version_r: an entry outside the section, or a chain that loops");
      }
      libraries[version.vna_other] = file;
      if (version.vna_next == 0) break;
      aux += version.vna_next;
    }
    if (need.vn_next == 0) return libraries;
    offset += need.vn_next;
  }
}

// The library each dynamic symbol's version names (by symbol index; empty: none).
Result<std::vector<std::string>> SymbolVersionLibraries(Elf* elf, const Sections& sections,
                                                        size_t symbol_count) {
  std::vector<std::string> out(symbol_count);
  if (sections.versym == 0 || sections.verneed == 0) return out;
  PHOS_ASSIGN_OR_RETURN(auto libraries, VersionLibraries(elf, sections.verneed));
  Elf_Scn* scn = elf_getscn(elf, sections.versym);
  GElf_Shdr shdr;
  if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) return ElfError(".gnu.version");
  PHOS_ASSIGN_OR_RETURN(Elf_Data * data, SectionData(scn, shdr, ELF_T_HALF, ".gnu.version"));
  const size_t count = std::min(symbol_count, EntryCount(elf, data, ELF_T_HALF));
  for (size_t i = 1; i < count; ++i) {
    GElf_Versym version;
    if (gelf_getversym(data, static_cast<int>(i), &version) == nullptr) return ElfError(".gnu.version entry");
    // The top bit marks a hidden version; indices 0 and 1 are local and global: no version.
    if (auto it = libraries.find(version & 0x7fff); it != libraries.end()) out[i] = it->second;
  }
  return out;
}

Status ReadDynamicSymbols(Elf* elf, const Sections& sections, bool bind_now, ElfFile* out) {
  PHOS_ASSIGN_OR_RETURN(SymbolTable table, OpenSymbols(elf, sections.dynsym, ".dynsym"));
  const std::optional<uint32_t> jump_slot = JumpSlotType(out->machine);
  std::vector<bool> at_load(table.count, false);
  if (jump_slot) {
    PHOS_ASSIGN_OR_RETURN(at_load, SymbolsBoundAtLoad(elf, sections, table.count, *jump_slot));
  }
  PHOS_ASSIGN_OR_RETURN(std::vector<std::string> versions,
                        SymbolVersionLibraries(elf, sections, table.count));
  for (size_t i = 1; i < table.count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(table.data, static_cast<int>(i), &sym) == nullptr) return ElfError(".dynsym entry");
    const int type = GELF_ST_TYPE(sym.st_info);
    const int bind = GELF_ST_BIND(sym.st_info);
    if (bind == STB_LOCAL) continue;
    const char* name = elf_strptr(elf, table.strings, sym.st_name);
    if (name == nullptr) return Status::Corruption(".dynsym names a string outside its string table");
    if (*name == '\0') continue;
    if (sym.st_shndx == SHN_UNDEF) {
      if (type != STT_FUNC && type != STT_NOTYPE) continue;
      Binding binding = Binding::kLazy;
      if (bind_now || at_load[i]) {
        binding = Binding::kAtLoad;
      } else if (!jump_slot) {
        binding = Binding::kUnknown;
      }
      out->imports.push_back({name, bind == STB_WEAK, binding, std::move(versions[i])});
    } else if (type == STT_FUNC || type == STT_GNU_IFUNC) {
      out->exports.emplace_back(name);
    }
  }
  return Status::Ok();
}

// The functions of `among` (sorted) that .symtab defines.
Status ReadStaticFunctions(Elf* elf, size_t index, const std::vector<std::string>& among, ElfFile* out) {
  PHOS_ASSIGN_OR_RETURN(SymbolTable table, OpenSymbols(elf, index, ".symtab"));
  for (size_t i = 1; i < table.count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(table.data, static_cast<int>(i), &sym) == nullptr) return ElfError(".symtab entry");
    if (sym.st_shndx == SHN_UNDEF || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
    const char* name = elf_strptr(elf, table.strings, sym.st_name);
    if (name == nullptr) return Status::Corruption(".symtab names a string outside its string table");
    if (std::binary_search(among.begin(), among.end(), std::string_view(name), std::less<>())) {
      out->static_functions.emplace_back(name);
    }
  }
  return Status::Ok();
}

template <typename T, typename Key>
void SortUnique(std::vector<T>* v, Key key) {
  std::sort(v->begin(), v->end(), [&](const T& a, const T& b) { return key(a) < key(b); });
  v->erase(std::unique(v->begin(), v->end(), [&](const T& a, const T& b) { return key(a) == key(b); }),
           v->end());
}

// The dynamic loader PT_INTERP names: a NUL-terminated path in the segment's bytes.
Result<std::string> Interpreter(Elf* elf, const GElf_Phdr& phdr) {
  // A path longer than PATH_MAX names no loader the kernel would start.
  if (phdr.p_filesz == 0 || phdr.p_filesz > 4096)
    return Status::Corruption("PT_INTERP: no path of a sane length");
  Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(phdr.p_offset), phdr.p_filesz, ELF_T_BYTE);
  if (data == nullptr) return ElfError("PT_INTERP");
  const char* bytes = static_cast<const char*>(data->d_buf);
  return std::string(bytes, strnlen(bytes, data->d_size));
}

Result<ElfFile> Read(Elf* elf, const ElfReadOptions& options) {
  if (elf_kind(elf) != ELF_K_ELF) return Status::InvalidArgument("not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) return ElfError("ELF header");
  ElfFile out;
  out.elf_class = ehdr.e_ident[EI_CLASS];
  out.machine = ehdr.e_machine;
  out.type = ehdr.e_type;

  // libelf counts only the headers the file holds: fewer than the ELF header says is a file cut
  // short (or a lying header).
  size_t phnum = 0, shnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return ElfError("program headers");
  if (elf_getshdrnum(elf, &shnum) != 0) return ElfError("section headers");
  if (ehdr.e_phnum != PN_XNUM && phnum != ehdr.e_phnum) {
    return Status::Corruption("holds " + std::to_string(phnum) + " of the " + std::to_string(ehdr.e_phnum) +
                              " program headers its ELF header announces (cut short?)");
  }
  if (ehdr.e_shoff != 0 && (shnum == 0 || (ehdr.e_shnum != 0 && shnum != ehdr.e_shnum))) {
    return Status::Corruption("holds " + std::to_string(shnum) +
                              " of the section headers its ELF header announces " + "(cut short?)");
  }
  bool loadable = false;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr) return ElfError("program header");
    if (phdr.p_type == PT_LOAD) loadable = true;
    if (phdr.p_type == PT_INTERP) {
      PHOS_ASSIGN_OR_RETURN(out.interpreter, Interpreter(elf, phdr));
    }
  }
  if ((out.type == ET_EXEC || out.type == ET_DYN) && !loadable) {
    return Status::Corruption("an executable or shared library with no loadable segment (PT_LOAD)");
  }

  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return ElfError("section header string table");
  Sections sections;
  Elf_Scn* dynamic_scn = nullptr;
  GElf_Shdr dynamic_shdr{};
  size_t section_count = 0;
  elf_errno();  // clears the last error: the loop below ends on a null section either way
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) return ElfError("section header");
    ++section_count;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name != nullptr && std::string_view(name) == ".nv_fatbin") out.cuda_kernels = true;
    const size_t index = elf_ndxscn(scn);
    if (shdr.sh_type == SHT_DYNSYM && sections.dynsym == 0) sections.dynsym = index;
    if (shdr.sh_type == SHT_SYMTAB && sections.symtab == 0) sections.symtab = index;
    if (shdr.sh_type == SHT_GNU_versym && sections.versym == 0) sections.versym = index;
    if (shdr.sh_type == SHT_GNU_verneed && sections.verneed == 0) sections.verneed = index;
    if (shdr.sh_type == SHT_REL || shdr.sh_type == SHT_RELA) sections.relocations.push_back(index);
    if (shdr.sh_type == SHT_DYNAMIC && dynamic_scn == nullptr) {
      dynamic_scn = scn;
      dynamic_shdr = shdr;
    }
  }
  if (elf_errno() != 0) return Status::Corruption("section headers: unreadable");
  if (section_count == 0 && phnum != 0) {
    return Status::InvalidArgument("has no section headers (stripped of them): its symbols cannot be listed");
  }

  bool bind_now = false;
  if (dynamic_scn != nullptr) {
    out.dynamic = true;
    PHOS_RETURN_IF_ERROR(ReadDynamic(elf, dynamic_scn, dynamic_shdr, &out, &bind_now));
  }
  if (sections.dynsym != 0) PHOS_RETURN_IF_ERROR(ReadDynamicSymbols(elf, sections, bind_now, &out));
  if (sections.symtab != 0 && options.static_functions_among != nullptr) {
    PHOS_RETURN_IF_ERROR(ReadStaticFunctions(elf, sections.symtab, *options.static_functions_among, &out));
  }

  SortUnique(&out.exports, [](const std::string& s) -> const std::string& { return s; });
  SortUnique(&out.static_functions, [](const std::string& s) -> const std::string& { return s; });
  SortUnique(&out.imports, [](const ElfImport& i) -> const std::string& { return i.name; });
  return out;
}

}  // namespace

Result<ElfFile> ReadElfFile(const std::string& path, const ElfReadOptions& options) {
  static std::once_flag version_once;
  std::call_once(version_once, [] { elf_version(EV_CURRENT); });
  auto fail = [&](const Status& s) { return s.WithContext(path); };

  struct stat st;
  if (stat(path.c_str(), &st) != 0) return fail(Status::FromErrno(errno, "stat"));
  if (!S_ISREG(st.st_mode)) return fail(Status::InvalidArgument("not a regular file"));
  // O_NONBLOCK: should the path have become a FIFO since, opening it does not wait for a writer.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return fail(Status::FromErrno(errno, "open"));
  if (fstat(fd.get(), &st) != 0) return fail(Status::FromErrno(errno, "fstat"));
  if (!S_ISREG(st.st_mode)) return fail(Status::InvalidArgument("not a regular file"));

  // ELF_C_READ: libelf reads what it needs with pread; nothing is mapped.
  ElfHandle elf(elf_begin(fd.get(), ELF_C_READ, nullptr));
  if (elf == nullptr) return fail(ElfError("open as ELF"));
  Result<ElfFile> result = Read(elf.get(), options);
  if (!result.ok()) return fail(result.status());
  return result;
}

}  // namespace phos::surface
