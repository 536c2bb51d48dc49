// SafetensorsFile: a read-only, memory-mapped .safetensors file (the format Hugging Face
// checkpoints use) with every header field checked before any tensor is handed out.
//
//   PHOS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open("model.safetensors"));
//   PHOS_ASSIGN_OR_RETURN(std::vector<float> w, file->ReadAsFloat32("model.norm.weight"));
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON (an object mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end)}, plus an optional
// "__metadata__" object of strings), then the data area the offsets are relative to.
// What is accepted and refused is listed in docs/functions.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"

namespace phos::fn {

// The element types the reader supports; any other safetensors dtype is refused by name.
enum class Dtype { kF32, kF16, kBF16 };

// "F32", "F16", "BF16": the names the format uses.
std::string_view DtypeName(Dtype dtype);
// Bytes per element.
size_t DtypeSize(Dtype dtype);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<uint64_t> shape;
  // [begin, end) in bytes, relative to the first byte after the header.
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t element_count() const;
  uint64_t byte_size() const { return end - begin; }
};

// The header's largest accepted size: real headers are a few hundred KiB even for models with
// thousands of tensors, so a larger length is a corrupt or hostile file, not a model.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

class SafetensorsFile {
 public:
  // Maps `path` read-only and checks its header and every tensor's extent against the file.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // The "__metadata__" entries (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Every tensor's name, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view name) const;
  // The tensor called `name`, or NotFound naming the file.
  Result<const TensorInfo*> Tensor(std::string_view name) const;

  // The tensor's raw little-endian bytes, valid while this file is open.
  std::span<const std::byte> Bytes(const TensorInfo& tensor) const;
  Result<std::span<const std::byte>> Bytes(std::string_view name) const;
  // The tensor converted to fp32 (F16 and BF16 exactly).
  Result<std::vector<float>> ReadAsFloat32(std::string_view name) const;

 private:
  SafetensorsFile(std::string path, const std::byte* mapping, size_t mapping_size);
  Status ParseHeader();

  std::string path_;
  const std::byte* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const std::byte* data_ = nullptr;  // the first byte after the header
  size_t data_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

// `bytes` of `dtype` elements as fp32: the one conversion the reader and the upload helpers use.
// `out` must hold bytes.size() / DtypeSize(dtype) floats.
void ConvertToFloat32(Dtype dtype, std::span<const std::byte> bytes, std::span<float> out);

}  // namespace phos::fn
