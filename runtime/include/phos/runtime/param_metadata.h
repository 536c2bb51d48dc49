// Kernel parameter metadata for read/write-set speculation (docs/design.md D8, issue 6): where each
// parameter sits in the packed parameter buffer (cuFuncGetParamInfo) and how the kernel may use
// the memory it names, taken from the constness in the demangled name (abi::__cxa_demangle):
//
//   const T* / T const*          -> kRead       (pointer to const)
//   T* / T* const / T**          -> kReadWrite  (pointer to non-const; partial writes exist)
//   anything else                -> kScan       (struct by value, scalar, reference, function
//                                                pointer, unknown: every aligned 8-byte word is
//                                                tried as an address, the PhOS rule)
//
// When the name does not demangle, is not a mangled C++ name at all (extern "C" kernels), or
// its parameter count disagrees with the driver's layout, every parameter is kScan and the
// metadata says why (`source`), so callers can count it. The kinds steer speculation only:
// validation (simgpu's guarded buffers) catches whatever they get wrong.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "phos/base/status.h"

namespace phos::driver {
class DriverTable;
}  // namespace phos::driver

namespace phos::runtime {

enum class ParamAccess : uint8_t {
  kRead,       // pointer to const: the buffer it points into is read
  kReadWrite,  // pointer to non-const: read and (possibly partially) written
  kScan,       // not known to be a pointer: each aligned 8-byte word is tried as an address
};
const char* ParamAccessName(ParamAccess access);

// Where a kernel's kinds came from.
enum class ParamKindSource : uint8_t {
  kDemangled,       // from the demangled parameter list
  kNotMangled,      // not an Itanium C++ name (extern "C"): no types, all kScan
  kDemangleFailed,  // __cxa_demangle refused it or its parameter list did not parse: all kScan
  kCountMismatch,   // parsed, but the count disagrees with the driver's layout: all kScan
};
const char* ParamKindSourceName(ParamKindSource source);

// One parameter's place in the packed parameter buffer, as cuFuncGetParamInfo reports it.
struct ParamSlotLayout {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct ParamMeta {
  uint32_t offset = 0;
  uint32_t size = 0;
  ParamAccess access = ParamAccess::kScan;
};

struct KernelParamMetadata {
  std::string name;  // mangled
  std::vector<ParamMeta> params;
  uint32_t param_bytes = 0;  // end of the last parameter
  ParamKindSource source = ParamKindSource::kDemangled;
};

// The demangled form of `mangled`, or InvalidArgument when __cxa_demangle refuses it.
Result<std::string> Demangle(const std::string& mangled);

// The parameter types of a demangled function signature, split at top-level commas
// ("vec_add(float const*, float const*, float*, int)" -> 4 types; "f()" and "f(void)" -> none).
// Handles return types of template functions, template arguments holding commas, function
// pointers, nested namespaces and trailing "[clone .constprop.0]" suffixes. InvalidArgument
// when there is no balanced parameter list or it holds a C variadic "...".
Result<std::vector<std::string>> SplitParameterTypes(std::string_view demangled);

// The access a parameter of demangled type `type` implies (see the table at the top).
ParamAccess AccessOfType(std::string_view type);

// Metadata from a mangled name and the driver's layout. Never fails: whatever cannot be
// derived from the name is kScan, and `source` says why.
KernelParamMetadata BuildParamMetadata(const std::string& mangled, std::span<const ParamSlotLayout> layout);

// The layout of `function` through the driver table: cuFuncGetParamInfo for index 0, 1, ... up
// to the first index the driver refuses (CUDA_ERROR_INVALID_VALUE), at most `max_params`.
Result<std::vector<ParamSlotLayout>> QueryParamLayout(const driver::DriverTable& driver, CUfunction function,
                                                      uint32_t max_params = 1024);

// xxHash3-128 of a module image: the store's content hash (store::Module::content_hash),
// so metadata computed at deploy is found again at restore for the same image.
struct ModuleHash {
  uint64_t low = 0;
  uint64_t high = 0;
  friend bool operator==(const ModuleHash&, const ModuleHash&) = default;
};

// Metadata per (module content hash, mangled kernel name). Thread-safe; entries are immutable
// once built and shared, so a caller may keep the pointer across launches without the lock.
class ParamMetadataCache {
 public:
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;     // entries built
    uint64_t fallbacks = 0;  // entries built with source != kDemangled
  };

  // The cached entry, or nullptr (counted as neither hit nor miss).
  std::shared_ptr<const KernelParamMetadata> Find(const ModuleHash& module, std::string_view name) const;
  // The cached entry (a hit), or one built from `layout` and cached (a miss).
  std::shared_ptr<const KernelParamMetadata> GetOrBuild(const ModuleHash& module, const std::string& name,
                                                        std::span<const ParamSlotLayout> layout);
  // The same, the layout queried from the driver on a miss.
  Result<std::shared_ptr<const KernelParamMetadata>> GetOrQuery(const ModuleHash& module,
                                                                const std::string& name,
                                                                const driver::DriverTable& driver,
                                                                CUfunction function);
  Stats stats() const;
  size_t size() const;

 private:
  struct Key {
    ModuleHash module;
    std::string name;
  };
  // Lookups by string_view build no Key (no allocation on the launch path).
  struct KeyView {
    ModuleHash module;
    std::string_view name;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& key) const;
    size_t operator()(const Key& key) const { return (*this)(KeyView{key.module, key.name}); }
  };
  struct KeyEqual {
    using is_transparent = void;
    static KeyView View(const Key& key) { return {key.module, key.name}; }
    static KeyView View(const KeyView& key) { return key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a).module == View(b).module && View(a).name == View(b).name;
    }
  };
  std::shared_ptr<const KernelParamMetadata> Lookup(const ModuleHash& module, std::string_view name) const;

  mutable std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const KernelParamMetadata>, KeyHash, KeyEqual> entries_;
  mutable std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> fallbacks_{0};
};

}  // namespace phos::runtime
