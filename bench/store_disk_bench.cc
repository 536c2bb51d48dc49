// Disk tier of the snapshot store: is reading a snapshot as fast as reading the same bytes from a
// plain file, does sharing chunks cost no space, and what do chunk size and zstd change?
//
// In one run: (1) sequential O_DIRECT reads of a plain file at several request sizes (the chunk
// size default comes from this); (2) a 2 GiB snapshot read chunk by chunk through Store::ReadChunk
// (O_DIRECT, every chunk hashed and checked) against the same bytes read from a plain file with
// O_DIRECT at the same request size, page cache dropped before each pass (target >= 85%);
// (3) two snapshots sharing 90% of their chunks against one (target <= 1.15x); (4) zstd on
// Gaussian fp32 and fp16 weights. Results go to docs/benchmarks.md (section store_disk).
//
// Usage: store_disk_bench [--dir DIR] [--gib N] [--report PATH] [--no-report]
//   DIR (default /work/tmp-store-bench) must be on a real disk: tmpfs has no O_DIRECT.
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "incompressible.h"
#include "phos/store/aligned_buffer.h"
#include "phos/store/reader.h"
#include "phos/store/store.h"
#include "report.h"

namespace {

using phos::store::AlignedBuffer;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  fmt::print(stderr, "store_disk_bench: {}\n", what);
  std::exit(2);
}

void Check(const phos::Status& s, const char* what) {
  if (!s.ok()) Die(fmt::format("{}: {}", what, s.ToString()));
}

constexpr auto Fill = phos::bench::FillIncompressible;

void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void DropStoreCache(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir + "/segments")) DropCache(e.path().string());
}

void WriteRawFile(const std::string& path, uint64_t bytes, uint64_t seed) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("create " + path);
  std::vector<char> block(8 << 20);
  for (uint64_t off = 0; off < bytes; off += block.size()) {
    size_t n = std::min<uint64_t>(block.size(), bytes - off);
    Fill(seed, off, block.data(), n);
    if (::pwrite(fd, block.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) Die("write " + path);
  }
  ::fsync(fd);
  ::close(fd);
}

// GB/s of sequential O_DIRECT reads of `path` in requests of `request` bytes.
double RawRead(const std::string& path, uint64_t bytes, size_t request, AlignedBuffer& buf) {
  DropCache(path);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) Die("O_DIRECT open " + path + " (tmpfs? pass --dir on a disk)");
  auto t = Clock::now();
  for (uint64_t off = 0; off < bytes; off += request) {
    size_t n = std::min<uint64_t>(request, bytes - off);
    if (::pread(fd, buf.data(), AlignedBuffer::RoundUp(n), static_cast<off_t>(off)) < static_cast<ssize_t>(n)) {
      Die("read " + path);
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - t).count();
  ::close(fd);
  return static_cast<double>(bytes) / s / 1e9;
}

