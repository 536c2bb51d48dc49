// The remote snapshot tier (docs/deploy.md, "A phos cluster"): how a restore fed from a bucket
// compares with one fed from the node's own disk and DRAM tiers, in two parts.
//
// Part 1, the store: one snapshot of N MiB of incompressible bytes (8 buffers, 4 MiB chunks, each
// buffer with a first-touch rank) committed to a store on disk and uploaded to a bucket of a
// loopback s3rver (SnapshotUploader). Then, median of --reps runs each: the snapshot imported into
// a fresh empty store (ImportFromBucket) with 1, 4, 8 and 16 requests in flight; its chunks only
// fetched into memory the same way (the bucket's share of an import); read back from the disk
// tier in first-touch order (Store::ReadChunk with O_DIRECT, and the restore's SnapshotReader);
// read from a DRAM tier holding it pinned. Each path reports the time to its first chunk (what a
// restore waits for before it can copy anything) and its effective rate. The stores live under
// --dir, which must be on a disk for O_DIRECT (tmpfs has none; the report says so).
//
// Part 2, the cluster: an etcd, an s3rver and two phosd (A, B) on loopback; mlp of M MiB deployed
// on A; B's first invocation adopts it (imports its snapshots from the bucket, runs it to its entry
// point, restores), then forced cold starts on B (every chunk now local) and, for reference, on A.
// Skipped, saying why, when etcd or s3rver is not installed.
//
// Results go to docs/benchmarks.md (section remote_tier) and docs/plots/remote_tier.tsv, from
// which bench/remote_tier.gp draws docs/plots/remote_tier.svg (run here when gnuplot is found).
//
//   remote_tier_bench [--mib 512] [--reps 3] [--parallel 1,4,8,16] [--function-mib 256]
//                     [--cold-starts 5] [--parts store,cluster] [--dir /var/tmp] [--keep-logs]
//                     [--report PATH | --no-report]
// --keep-logs leaves the two phosd's data directories (and logs) in /tmp.
// Profile: PHOS_SIMGPU_PROFILE (default a100-pcie4); time scale: PHOS_SIMGPU_TIME_SCALE (default
// the profile's, 20 for a100-pcie4), as coldstart_bench. Part 1 never touches the device: its times are wall times.
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "incompressible.h"
#include "phos/base/log.h"
#include "phos/base/status.h"
#include "phos/objstore/s3.h"
#include "phos/store/aligned_buffer.h"
#include "phos/store/dram_tier.h"
#include "phos/store/manifest.h"
#include "phos/store/reader.h"
#include "phos/store/remote_chunks.h"
#include "phos/store/snapshot_uploader.h"
#include "phos/store/store.h"
#include "phosd_harness.h"
#include "remote_tier.h"
#include "report.h"
#include "s3rver.h"

