#include "phos/runtime/param_metadata.h"

#include <cxxabi.h>

#include <cstdlib>
#include <functional>

#include "phos/driver/driver_table.h"

namespace phos::runtime {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Removes `word` from the end of `s` when it stands there as a whole word.
bool StripTrailingWord(std::string_view* s, std::string_view word) {
  if (!s->ends_with(word)) return false;
  std::string_view rest = s->substr(0, s->size() - word.size());
  if (!rest.empty()) {
    char c = rest.back();
    if (c != ' ' && c != '*' && c != '&' && c != ')' && c != '>') return false;
  }
  *s = Trim(rest);
  return true;
}

// Qualifiers of the thing a type ends with; "restrict" is how the demangler spells
// __restrict__ ("float const* restrict").
void StripTrailingQualifiers(std::string_view* s, bool strip_const) {
  for (bool again = true; again;) {
    again = StripTrailingWord(s, "volatile") || StripTrailingWord(s, "restrict") ||
            StripTrailingWord(s, "__restrict__") || StripTrailingWord(s, "__restrict") ||
            (strip_const && StripTrailingWord(s, "const"));
  }
}

// Whether `pointee` (the type a pointer points to, as the demangler prints it) is const.
bool PointeeIsConst(std::string_view pointee) {
  StripTrailingQualifiers(&pointee, /*strip_const=*/false);
  if (StripTrailingWord(&pointee, "const")) return true;
  // Prefix form ("const float"), which __cxa_demangle never prints but a caller may pass: only
  // when nothing after it makes the const apply to something else ("const float*").
  std::string_view rest = pointee;
  while (rest.starts_with("volatile ")) rest.remove_prefix(9);
  if (!rest.starts_with("const ")) return false;
  return rest.find_first_of("*&(") == std::string_view::npos;
}

}  // namespace

const char* ParamAccessName(ParamAccess access) {
  switch (access) {
    case ParamAccess::kRead:
      return "read";
    case ParamAccess::kReadWrite:
      return "read-write";
    case ParamAccess::kScan:
      return "scan";
  }
  return "?";
}

const char* ParamKindSourceName(ParamKindSource source) {
  switch (source) {
    case ParamKindSource::kDemangled:
      return "demangled";
    case ParamKindSource::kNotMangled:
      return "not-mangled";
    case ParamKindSource::kDemangleFailed:
      return "demangle-failed";
    case ParamKindSource::kCountMismatch:
      return "count-mismatch";
  }
  return "?";
}

Result<std::string> Demangle(const std::string& mangled) {
  int status = 0;
  char* out = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) {
    std::free(out);
    return Status::InvalidArgument("cannot demangle '" + mangled + "' (__cxa_demangle status " +
                                   std::to_string(status) + ")");
  }
  std::string result(out);
  std::free(out);
  return result;
}

Result<std::vector<std::string>> SplitParameterTypes(std::string_view demangled) {
  std::string_view s = Trim(demangled);
  // Suffixes of specialised copies: "foo(float*) [clone .constprop.0] [clone .isra.0]".
  while (s.ends_with(']')) {
    size_t open = s.rfind(" [clone ");
    if (open == std::string_view::npos) break;
    s = Trim(s.substr(0, open));
  }
  // Qualifiers of member functions, which kernels are not, but a name may still carry.
  for (bool again = true; again;) {
    again = StripTrailingWord(&s, "const") || StripTrailingWord(&s, "volatile") ||
            StripTrailingWord(&s, "&&") || StripTrailingWord(&s, "&");
  }
  if (!s.ends_with(')')) {
    return Status::InvalidArgument("no parameter list in '" + std::string(demangled) + "'");
  }
  // The parameter list is the last balanced (...) group; earlier groups belong to the name
  // ("(anonymous namespace)::kernel(...)").
  size_t depth = 0, open = std::string_view::npos;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    if (s[i] == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string_view::npos) {
    return Status::InvalidArgument("unbalanced parameter list in '" + std::string(demangled) + "'");
  }
  std::string_view list = s.substr(open + 1, s.size() - open - 2);
  std::vector<std::string> types;
  // Top-level commas only: those inside template arguments, function pointer parameter lists,
  // array bounds and lambda names ({lambda(int, int)#1}) separate nothing here.
  int nest = 0, angle = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '(' || c == '[' || c == '{') ++nest;
    if (c == ')' || c == ']' || c == '}') --nest;
    // Angles count only outside parentheses: the demangler parenthesises expressions in
    // template arguments, so a '>' in "(1)>(2)" sits inside them.
    if (nest == 0 && c == '<') ++angle;
    if (nest == 0 && c == '>') --angle;
    if (nest < 0 || angle < 0) {
      return Status::InvalidArgument("unbalanced parameter list in '" + std::string(demangled) + "'");
    }
    if (c == ',' && nest == 0 && angle == 0) {
      std::string_view type = Trim(list.substr(start, i - start));
      if (type == "...") {
        return Status::InvalidArgument("variadic parameter list in '" + std::string(demangled) + "'");
      }
      if (type.empty() && !(types.empty() && i == list.size())) {
        return Status::InvalidArgument("empty parameter in '" + std::string(demangled) + "'");
      }
      if (!type.empty()) types.emplace_back(type);
      start = i + 1;
    }
  }
  if (nest != 0 || angle != 0) {
    return Status::InvalidArgument("unbalanced parameter list in '" + std::string(demangled) + "'");
  }
  if (types.size() == 1 && types[0] == "void") types.clear();
  return types;
}

