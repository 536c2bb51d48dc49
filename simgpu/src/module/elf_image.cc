#include "module/elf_image.h"

#include <elf.h>
#include <string.h>

#include <algorithm>

#include "phos/base/log.h"

namespace phos::sim {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "simgpu modules: unknown host machine"
#endif

// Far above what a module has (a dozen program headers, a few dozen sections), far below what
// would make the header tables themselves a problem.
constexpr uint64_t kMaxProgramHeaders = 1024;
constexpr uint64_t kMaxSections = 1 << 16;

CUresult Reject(const char* why) {
  PHOS_LOG(Warn, "simgpu", "module load: not a simgpu module image: {}", why);
  return CUDA_ERROR_INVALID_IMAGE;
}

// Tracks the image's extent; each range must end inside the cap (and inside a known buffer).
class Extent {
 public:
  explicit Extent(size_t known_size) : limit_(known_size != 0 ? known_size : kMaxModuleImageSize) {}

  // Adds [offset, offset + count * entry_size); false when it overflows or passes the limit.
  bool Add(uint64_t offset, uint64_t count, uint64_t entry_size) {
    if (count != 0 && entry_size > limit_ / count) return false;
    const uint64_t bytes = count * entry_size;
    if (offset > limit_ || bytes > limit_ - offset) return false;
    end_ = std::max(end_, offset + bytes);
    return true;
  }
  uint64_t end() const { return end_; }

 private:
  uint64_t limit_;
  uint64_t end_ = 0;
};

}  // namespace

CUresult MeasureElfImage(const unsigned char* image, size_t known_size, ImageFile* file, size_t* size) {
  Extent extent(known_size);
  if (!extent.Add(0, 1, sizeof(Elf64_Ehdr))) return Reject("shorter than an ELF header");
  // The magic byte by byte before the rest of the header: without a known size, an image that is
  // not ELF (PTX text, any string) may end before a header's 64 bytes, and nothing past its first
  // byte that differs from the magic is read.
  for (uint64_t i = 0; i < SELFMAG; ++i) {
    if (CUresult r = file->CopyIn(image, i, 1); r != CUDA_SUCCESS) return r;
    if (image[i] != static_cast<unsigned char>(ELFMAG[i])) return Reject("no ELF magic");
  }
  if (CUresult r = file->CopyIn(image, SELFMAG, sizeof(Elf64_Ehdr) - SELFMAG); r != CUDA_SUCCESS) return r;
  Elf64_Ehdr eh;
  memcpy(&eh, image, sizeof eh);

  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return Reject("not a 64-bit ELF object");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return Reject("not little-endian");
  if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT)
    return Reject("unknown ELF version");
  if (eh.e_type != ET_DYN) return Reject("not a shared object (ET_DYN)");
  if (eh.e_machine != kHostMachine) return Reject("built for another machine");
  if (eh.e_ehsize != sizeof(Elf64_Ehdr)) return Reject("bad ELF header size");

  // Program headers: the loadable segments.
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > kMaxProgramHeaders) {
    return Reject("bad program header table");
  }
  if (!extent.Add(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr))) return Reject("program headers out of bounds");
  if (CUresult r = file->CopyIn(image, eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr));
      r != CUDA_SUCCESS) {
    return r;
  }
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, image + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (!extent.Add(ph.p_offset, 1, ph.p_filesz)) return Reject("segment out of bounds");
  }

  // Section headers: not needed to load, but part of the image (symbols, debug information).
  if (eh.e_shoff != 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) return Reject("bad section header size");
    uint64_t shnum = eh.e_shnum;
    if (!extent.Add(eh.e_shoff, 1, sizeof(Elf64_Shdr))) return Reject("section headers out of bounds");
    if (CUresult r = file->CopyIn(image, eh.e_shoff, sizeof(Elf64_Shdr)); r != CUDA_SUCCESS) return r;
    if (shnum == 0) {
      // Extended numbering (gABI): section 0's sh_size holds the count.
      Elf64_Shdr first;
      memcpy(&first, image + eh.e_shoff, sizeof first);
      shnum = first.sh_size;
    }
    if (shnum == 0 || shnum > kMaxSections) return Reject("bad section count");
    if (!extent.Add(eh.e_shoff, shnum, sizeof(Elf64_Shdr))) return Reject("section headers out of bounds");
    if (CUresult r = file->CopyIn(image, eh.e_shoff, shnum * sizeof(Elf64_Shdr)); r != CUDA_SUCCESS) return r;
    for (uint64_t i = 0; i < shnum; ++i) {
      Elf64_Shdr sh;
      memcpy(&sh, image + eh.e_shoff + i * sizeof sh, sizeof sh);
      if (sh.sh_type == SHT_NOBITS || sh.sh_type == SHT_NULL) continue;
      if (!extent.Add(sh.sh_offset, 1, sh.sh_size)) return Reject("section out of bounds");
    }
  }
  *size = extent.end();
  return CUDA_SUCCESS;
}

}  // namespace phos::sim