namespace phos::bench {
namespace {

constexpr uint32_t kChunk = 4u << 20;  // the store's default chunk size
constexpr int kBuffers = 8;
constexpr uint64_t kSeed = 0x5eed;
constexpr const char* kFunction = "fn";
constexpr const char* kNode = "bench";


// The host's load average over the last minute (/proc/loadavg): the report says how busy the
// host was, since other work on two cores moves every number here.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  return in >> one ? one : "unknown";
}

constexpr auto Fill = phos::bench::FillIncompressible;

// A directory of our own under `base`, removed with the object.
class TempDir {
 public:
  static Result<TempDir> Make(const std::string& base, const std::string& label) {
    std::string tmpl = base + "/phos-" + label + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + tmpl);
    TempDir d;
    d.path_ = tmpl;
    return d;
  }
  TempDir() = default;
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, "")) {}
  TempDir& operator=(TempDir&& o) noexcept {
    std::swap(path_, o.path_);
    return *this;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The segment files' pages dropped from the page cache, so that a read pass meets the disk even
// where O_DIRECT falls back to buffered reads.
void DropStoreCache(const std::string& store_dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(store_dir + "/segments", ec)) {
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

bool OnTmpfs(const std::string& path) {
  struct statfs s {};
  return statfs(path.c_str(), &s) == 0 && s.f_type == 0x01021994;  // TMPFS_MAGIC
}

// One pass of one path: when its first chunk was in place, when all were, and how many bytes.
struct Pass {
  double first_s = 0;
  double total_s = 0;
  uint64_t bytes = 0;
};

// A path's passes summarised: medians of the first-chunk time and of the rate.
struct Row {
  std::string tier;  // "remote", "disk", "DRAM"
  std::string path;
  int parallel = 0;  // requests or threads in flight, for the plot's label
  double first_ms = 0;
  double mbps = 0;
  std::vector<Pass> passes;

  static Row Of(std::string tier, std::string path, int parallel, const std::vector<Pass>& passes) {
    Row r{.tier = std::move(tier), .path = std::move(path), .parallel = parallel, .passes = passes};
    std::vector<double> first, rate;
    for (const Pass& p : passes) {
      first.push_back(p.first_s * 1e3);
      rate.push_back(static_cast<double>(p.bytes) / p.total_s / 1e6);
    }
    r.first_ms = Median(first);
    r.mbps = Median(rate);
    return r;
  }
};

struct StoreResult {
  bool ran = false;
  std::string skipped;  // why the remote rows are missing, when they are
  uint64_t bytes = 0;
  int chunks = 0;
  double upload_s = 0;
  uint64_t upload_bytes = 0;
  double pin_mbps = 0;
  bool tmpfs = false;
  std::vector<Row> rows;
};

// Where each buffer of the snapshot lands in the destination: one after another, page-aligned so
// that direct reads go straight into place.
std::vector<uint64_t> BufferBases(const store::Manifest& m) {
  std::vector<uint64_t> base;
  uint64_t at = 0;
  for (const store::Buffer& b : m.buffers) {
    base.push_back(at);
    at += store::AlignedBuffer::RoundUp(b.size);
  }
  base.push_back(at);
  return base;
}

// The destination holds the snapshot's bytes after a pass: every buffer compared with what was
// written.
Status CheckDestination(const store::Manifest& m, const std::vector<uint64_t>& base, const uint8_t* dst,
                        const std::vector<uint64_t>& written_at) {
  std::vector<uint8_t> expected(kChunk);
  for (size_t b = 0; b < m.buffers.size(); ++b) {
    for (uint64_t off = 0; off < m.buffers[b].size; off += kChunk) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, m.buffers[b].size - off));
      Fill(kSeed, written_at[b] + off, expected.data(), n);
      if (std::memcmp(dst + base[b] + off, expected.data(), n) != 0) {
        return Status::Internal(fmt::format("buffer {} differs from the snapshot at offset {}", b, off));
      }
    }
  }
  return Status::Ok();
}

class StoreBench {
 public:
  explicit StoreBench(const Options& o) : o_(o) {}

  Result<StoreResult> Run() {
    StoreResult r;
    r.ran = true;
    PHOS_ASSIGN_OR_RETURN(TempDir source_dir, TempDir::Make(o_.dir, "remote-tier-source"));
    r.tmpfs = OnTmpfs(source_dir.path());
    if (r.tmpfs) {
      std::printf("warning: %s is tmpfs: the disk tier reads through the page cache (no O_DIRECT); pass --dir on a disk\n",
                  o_.dir.c_str());
    }
    PHOS_ASSIGN_OR_RETURN(auto source, store::Store::Open({.path = source_dir.path() + "/store", .chunk_bytes = kChunk}));
    PHOS_RETURN_IF_ERROR(WriteSnapshot(*source));
    r.bytes = bytes_;
    r.chunks = static_cast<int>(store::ChunksOf(manifest_).size());
    std::printf("snapshot: %d buffers, %d chunks of %u MiB, %.1f MiB\n", kBuffers, r.chunks, kChunk >> 20,
                static_cast<double>(bytes_) / (1 << 20));
    PHOS_ASSIGN_OR_RETURN(dst_, store::AlignedBuffer::Allocate(bases_.back()));
    std::memset(dst_.data(), 0, dst_.size());

    // The remote tier first: its s3rver and bucket gone before the local passes run.
    {
      testing::S3rver s3;
      std::string why = s3.Start("phos-bench");
      if (!why.empty()) {
        if (why.find("not installed") == std::string::npos) return Status::Unavailable("s3rver: " + why);
        r.skipped = why;
        std::printf("remote tier skipped: %s\n", why.c_str());
      } else {
        PHOS_RETURN_IF_ERROR(Remote(*source, s3, &r));
      }
    }
    PHOS_RETURN_IF_ERROR(Disk(*source, source_dir.path() + "/store", &r));
    PHOS_RETURN_IF_ERROR(Dram(*source, &r));
    return r;
  }

