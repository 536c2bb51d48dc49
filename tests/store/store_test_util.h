// Shared by the disk-tier tests: a temporary store directory and deterministic buffer bytes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace phos::store::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = (std::filesystem::temp_directory_path() /
             ("phos_store_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `size` bytes that depend only on `seed`.
inline std::vector<char> Bytes(size_t size, uint64_t seed) {
  std::vector<char> out(size);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < size; ++j) out[i + j] = static_cast<char>(v >> (8 * j));
  }
  return out;
}

}  // namespace phos::store::testing
