// What the weight-reader tests build their files with: a scratch directory and a writer of
// .safetensors files whose header and data are given verbatim, so a test can make any file,
// well-formed or hostile.
#pragma once

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace phos::fn::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "phos-weights-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
    // mkdtemp makes it 0700; a sandboxed function reading it runs as its own uid.
    if (!path_.empty()) chmod(path_.c_str(), 0755);
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Empty when the directory could not be made.
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// Writes `bytes` to `path` as they are.
inline void WriteFileBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// The bytes of a .safetensors file: `header_length` (little-endian), then `header`, then `data`.
inline std::string SafetensorsBytes(std::string_view header, std::string_view data, uint64_t header_length) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header_length >> (8 * i)) & 0xff);
  bytes.append(header);
  bytes.append(data);
  return bytes;
}

// A .safetensors file at `path` whose header length is the header's true length.
inline void WriteSafetensors(const std::string& path, std::string_view header, std::string_view data) {
  WriteFileBytes(path, SafetensorsBytes(header, data, header.size()));
}

}  // namespace phos::fn::testing