 private:
  Status WriteSnapshot(store::Store& s) {
    const uint64_t total = static_cast<uint64_t>(o_.mib) << 20;
    PHOS_ASSIGN_OR_RETURN(auto writer, s.NewWriter(kFunction));
    std::vector<uint64_t> written_at;
    uint64_t at = 0;
    for (int b = 0; b < kBuffers; ++b) {
      // Whole chunks per buffer where the size allows; the last buffer takes the remainder.
      uint64_t size = b + 1 == kBuffers ? total - at : total / kBuffers / kChunk * kChunk;
      if (size == 0) size = total / kBuffers;
      store::Buffer meta;
      meta.size = size;
      meta.device_address = 0x7f0000000000ull + at;
      meta.alignment = 256;
      const uint64_t origin = at;
      PHOS_RETURN_IF_ERROR(writer
                               ->AddBuffer(meta,
                                           [origin](uint64_t off, void* dst, size_t n) {
                                             Fill(kSeed, origin + off, dst, n);
                                             return Status::Ok();
                                           })
                               .status());
      written_at.push_back(at);
      at += size;
    }
    PHOS_ASSIGN_OR_RETURN(version_, s.Commit(std::move(writer)));
    // The last buffer first, the first last: an order the manifest's own does not give, so that a
    // path reading in manifest order would show.
    std::vector<int32_t> ranks;
    for (int b = 0; b < kBuffers; ++b) ranks.push_back(kBuffers - 1 - b);
    PHOS_RETURN_IF_ERROR(s.SetFirstTouchOrder(kFunction, version_, ranks));
    PHOS_ASSIGN_OR_RETURN(manifest_, s.LoadManifest(kFunction, version_));
    bytes_ = at;
    written_at_ = written_at;
    bases_ = BufferBases(manifest_);
    order_ = store::FirstTouchOrder(manifest_);
    return Status::Ok();
  }

