#include "phos/fn/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "phos/fn/float16.h"

namespace phos::fn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; the reader hands out its bytes unconverted");

std::string_view DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kF32:
      return "F32";
    case Dtype::kF16:
      return "F16";
    case Dtype::kBF16:
      return "BF16";
  }
  return "?";
}

size_t DtypeSize(Dtype dtype) {
  return dtype == Dtype::kF32 ? 4 : 2;
}

uint64_t TensorInfo::element_count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // checked for overflow when the header was parsed
  return n;
}

void ConvertToFloat32(Dtype dtype, std::span<const std::byte> bytes, std::span<float> out) {
  if (out.empty()) return;  // a tensor with a 0 dimension: no data, and memcpy may not take null
  switch (dtype) {
    case Dtype::kF32:
      std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
      return;
    case Dtype::kF16:
    case Dtype::kBF16: {
      float (*convert)(uint16_t) = dtype == Dtype::kF16 ? HalfBitsToFloat : Bfloat16BitsToFloat;
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes.data() + 2 * i, sizeof(bits));
        out[i] = convert(bits);
      }
      return;
    }
  }
}

namespace {

// The error every header check returns: the file and what is wrong with it.
Status Corrupt(const std::string& path, const std::string& what) {
  return Status::Corruption("safetensors file '" + path + "': " + what);
}

Result<Dtype> ParseDtype(const std::string& path, const std::string& tensor, const nlohmann::json& j) {
  if (!j.is_string()) return Corrupt(path, "tensor '" + tensor + "': \"dtype\" is not a string");
  const std::string& name = j.get_ref<const std::string&>();
  if (name == "F32") return Dtype::kF32;
  if (name == "F16") return Dtype::kF16;
  if (name == "BF16") return Dtype::kBF16;
  return Status::NotSupported("safetensors file '" + path + "': tensor '" + tensor + "' has dtype '" + name +
                              "'; supported dtypes are F32, F16 and BF16");
}

// A non-negative integer field, told apart from negative, fractional and too large numbers.
Result<uint64_t> ParseUnsigned(const std::string& path, const std::string& tensor, const char* field,
                               const nlohmann::json& j) {
  const std::string where = "tensor '" + tensor + "': " + field;
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) return Corrupt(path, where + " is negative (" + j.dump() + ")");
  if (j.is_number_float()) return Corrupt(path, where + " is not an integer below 2^64 (" + j.dump() + ")");
  return Corrupt(path, where + " is not a number");
}

Result<TensorInfo> ParseTensor(const std::string& path, const std::string& name,
                               const nlohmann::json& entry) {
  if (!entry.is_object()) return Corrupt(path, "tensor '" + name + "': entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) return Corrupt(path, "tensor '" + name + "': missing \"" + field + "\"");
  }
  TensorInfo t;
  t.name = name;
  PHOS_ASSIGN_OR_RETURN(t.dtype, ParseDtype(path, name, entry["dtype"]));

  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array()) return Corrupt(path, "tensor '" + name + "': \"shape\" is not an array");
  uint64_t bytes = DtypeSize(t.dtype);
  for (const nlohmann::json& d : shape) {
    PHOS_ASSIGN_OR_RETURN(uint64_t dim, ParseUnsigned(path, name, "a \"shape\" dimension", d));
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return Corrupt(path, "tensor '" + name + "': shape " + shape.dump() + " overflows 64 bits of bytes");
    }
    t.shape.push_back(dim);
  }

  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return Corrupt(path, "tensor '" + name + "': \"data_offsets\" is not an array [begin, end]");
  }
  PHOS_ASSIGN_OR_RETURN(t.begin, ParseUnsigned(path, name, "\"data_offsets\" begin", offsets[0]));
  PHOS_ASSIGN_OR_RETURN(t.end, ParseUnsigned(path, name, "\"data_offsets\" end", offsets[1]));
  if (t.begin > t.end) {
    return Corrupt(path, "tensor '" + name + "': data_offsets begin " + std::to_string(t.begin) + " > end " +
                             std::to_string(t.end));
  }
  if (t.end - t.begin != bytes) {
    return Corrupt(path, "tensor '" + name + "': data_offsets span " + std::to_string(t.end - t.begin) +
                             " bytes but shape " + shape.dump() + " of " + std::string(DtypeName(t.dtype)) +
                             " needs " + std::to_string(bytes));
  }
  return t;
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string path, const std::byte* mapping, size_t mapping_size)
    : path_(std::move(path)), mapping_(mapping), mapping_size_(mapping_size) {}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(const_cast<std::byte*>(mapping_), mapping_size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open safetensors file '" + path + "'");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Status::FromErrno(err, "stat safetensors file '" + path + "'");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument("safetensors file '" + path + "' is not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    close(fd);
    return Corrupt(path,
                   "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  close(fd);  // the mapping keeps the file
  if (mapping == MAP_FAILED) return Status::FromErrno(err, "mmap safetensors file '" + path + "'");
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, static_cast<const std::byte*>(mapping), size));
  PHOS_RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