ParamAccess AccessOfType(std::string_view type) {
  std::string_view t = Trim(type);
  // Qualifiers of the parameter itself ("float* const", "float const* restrict") change nothing
  // about the memory it points to.
  StripTrailingQualifiers(&t, /*strip_const=*/true);
  // Pointer to array: "float const (*) [4][2]" points to "float const".
  if (t.ends_with(']')) {
    while (t.ends_with(']')) {
      size_t open = t.rfind('[');
      if (open == std::string_view::npos) return ParamAccess::kScan;
      t = Trim(t.substr(0, open));
    }
    if (!t.ends_with("(*)")) return ParamAccess::kScan;
    t.remove_suffix(3);
    return PointeeIsConst(Trim(t)) ? ParamAccess::kRead : ParamAccess::kReadWrite;
  }
  if (!t.ends_with('*')) return ParamAccess::kScan;  // scalars, structs, references, functions
  std::string_view pointee = Trim(t.substr(0, t.size() - 1));
  // Pointers to members ("int A::*", "void (A::*)(int)") hold offsets, not addresses.
  if (pointee.empty() || pointee.ends_with("::") || pointee.ends_with('(')) return ParamAccess::kScan;
  return PointeeIsConst(pointee) ? ParamAccess::kRead : ParamAccess::kReadWrite;
}

KernelParamMetadata BuildParamMetadata(const std::string& mangled, std::span<const ParamSlotLayout> layout) {
  KernelParamMetadata meta;
  meta.name = mangled;
  meta.params.reserve(layout.size());
  for (const ParamSlotLayout& slot : layout) {
    meta.params.push_back({slot.offset, slot.size, ParamAccess::kScan});
    meta.param_bytes = std::max(meta.param_bytes, slot.offset + slot.size);
  }
  if (!mangled.starts_with("_Z")) {
    meta.source = ParamKindSource::kNotMangled;
    return meta;
  }
  Result<std::string> demangled = Demangle(mangled);
  Result<std::vector<std::string>> types =
      demangled.ok() ? SplitParameterTypes(*demangled) : Result<std::vector<std::string>>(demangled.status());
  if (!types.ok()) {
    meta.source = ParamKindSource::kDemangleFailed;
    return meta;
  }
  if (types->size() != layout.size()) {
    meta.source = ParamKindSource::kCountMismatch;
    return meta;
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    ParamAccess access = AccessOfType((*types)[i]);
    // A pointer occupies one 8-byte slot; anything else claiming to be one is scanned instead.
    meta.params[i].access = access != ParamAccess::kScan && layout[i].size != 8 ? ParamAccess::kScan : access;
  }
  return meta;
}

Result<std::vector<ParamSlotLayout>> QueryParamLayout(const driver::DriverTable& driver, CUfunction function,
                                                      uint32_t max_params) {
  if (driver.cuFuncGetParamInfo == nullptr) return Status::NotSupported("driver has no cuFuncGetParamInfo");
  std::vector<ParamSlotLayout> layout;
  for (uint32_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    CUresult r = driver.cuFuncGetParamInfo(function, i, &offset, &size);
    // The driver answers CUDA_ERROR_INVALID_VALUE for the first index past the last parameter.
    if (r == CUDA_ERROR_INVALID_VALUE) break;
    PHOS_RETURN_IF_ERROR(driver::CuStatus(r, "cuFuncGetParamInfo", driver.error_text()));
    if (i == max_params) {
      return Status::InvalidArgument("kernel has more than " + std::to_string(max_params) + " parameters");
    }
    layout.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  }
  return layout;
}

size_t ParamMetadataCache::KeyHash::operator()(const KeyView& key) const {
  size_t h = std::hash<std::string_view>{}(key.name);
  return h ^ (key.module.low * 0x9e3779b97f4a7c15ull) ^ (key.module.high + (h << 6) + (h >> 2));
}

std::shared_ptr<const KernelParamMetadata> ParamMetadataCache::Lookup(const ModuleHash& module,
                                                                      std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(KeyView{module, name});
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<const KernelParamMetadata> ParamMetadataCache::Find(const ModuleHash& module,
                                                                    std::string_view name) const {
  return Lookup(module, name);
}

std::shared_ptr<const KernelParamMetadata> ParamMetadataCache::GetOrBuild(
    const ModuleHash& module, const std::string& name, std::span<const ParamSlotLayout> layout) {
  if (auto hit = Lookup(module, name)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  // Built outside the lock (demangling allocates and takes microseconds); a racing builder of
  // the same key loses to whichever inserted first, and both return that entry.
  auto built = std::make_shared<const KernelParamMetadata>(BuildParamMetadata(name, layout));
  std::lock_guard lock(mu_);
  auto [it, inserted] = entries_.try_emplace(Key{module, name}, built);
  if (inserted) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    if (built->source != ParamKindSource::kDemangled) fallbacks_.fetch_add(1, std::memory_order_relaxed);
  } else {
    hits_.fetch_add(1, std::memory_order_relaxed);
  }
  return it->second;
}

Result<std::shared_ptr<const KernelParamMetadata>> ParamMetadataCache::GetOrQuery(const ModuleHash& module,
                                                                                  const std::string& name,
                                                                                  const driver::DriverTable& driver,
                                                                                  CUfunction function) {
  if (auto hit = Lookup(module, name)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  Result<std::vector<ParamSlotLayout>> layout = QueryParamLayout(driver, function);
  if (!layout.ok()) return layout.status().WithContext("parameter layout of '" + name + "'");
  return GetOrBuild(module, name, *layout);
}

ParamMetadataCache::Stats ParamMetadataCache::stats() const {
  return {hits_.load(std::memory_order_relaxed), misses_.load(std::memory_order_relaxed),
          fallbacks_.load(std::memory_order_relaxed)};
}

size_t ParamMetadataCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace phos::runtime