  Status Remote(store::Store& source, const testing::S3rver& s3, StoreResult* r) {
    objstore::S3Client bucket(s3.Options("phos-bench"));
    std::promise<Result<std::string>> uploaded;
    const Clock::time_point t = Clock::now();
    {
      store::SnapshotUploader uploader(&source, bucket, kNode);
      uploader.Enqueue(kFunction, version_, [&](Result<std::string> key) { uploaded.set_value(std::move(key)); });
      uploader.Drain();
      r->upload_bytes = uploader.stats().bytes;
    }
    r->upload_s = Seconds(t);
    PHOS_ASSIGN_OR_RETURN(std::string key, uploaded.get_future().get());
    std::printf("uploaded to %s as %s: %.1f MB in %.2f s, %.1f MB/s\n", s3.endpoint().c_str(), key.c_str(),
                static_cast<double>(r->upload_bytes) / 1e6, r->upload_s,
                static_cast<double>(r->upload_bytes) / r->upload_s / 1e6);
    for (int p : o_.parallel) {
      std::vector<Pass> passes;
      for (int rep = 0; rep < o_.reps; ++rep) {
        PHOS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make(o_.dir, "remote-tier-import"));
        PHOS_ASSIGN_OR_RETURN(auto into, store::Store::Open({.path = dir.path() + "/store", .chunk_bytes = kChunk}));
        PHOS_ASSIGN_OR_RETURN(store::ImportStats st,
                              store::ImportFromBucket(*into, bucket, key, kFunction, {.parallel = p}));
        if (st.fetched_bytes != bytes_) {
          return Status::Internal(fmt::format("import fetched {} bytes of a {}-byte snapshot", st.fetched_bytes, bytes_));
        }
        // The first pass's copy read back whole: the import stored the snapshot's bytes.
        if (rep == 0 && p == o_.parallel.front()) {
          PHOS_RETURN_IF_ERROR(into->VerifySnapshot(kFunction, st.version));
        }
        passes.push_back({.first_s = st.first_chunk_seconds, .total_s = st.seconds, .bytes = st.fetched_bytes});
        PrintPass(fmt::format("remote, {} in flight", p), rep, passes.back());
      }
      r->rows.push_back(Row::Of("remote", fmt::format("ImportFromBucket, {} in flight", p), p, passes));
    }
    // The same chunks fetched and checked but kept in memory: what the bucket alone gives, without
    // the import's writes into the node's store.
    for (int p : o_.parallel) {
      std::vector<Pass> passes;
      for (int rep = 0; rep < o_.reps; ++rep) {
        PHOS_ASSIGN_OR_RETURN(Pass pass, FetchOnly(bucket, key, p));
        passes.push_back(pass);
        PrintPass(fmt::format("remote fetch only, {} in flight", p), rep, pass);
      }
      r->rows.push_back(Row::Of("remote (fetch only)",
                                fmt::format("RemoteChunks::ReadChunk into memory, {} in flight", p), p, passes));
    }
    return Status::Ok();
  }

  // Like ImportFromBucket — the manifest fetched, then its chunks in first-touch order, `parallel`
  // workers taking the next one — each chunk checked against its id and copied to its place in the
  // destination rather than stored.
  Result<Pass> FetchOnly(const objstore::S3Client& bucket, const std::string& key, int parallel) {
    Pass p;
    const Clock::time_point t = Clock::now();
    PHOS_ASSIGN_OR_RETURN(std::string encoded, bucket.Get(key));
    PHOS_ASSIGN_OR_RETURN(store::Manifest m, store::DecodeManifest(encoded));
    struct Item {
      const store::ChunkRef* ref;
      uint8_t* dst;
    };
    std::vector<Item> items;
    for (uint32_t b : store::FirstTouchOrder(m)) {
      uint64_t off = 0;
      for (const store::ChunkRef& c : m.buffers[b].chunks) {
        items.push_back({&c, Dst() + bases_[b] + off});
        off += c.size;
      }
    }
    store::RemoteChunks chunks(bucket);
    std::mutex mu;
    size_t next = 0;
    Status failed;
    auto work = [&] {
      while (true) {
        Item item;
        {
          std::lock_guard lock(mu);
          if (!failed.ok() || next == items.size()) return;
          item = items[next++];
        }
        Status got = chunks.ReadChunk(*item.ref, item.dst);
        std::lock_guard lock(mu);
        if (!got.ok()) {
          if (failed.ok()) failed = got;
          return;
        }
        if (p.bytes == 0) p.first_s = Seconds(t);
        p.bytes += item.ref->size;
      }
    };
    std::vector<std::thread> workers;
    for (int i = 1; i < std::min<int>(parallel, static_cast<int>(items.size())); ++i) workers.emplace_back(work);
    work();
    for (std::thread& w : workers) w.join();
    PHOS_RETURN_IF_ERROR(failed);
    p.total_s = Seconds(t);
    return p;
  }

  // Store::ReadChunk one chunk at a time, and the restore's SnapshotReader (2 I/O threads), from
  // the disk with the page cache dropped before each pass; each from the manifest's load.
  Status Disk(store::Store& s, const std::string& store_dir, StoreResult* r) {
    std::vector<Pass> chunked, reader;
    PHOS_ASSIGN_OR_RETURN(auto pool, store::ReaderPool::Create({.io_threads = 2}));
    for (int rep = 0; rep < o_.reps; ++rep) {
      DropStoreCache(store_dir);
      PHOS_ASSIGN_OR_RETURN(Pass p, ReadChunks(s, s));
      chunked.push_back(p);
      PrintPass("disk, Store::ReadChunk", rep, p);
      DropStoreCache(store_dir);
      PHOS_ASSIGN_OR_RETURN(p, ReadThrough(*pool, s, &s, false));
      reader.push_back(p);
      PrintPass("disk, SnapshotReader", rep, p);
    }
    PHOS_RETURN_IF_ERROR(CheckDestination(manifest_, bases_, Dst(), written_at_));
    r->rows.push_back(Row::Of("disk", "Store::ReadChunk (O_DIRECT), one at a time", 1, chunked));
    r->rows.push_back(Row::Of("disk", "SnapshotReader, 2 I/O threads", 2, reader));
    return Status::Ok();
  }

  // A DRAM tier over the store (an mmap arena, as store_dram_bench's), the snapshot pinned first.
  Status Dram(store::Store& s, StoreResult* r) {
    const uint64_t capacity = (bytes_ + kChunk - 1) / kChunk * kChunk;
    PHOS_ASSIGN_OR_RETURN(auto tier, store::DramTier::Create({.capacity_bytes = capacity, .slot_bytes = kChunk},
                                                             std::make_unique<store::MmapAllocator>(), &s));
    const Clock::time_point t = Clock::now();
    PHOS_RETURN_IF_ERROR(tier->Pin("bench", store::SnapshotChunks(manifest_)));
    r->pin_mbps = static_cast<double>(bytes_) / Seconds(t) / 1e6;
    std::printf("DRAM tier: pinned at %.1f MB/s (from the disk tier, each chunk verified)\n", r->pin_mbps);
    std::vector<Pass> chunked, reader;
    PHOS_ASSIGN_OR_RETURN(auto pool, store::ReaderPool::Create({.io_threads = 2}));
    for (int rep = 0; rep < o_.reps; ++rep) {
      std::memset(dst_.data(), 0, dst_.size());
      PHOS_ASSIGN_OR_RETURN(Pass p, ReadChunks(s, *tier));
      chunked.push_back(p);
      PrintPass("DRAM, DramTier::ReadChunk", rep, p);
      PHOS_ASSIGN_OR_RETURN(p, ReadThrough(*pool, s, tier.get(), true));
      reader.push_back(p);
      PrintPass("DRAM, SnapshotReader zero-copy", rep, p);
    }
    PHOS_RETURN_IF_ERROR(CheckDestination(manifest_, bases_, Dst(), written_at_));
    r->rows.push_back(Row::Of("DRAM", "DramTier::ReadChunk, one at a time", 1, chunked));
    r->rows.push_back(Row::Of("DRAM", "SnapshotReader zero-copy, 2 I/O threads", 2, reader));
    return Status::Ok();
  }

  // Every chunk of `source` into its place, in first-touch order, one at a time; timed from the
  // manifest's load from `manifests` (the store: a DRAM tier holds only chunks).
  Result<Pass> ReadChunks(store::Store& manifests, store::ChunkSource& source) {
    Pass p;
    const Clock::time_point t = Clock::now();
    PHOS_ASSIGN_OR_RETURN(store::Manifest m, manifests.LoadManifest(kFunction, version_));
    for (uint32_t b : order_) {
      uint64_t off = 0;
      for (const store::ChunkRef& c : m.buffers[b].chunks) {
        PHOS_RETURN_IF_ERROR(source.ReadChunk(c, Dst() + bases_[b] + off));
        if (p.bytes == 0) p.first_s = Seconds(t);
        off += c.size;
        p.bytes += c.size;
      }
    }
    p.total_s = Seconds(t);
    return p;
  }

  // The restore's reader over `source`, each delivery copied to its place.
  Result<Pass> ReadThrough(store::ReaderPool& pool, store::Store& manifests, store::ChunkSource* source,
                           bool zero_copy) {
    Pass p;
    std::atomic<bool> first{false};
    std::atomic<uint64_t> bytes{0};
    const Clock::time_point t = Clock::now();
    PHOS_ASSIGN_OR_RETURN(store::Manifest m, manifests.LoadManifest(kFunction, version_));
    PHOS_ASSIGN_OR_RETURN(auto reader,
                          store::SnapshotReader::Start(&pool, m, source, {.zero_copy = zero_copy},
                                                       [&](const store::ChunkDelivery& d) {
                                                         std::memcpy(Dst() + bases_[d.buffer_index] + d.offset,
                                                                     d.data, d.size);
                                                         if (!first.exchange(true)) p.first_s = Seconds(t);
                                                         bytes += d.size;
                                                         return Status::Ok();
                                                       }));
    PHOS_RETURN_IF_ERROR(reader->Wait());
    p.total_s = Seconds(t);
    p.bytes = bytes.load();
    return p;
  }

  static void PrintPass(const std::string& what, int rep, const Pass& p) {
    std::printf("  %-36s rep %d: first chunk %8.2f ms, %9.1f MB/s\n", what.c_str(), rep + 1, p.first_s * 1e3,
                static_cast<double>(p.bytes) / p.total_s / 1e6);
    std::fflush(stdout);
  }

  uint8_t* Dst() { return static_cast<uint8_t*>(dst_.data()); }

  const Options& o_;
  uint64_t version_ = 0;
  uint64_t bytes_ = 0;
  store::Manifest manifest_;
  std::vector<uint64_t> written_at_, bases_;
  std::vector<uint32_t> order_;
  store::AlignedBuffer dst_;
};