double StoreRead(phos::store::Store& store, const phos::store::Manifest& m, AlignedBuffer& buf) {
  DropStoreCache(store.options().path);
  uint64_t bytes = 0;
  auto t = Clock::now();
  for (const phos::store::Buffer& b : m.buffers) {
    for (const phos::store::ChunkRef& c : b.chunks) {
      Check(store.ReadChunk(c, buf.data()), "read chunk");
      bytes += c.size;
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - t).count();
  return static_cast<double>(bytes) / s / 1e9;
}

// The restore path's read: SnapshotReader over the store with two I/O threads, so that one
// chunk's hash check overlaps the next chunk's read.
double ReaderRead(phos::store::Store& store, const phos::store::Manifest& m) {
  DropStoreCache(store.options().path);
  auto pool = phos::store::ReaderPool::Create({.io_threads = 2}).value();
  std::atomic<uint64_t> bytes{0};
  auto t = Clock::now();
  auto reader = phos::store::SnapshotReader::Start(pool.get(), m, &store, {.snapshot_name = "big"},
                                                   [&](const phos::store::ChunkDelivery& d) {
                                                     bytes += d.size;
                                                     return phos::Status::Ok();
                                                   })
                    .value();
  Check(reader->Wait(), "reader");
  double s = std::chrono::duration<double>(Clock::now() - t).count();
  return static_cast<double>(bytes.load()) / s / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// zstd ratio (stored/raw) and compression GB/s on `count` Gaussian weights (sigma 0.02, as
// initialised transformer weights) in fp32 or fp16, chunk by chunk.
std::pair<double, double> ZstdOnWeights(bool fp16, size_t count, int level, size_t chunk) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<char> data(count * (fp16 ? 2 : 4));
  for (size_t i = 0; i < count; ++i) {
    float f = normal(rng);
    if (fp16) {
      _Float16 h = static_cast<_Float16>(f);
      std::memcpy(data.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(data.data() + 4 * i, &f, 4);
    }
  }
  std::vector<char> out(ZSTD_compressBound(chunk));
  size_t stored = 0;
  auto t = Clock::now();
  for (size_t off = 0; off < data.size(); off += chunk) {
    size_t n = std::min(chunk, data.size() - off);
    stored += ZSTD_compress(out.data(), out.size(), data.data() + off, n, level);
  }
  double s = std::chrono::duration<double>(Clock::now() - t).count();
  return {static_cast<double>(stored) / static_cast<double>(data.size()), static_cast<double>(data.size()) / s / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/work/tmp-store-bench";
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
  uint64_t gib = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--gib" && i + 1 < argc) {
      gib = std::stoull(argv[++i]);
    } else if (a == "--report" && i + 1 < argc) {
      report = argv[++i];
    } else if (a == "--no-report") {
      report.clear();
    } else {
      fmt::print(stderr, "usage: {} [--dir DIR] [--gib N] [--report PATH] [--no-report]\n", argv[0]);
      return 2;
    }
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const uint64_t total = gib << 30;
  const size_t kChunk = 4 << 20;
  auto buf = AlignedBuffer::Allocate(16 << 20).value();
  std::string raw = dir + "/raw.bin";

  // (1) request size sweep on a plain file.
  WriteRawFile(raw, total, 1);
  std::string sweep;
  for (size_t request : {256u << 10, 1u << 20, 4u << 20, 16u << 20}) {
    double gbps = RawRead(raw, std::min<uint64_t>(total, 1ull << 30), request, buf);
    sweep += fmt::format("| {} KiB | {:.2f} |\n", request >> 10, gbps);
    fmt::print("raw O_DIRECT sequential, {} KiB requests: {:.2f} GB/s\n", request >> 10, gbps);
  }

  // (2) the same bytes as a snapshot.
  phos::store::StoreOptions options;
  options.path = dir + "/store";
  options.chunk_bytes = kChunk;
  auto store = phos::store::Store::Open(options).value();
  auto commit = [&](const std::string& function, uint64_t bytes, auto fill) {
    auto w = store->NewWriter(function).value();
    phos::store::Buffer meta;
    meta.size = bytes;
    Check(w->AddBuffer(meta, [&](uint64_t off, void* dst, size_t n) {
            fill(off, dst, n);
            return phos::Status::Ok();
          }).status(),
          "add buffer");
    return store->Commit(std::move(w)).value();
  };
  auto t = Clock::now();
  commit("big", total, [](uint64_t off, void* dst, size_t n) { Fill(1, off, dst, n); });
  double commit_s = std::chrono::duration<double>(Clock::now() - t).count();
  auto manifest = store->LoadManifest("big", 1).value();
  std::vector<double> store_runs, reader_runs, raw_runs;
  for (int rep = 0; rep < 3; ++rep) {
    store_runs.push_back(StoreRead(*store, manifest, buf));
    reader_runs.push_back(ReaderRead(*store, manifest));
    raw_runs.push_back(RawRead(raw, total, kChunk, buf));
  }
  double store_gbps = Median(store_runs), reader_gbps = Median(reader_runs), raw_gbps = Median(raw_runs);
  fmt::print("{} GiB snapshot: store {:.2f} GB/s (one read at a time), reader {:.2f} GB/s (2 I/O threads), raw "
             "{:.2f} GB/s; ratios {:.3f} / {:.3f}; commit {:.2f} GB/s\n",
             gib, store_gbps, reader_gbps, raw_gbps, store_gbps / raw_gbps, reader_gbps / raw_gbps,
             static_cast<double>(total) / commit_s / 1e9);
  Check(store->DeleteVersion("big", 1), "delete");
  Check(store->CollectGarbage().status(), "gc");
  std::filesystem::remove(raw);

  // (3) two snapshots sharing 90% of their chunks.
  const uint64_t kShared = 256ull << 20;
  commit("a", kShared, [](uint64_t off, void* dst, size_t n) { Fill(5, off, dst, n); });
  uint64_t one = store->Stats()->segment_bytes;
  commit("b", kShared, [&](uint64_t off, void* dst, size_t n) { Fill(off >= kShared / 10 * 9 ? 6 : 5, off, dst, n); });
  auto both = store->Stats().value();
  double space = static_cast<double>(both.segment_bytes) / static_cast<double>(one);
  fmt::print("two snapshots sharing 90%: {:.3f}x the space of one (dedup ratio {:.2f})\n", space, both.dedup_ratio);

  // (4) zstd on weights.
  std::string zstd_rows;
  for (bool fp16 : {false, true}) {
    for (int level : {1, 3}) {
      auto [ratio, gbps] = ZstdOnWeights(fp16, 16u << 20, level, kChunk);
      zstd_rows += fmt::format("| {} | {} | {:.3f} | {:.2f} |\n", fp16 ? "fp16" : "fp32", level, ratio, gbps);
      fmt::print("zstd level {} on Gaussian {}: stored/raw {:.3f}, {:.2f} GB/s\n", level, fp16 ? "fp16" : "fp32",
                 ratio, gbps);
    }
  }
  store.reset();
  std::filesystem::remove_all(dir);

  if (!report.empty()) {
    std::string md = fmt::format(
        "## Snapshot store: disk tier\n\nMeasured {} (`{}`). Page cache dropped (`posix_fadvise(DONTNEED)`) before every "
        "pass; plain-file reads are O_DIRECT, one request at a time.\n\n"
        "| request size | plain file GB/s |\n|---|---|\n{}\n"
        "| what | result | target |\n|---|---|---|\n"
        "| {} GiB snapshot via Store::ReadChunk, one chunk at a time (4 MiB, hash-checked), median of 3 | {:.2f} GB/s | |\n"
        "| same snapshot via SnapshotReader (the restore path: 2 I/O threads), median of 3 | {:.2f} GB/s | |\n"
        "| same bytes, plain file, 4 MiB O_DIRECT reads, median of 3 | {:.2f} GB/s | |\n"
        "| Store::ReadChunk / plain file | {:.3f} | |\n"
        "| SnapshotReader / plain file | {:.3f} | >= 0.85 |\n"
        "| commit (write + fsync + index) | {:.2f} GB/s | |\n"
        "| two 256 MiB snapshots sharing 90% of chunks / one | {:.3f}x | <= 1.15x |\n\n"
        "zstd per 4 MiB chunk on Gaussian weights (sigma 0.02):\n\n"
        "| dtype | level | stored / raw | compress GB/s (1 core) |\n|---|---|---|---|\n{}",
        phos::bench::NowUtc(), phos::bench::CommandLine(argc, argv), sweep, gib, store_gbps, reader_gbps, raw_gbps,
        store_gbps / raw_gbps, reader_gbps / raw_gbps, static_cast<double>(total) / commit_s / 1e9, space,
        zstd_rows);
    if (phos::bench::WriteSection(report, "store_disk", md)) fmt::print("results written to {}\n", report);
  }
  return 0;
}
