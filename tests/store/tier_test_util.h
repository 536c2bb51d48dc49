// Test doubles shared by the DRAM tier and reader tests: an in-memory ChunkSource that can be
// slowed down and corrupted, a counting allocator, and a manifest builder.
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "phos/store/chunk.h"
#include "phos/store/dram_tier.h"
#include "phos/store/manifest.h"

namespace phos::store::testing {

class MemoryChunkSource : public ChunkSource {
 public:
  // verify=false returns whatever bytes it holds, so that the tier's own check is what fails.
  explicit MemoryChunkSource(bool verify = true) : verify_(verify) {}

  ChunkRef Put(const std::string& bytes) {
    ChunkRef ref{ChunkId::Of(bytes.data(), bytes.size()), static_cast<uint32_t>(bytes.size())};
    std::lock_guard lock(mu_);
    chunks_[ref.id] = bytes;
    return ref;
  }
  // Flips one byte of the stored chunk.
  void Corrupt(const ChunkId& id) {
    std::lock_guard lock(mu_);
    chunks_[id][0] ^= 0x5a;
  }
  void set_delay(std::chrono::microseconds d) { delay_us_ = d.count(); }
  int reads() const { return reads_.load(); }

  Status ReadChunk(const ChunkRef& ref, void* dst) override {
    ++reads_;
    if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_.load()));
    std::string bytes;
    {
      std::lock_guard lock(mu_);
      auto it = chunks_.find(ref.id);
      if (it == chunks_.end()) return Status::NotFound(fmt::format("chunk {} not stored", ref.id.ToHex()));
      bytes = it->second;
    }
    if (bytes.size() != ref.size)
      return Status::Corruption(fmt::format("chunk {}: wrong size", ref.id.ToHex()));
    std::memcpy(dst, bytes.data(), bytes.size());
    if (verify_ && ChunkId::Of(dst, ref.size) != ref.id) {
      return Status::Corruption(fmt::format("chunk {}: checksum mismatch", ref.id.ToHex()));
    }
    return Status::Ok();
  }

 private:
  bool verify_;
  std::mutex mu_;
  std::unordered_map<ChunkId, std::string, ChunkIdHash> chunks_;
  std::atomic<int> reads_{0};
  std::atomic<long long> delay_us_{0};
};

// mmap underneath; remembers how much is live and the last range handed out.
class CountingAllocator : public PinnedAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    Result<void*> p = inner_.Allocate(bytes);
    if (p.ok()) {
      live_ += bytes;
      peak_ = std::max<uint64_t>(peak_, live_);
      last_base_ = static_cast<uint8_t*>(*p);
      last_size_ = bytes;
    }
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    live_ -= bytes;
    inner_.Free(ptr, bytes);
  }
  const char* name() const override { return "counting"; }
  bool InLast(const void* p) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= last_base_ && b < last_base_ + last_size_;
  }
  uint64_t live() const { return live_; }
  uint64_t peak() const { return peak_; }

 private:
  MmapAllocator inner_;
  std::atomic<uint64_t> live_{0};
  std::atomic<uint64_t> peak_{0};
  uint8_t* last_base_ = nullptr;
  size_t last_size_ = 0;
};

inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A manifest of buffers with the given sizes and first-touch ranks, their bytes random and
// split into `chunk` bytes, stored in `source`. `contents` receives each buffer's bytes.
inline Manifest MakeManifest(MemoryChunkSource& source, const std::vector<size_t>& sizes,
                             const std::vector<int>& ranks, size_t chunk, std::vector<std::string>* contents,
                             uint32_t seed = 1) {
  Manifest m;
  m.function = "fn";
  m.version = 3;
  m.chunk_bytes = static_cast<uint32_t>(chunk);
  contents->clear();
  for (size_t b = 0; b < sizes.size(); ++b) {
    std::string bytes = RandomBytes(sizes[b], seed * 1000 + static_cast<uint32_t>(b));
    Buffer& buffer = m.buffers.emplace_back();
    buffer.device_address = 0x7f0000000000ull + b * 0x10000000ull;
    buffer.size = bytes.size();
    buffer.first_touch_rank = ranks[b];
    buffer.label = fmt::format("b{}", b);
    for (size_t off = 0; off < bytes.size(); off += chunk)
      buffer.chunks.push_back(source.Put(bytes.substr(off, chunk)));
    contents->push_back(std::move(bytes));
  }
  return m;
}

}  // namespace phos::store::testing