// ---- the report ----

std::string StoreMarkdown(const StoreResult& s, const Options& o) {
  if (!s.ran) return "Part 1 (the store) was not run.\n\n";
  std::string md = fmt::format(
      "**Store level.** One snapshot of {} MiB of incompressible bytes ({} buffers, {} chunks of {} MiB, each "
      "buffer given a first-touch rank), median of {} passes per row; wall times (nothing here touches the "
      "device). *First chunk*: from the manifest's request to the first chunk the restore wants in place — for "
      "the remote tier, `ImportStats::first_chunk_seconds` (manifest GET, the store's lookup of what it lacks, one "
      "chunk fetched, checked against its id and written with fsync into the node's store); for the disk and DRAM "
      "tiers, the manifest loaded from the store and the first chunk (in first-touch order) copied to its place. "
      "*Effective rate*: the snapshot's bytes over the whole pass — for the remote tier, "
      "`fetched_bytes / seconds` of `ImportFromBucket` into a fresh empty store on disk (every chunk fetched, "
      "checked and fsynced, then the manifest committed), with N chunk requests in flight (its first chunk is then the first of N concurrent requests to complete, "
      "all of them sharing the bucket's bandwidth); *fetch only*, the same chunks fetched by N workers in the same order and "
      "checked against their ids, but copied to their place in memory instead of stored (what the bucket alone "
      "gives); for the disk tier, "
      "every chunk read with O_DIRECT (page cache dropped before each pass) one at a time (`Store::ReadChunk`) "
      "or through the restore's `SnapshotReader` (2 I/O threads); for the DRAM tier, the snapshot pinned in a "
      "DRAM tier first (an mmap arena), then read out of it the same two ways. The bucket is an s3rver on "
      "loopback: no network between the node and the bucket, only HTTP, SigV4 and s3rver's own file "
      "system.{}\n\n",
      o.mib, kBuffers, s.chunks, kChunk >> 20, o.reps,
      s.tmpfs ? " **The store's directory was tmpfs: disk-tier reads went through the page cache.**" : "");
  if (!s.skipped.empty()) md += fmt::format("Remote tier not measured: {}.\n\n", s.skipped);
  md += "| tier | path | first chunk (ms) | effective rate (MB/s) |\n|---|---|---|---|\n";
  for (const Row& r : s.rows) md += fmt::format("| {} | {} | {:.2f} | {:.1f} |\n", r.tier, r.path, r.first_ms, r.mbps);
  if (s.upload_s > 0) {
    md += fmt::format(
        "\nUpload (`SnapshotUploader`, one chunk at a time, each after an existence check): {:.1f} MB in {:.2f} s, "
        "{:.1f} MB/s. Pinning into the DRAM tier (each chunk read from the disk tier into arena pages touched for "
        "the first time, checked by the store and again by the tier): {:.1f} MB/s.\n",
        static_cast<double>(s.upload_bytes) / 1e6, s.upload_s, static_cast<double>(s.upload_bytes) / s.upload_s / 1e6,
        s.pin_mbps);
  } else {
    md += fmt::format(
        "\nPinning into the DRAM tier (each chunk read from the disk tier into arena pages touched for the first "
        "time, checked by the store and again by the tier): {:.1f} MB/s.\n",
        s.pin_mbps);
  }
  const Row* disk = nullptr;
  const Row* dram = nullptr;
  for (const Row& r : s.rows) {
    if (r.tier == "disk" && disk == nullptr) disk = &r;
    if (r.tier == "DRAM" && dram == nullptr) dram = &r;
  }
  std::string ratios;
  for (const Row& r : s.rows) {
    if (r.tier != "remote" || disk == nullptr || dram == nullptr) continue;
    ratios += fmt::format("| {} | {:.3f} | {:.4f} | {:.1f}x | {:.1f}x |\n", r.parallel, r.mbps / disk->mbps,
                          r.mbps / dram->mbps, r.first_ms / disk->first_ms, r.first_ms / dram->first_ms);
  }
  if (!ratios.empty()) {
    md += "\nThe remote tier against the local ones (one chunk at a time: `Store::ReadChunk` and "
          "`DramTier::ReadChunk`):\n\n"
          "| requests in flight | rate remote / disk | rate remote / DRAM | first chunk remote / disk | first chunk "
          "remote / DRAM |\n|---|---|---|---|---|\n" +
          ratios;
  }
  return md + "\n";
}