Status SafetensorsFile::ParseHeader() {
  uint64_t header_size;
  std::memcpy(&header_size, mapping_, sizeof(header_size));
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return Corrupt(path_, "header length " + std::to_string(header_size) + " exceeds the " +
                              std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (header_size > mapping_size_ - 8) {
    return Corrupt(path_, "truncated: header length " + std::to_string(header_size) + " but only " +
                              std::to_string(mapping_size_ - 8) + " bytes follow it");
  }
  data_ = mapping_ + 8 + header_size;
  data_size_ = mapping_size_ - 8 - header_size;

  // nlohmann keeps the last of duplicate keys; the parser callback sees every top-level key, so
  // a duplicate tensor name is caught here rather than silently shadowing the first.
  std::set<std::string> keys;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  const auto* text = reinterpret_cast<const char*>(mapping_ + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_size, on_event);
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(path_, std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) return Corrupt(path_, "header is not a JSON object");
  if (!duplicate.empty()) return Corrupt(path_, "header names '" + duplicate + "' more than once");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Corrupt(path_, "\"__metadata__\" is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Corrupt(path_, "\"__metadata__\" entry '" + key + "' is not a string");
        metadata_.emplace(key, value.get<std::string>());
      }
      continue;
    }
    PHOS_ASSIGN_OR_RETURN(TensorInfo tensor, ParseTensor(path_, name, entry));
    if (tensor.end > data_size_) {
      return Corrupt(path_, "truncated: tensor '" + name + "' ends at data byte " +
                                std::to_string(tensor.end) + " but the data area has " +
                                std::to_string(data_size_) + " bytes");
    }
    tensors_.emplace(name, std::move(tensor));
  }

  // Overlap check: sorted by begin, each non-empty tensor must start at or after the previous end.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, t] : tensors_) {
    if (t.byte_size() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return Corrupt(path_,
                     "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
  return Status::Ok();
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

bool SafetensorsFile::Contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

Result<const TensorInfo*> SafetensorsFile::Tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound("safetensors file '" + path_ + "' has no tensor '" + std::string(name) + "'");
  }
  return &it->second;
}

std::span<const std::byte> SafetensorsFile::Bytes(const TensorInfo& tensor) const {
  return {data_ + tensor.begin, tensor.byte_size()};
}

Result<std::span<const std::byte>> SafetensorsFile::Bytes(std::string_view name) const {
  PHOS_ASSIGN_OR_RETURN(const TensorInfo* tensor, Tensor(name));
  return Bytes(*tensor);
}

Result<std::vector<float>> SafetensorsFile::ReadAsFloat32(std::string_view name) const {
  PHOS_ASSIGN_OR_RETURN(const TensorInfo* tensor, Tensor(name));
  std::vector<float> out(tensor->element_count());
  ConvertToFloat32(tensor->dtype, Bytes(*tensor), out);
  return out;
}

}  // namespace phos::fn
