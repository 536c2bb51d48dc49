// Shared by the disk-tier tests: a temporary store directory and deterministic buffer bytes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "phos/base/subprocess.h"
#include "phos/store/store.h"

namespace phos::store::testing {

// Adds one buffer per entry of `buffers` to `writer`, at addresses 0x10000000 apart, labelled b0, b1, ...
inline void AddBuffers(SnapshotWriter& writer, const std::vector<std::vector<char>>& buffers) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer meta;
    meta.device_address = 0x10000000ull * (i + 1);
    meta.size = buffers[i].size();
    meta.label = "b" + std::to_string(i);
    auto index = writer.AddBuffer(meta, buffers[i].data());
    EXPECT_TRUE(index.ok()) << index.status().ToString();
  }
}

// A tool (phos-snapshot) run to its end: its exit code (-1 when it could not run or was killed)
// and what it printed on stdout and stderr.
struct ToolRun {
  int exit_code = -1;
  std::string output;
};

inline ToolRun RunTool(const std::string& tool, const std::vector<std::string>& args) {
  SpawnOptions options;
  options.argv = {tool};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.stderr_to_stdout = true;
  Result<CommandOutput> out = RunCommand(std::move(options), std::chrono::minutes(2));
  if (!out.ok()) return {.exit_code = -1, .output = out.status().ToString()};
  return {.exit_code = out->status.exited() ? out->status.exit_code : -1, .output = out->output};
}

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