// The plot's table: one row per store-level path, its effective rate and first-chunk time.
bool WritePlotTable(const StoreResult& s, const std::string& path) {
  std::ofstream out(path);
  // The last column groups the rows by tier, for the bars' colours: 1 import, 2 fetch only,
  // 3 disk, 4 DRAM.
  out << "path\teffective rate (MB/s)\tfirst chunk (ms)\ttier\n";
  for (const Row& r : s.rows) {
    const bool reader = r.path.starts_with("SnapshotReader");
    std::string label = r.tier == "remote"             ? fmt::format("import, {} in flight", r.parallel)
                        : r.tier.starts_with("remote") ? fmt::format("fetch only, {} in flight", r.parallel)
                                                       : r.tier + (reader ? ", SnapshotReader" : ", ReadChunk");
    const int group = r.tier == "remote" ? 1 : r.tier.starts_with("remote") ? 2 : r.tier == "disk" ? 3 : 4;
    out << fmt::format("{}\t{:.3f}\t{:.4f}\t{}\n", label, r.mbps, r.first_ms, group);
  }
  if (!out) std::fprintf(stderr, "remote_tier_bench: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

Result<Options> ParseOptions(int argc, char** argv) {
  Options o;
  auto one = [&](int& i, int* out) { return ParsePositiveFlag(argc, argv, &i, out); };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mib") {
      PHOS_RETURN_IF_ERROR(one(i, &o.mib));
    } else if (a == "--reps") {
      PHOS_RETURN_IF_ERROR(one(i, &o.reps));
    } else if (a == "--function-mib") {
      PHOS_RETURN_IF_ERROR(one(i, &o.function_mib));
    } else if (a == "--cold-starts") {
      PHOS_RETURN_IF_ERROR(one(i, &o.cold_starts));
    } else if (a == "--parallel" && i + 1 < argc) {
      PHOS_ASSIGN_OR_RETURN(o.parallel, ParsePositiveList(a, argv[++i]));
      for (int p : o.parallel) {
        if (p > 64) return Status::InvalidArgument("--parallel: at most 64 requests in flight");
      }
    } else if (a == "--parts" && i + 1 < argc) {
      const std::string parts = argv[++i];
      o.store_part = o.cluster_part = false;
      std::stringstream list(parts);
      for (std::string part; std::getline(list, part, ',');) {
        if (part == "store") o.store_part = true;
        else if (part == "cluster") o.cluster_part = true;
        else return Status::InvalidArgument("--parts: store and/or cluster, separated by a comma, not '" + parts + "'");
      }
    } else if (a == "--dir" && i + 1 < argc) {
      o.dir = argv[++i];
    } else if (a == "--keep-logs") {
      o.keep_logs = true;
    } else if (a == "--report" && i + 1 < argc) {
      o.report = argv[++i];
    } else if (a == "--no-report") {
      o.report.clear();
    } else {
      return Status::InvalidArgument(
          "usage: remote_tier_bench [--mib 512] [--reps 3] [--parallel 1,4,8,16] [--function-mib 256] "
          "[--cold-starts 5] [--parts store,cluster] [--dir /var/tmp] [--keep-logs] [--report PATH | --no-report]");
    }
  }
  if (o.mib < kBuffers) return Status::InvalidArgument(fmt::format("--mib: at least {}", kBuffers));
  return o;
}

int Main(int argc, char** argv) {
  Result<Options> parsed = ParseOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "remote_tier_bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Options& o = *parsed;
  // The store's informational lines (one per store opened and per import) would drown the
  // results; the phosd started here keep their own level.
  log::Configure(log::Level::Warn, "");
  // Progress lines as they happen, also when the output goes to a file.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // phosd inherits the environment: both read the same profile and time scale.
  Result<SimDevice> device = OpenSimDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "remote_tier_bench: %s\n", device.status().message().c_str());
    return 1;
  }
  const PhosSimConfig& config = device->config;
  std::printf("remote tier bench: profile %s, time scale %g\n", config.profile, config.time_scale);

  const std::string load_before = LoadAverage();
  StoreResult store_result;
  Status status = Status::Ok();
  if (o.store_part) {
    std::printf("\n== part 1: the store (%d MiB snapshot, %d passes per path)\n", o.mib, o.reps);
    Result<StoreResult> r = StoreBench(o).Run();
    if (r.ok()) store_result = std::move(*r);
    else status = r.status().WithContext("store part");
  }
  ClusterResult cluster_result;
  if (status.ok() && o.cluster_part) {
    std::printf("\n== part 2: the cluster (mlp %d MiB, %d forced cold starts per node)\n", o.function_mib,
                o.cold_starts);
    Result<ClusterResult> r = RunClusterPart(o, config.time_scale);
    if (r.ok()) cluster_result = std::move(*r);
    else status = r.status().WithContext("cluster part");
  }
  if (!status.ok()) {
    std::fprintf(stderr, "remote_tier_bench: %s\n", status.ToString().c_str());
    return 1;
  }

  std::string md = fmt::format(
      "## Remote snapshot tier: restore from a bucket vs the disk and DRAM tiers\n\n"
      "Command: `{}` — {}; profile {}, time scale {} (part 2 only: part 1 does not use the device). "
      "Host: {} cores, load average (1 min) {} at the start, {} at the end.\n\n",
      CommandLine(argc, argv), NowUtc(), config.profile, config.time_scale, std::thread::hardware_concurrency(),
      load_before, LoadAverage());
  md += StoreMarkdown(store_result, o);
  const bool plotted = store_result.ran && !store_result.rows.empty();
  if (plotted) {
    md += "![effective rate and first chunk per tier](plots/remote_tier.svg) (`gnuplot bench/remote_tier.gp`, from "
          "`plots/remote_tier.tsv`)\n\n";
  }
  md += ClusterMarkdown(cluster_result, o, config.time_scale);
  std::printf("\n%s", md.c_str());
  if (!o.report.empty()) {
    if (WriteSection(o.report, "remote_tier", md)) std::printf("results written to %s\n", o.report.c_str());
    if (plotted) {
      const std::filesystem::path plots = std::filesystem::path(o.report).parent_path() / "plots";
      std::error_code ec;
      std::filesystem::create_directories(plots, ec);
      if (WritePlotTable(store_result, (plots / "remote_tier.tsv").string())) {
        // The svg redrawn at once when gnuplot is there; otherwise the section names the command.
        Result<std::string> drawn =
            Run({"/usr/bin/env", "gnuplot", "-e", fmt::format("dir='{}'", plots.string()),
                 PHOS_SOURCE_DIR "/bench/remote_tier.gp"});
        std::printf("%s\n", drawn.ok() ? ("plot drawn: " + (plots / "remote_tier.svg").string()).c_str()
                                       : ("plot not drawn: " + drawn.status().message()).c_str());
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace phos::bench

int main(int argc, char** argv) { return phos::bench::Main(argc, argv); }
