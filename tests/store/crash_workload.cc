#include "crash_workload.h"

#include <random>
#include <vector>

#include <fmt/format.h>

#include "phos/store/aligned_buffer.h"
#include "store_test_util.h"

namespace phos::store::testing {

namespace {

// A buffer's bytes: 1-3 chunks from a small pool of contents (so snapshots share chunks), plus
// a partial chunk; the label records how to rebuild them.
std::vector<char> BufferBytes(uint64_t pool_a, uint64_t pool_b, uint64_t tail) {
  std::vector<char> out = Bytes(kCrashChunkBytes, pool_a);
  auto b = Bytes(kCrashChunkBytes, pool_b);
  out.insert(out.end(), b.begin(), b.end());
  auto t = Bytes(tail, pool_a * 31 + pool_b);
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

}  // namespace

StoreOptions CrashStoreOptions(const std::string& dir) {
  StoreOptions options;
  options.path = dir;
  options.chunk_bytes = kCrashChunkBytes;
  options.keep_versions = 3;
  options.compact_below_live_fraction = 0.7;
  return options;
}

int RunCrashWriter(const std::string& dir, uint64_t seed) {
  auto store = Store::Open(CrashStoreOptions(dir));
  if (!store.ok()) {
    std::fprintf(stderr, "crash writer: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::mt19937_64 rng(seed);
  for (;;) {
    std::string function = fmt::format("f{}", rng() % 3);
    int op = static_cast<int>(rng() % 10);
    Status s;
    if (op < 6) {
      auto w = (*store)->NewWriter(function);
      if (!w.ok()) return 1;
      int buffers = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < buffers; ++i) {
        uint64_t a = rng() % 8, b = rng() % 8, tail = rng() % kCrashChunkBytes;
        auto bytes = BufferBytes(a, b, tail);
        Buffer meta;
        meta.device_address = 0x100000ull * (i + 1);
        meta.size = bytes.size();
        meta.label = fmt::format("{} {} {}", a, b, tail);
        s = (*w)->AddBuffer(meta, bytes.data()).status();
        if (!s.ok()) break;
      }
      (*w)->manifest().cpu_state.location = fmt::format("buffers={}", buffers);
      if (s.ok()) s = (*store)->Commit(std::move(*w)).status();
      // One line per commit on standard output: how the harness knows the writer is under way.
      if (s.ok()) {
        std::fputs("committed\n", stdout);
        std::fflush(stdout);
      }
    } else if (op < 8) {
      auto versions = (*store)->ListVersions(function);
      if (versions.ok() && !versions->empty()) s = (*store)->DeleteVersion(function, versions->front());
    } else if (op < 9) {
      s = (*store)->CollectGarbage().status();
    } else {
      s = (*store)->CompactSegments().status();
    }
    if (!s.ok()) {
      std::fprintf(stderr, "crash writer: %s\n", s.ToString().c_str());
      return 1;
    }
  }
}

Status CheckCrashStore(const std::string& dir, int* snapshots) {
  *snapshots = 0;
  PHOS_ASSIGN_OR_RETURN(auto store, Store::Open(CrashStoreOptions(dir)));
  PHOS_RETURN_IF_ERROR(store->CheckConsistency());
  PHOS_ASSIGN_OR_RETURN(auto functions, store->ListFunctions());
  for (const auto& f : functions) {
    PHOS_ASSIGN_OR_RETURN(auto versions, store->ListVersions(f));
    for (uint64_t v : versions) {
      ++*snapshots;
      PHOS_RETURN_IF_ERROR(store->VerifySnapshot(f, v));
      PHOS_ASSIGN_OR_RETURN(Manifest m, store->LoadManifest(f, v));
      std::string what = fmt::format("snapshot '{}' v{}", f, v);
      if (m.cpu_state.location != fmt::format("buffers={}", m.buffers.size())) {
        return Status::Corruption(fmt::format("{} is partial: {} buffers, writer said {}", what,
                                              m.buffers.size(), m.cpu_state.location));
      }
      for (size_t i = 0; i < m.buffers.size(); ++i) {
        uint64_t a = 0, b = 0, tail = 0;
        if (std::sscanf(m.buffers[i].label.c_str(), "%lu %lu %lu", &a, &b, &tail) != 3) {
          return Status::Corruption(what + ": unreadable label");
        }
        auto want = BufferBytes(a, b, tail);
        PHOS_ASSIGN_OR_RETURN(AlignedBuffer got, AlignedBuffer::Allocate(want.size()));
        PHOS_RETURN_IF_ERROR(store->ReadBuffer(m, static_cast<int>(i), got.data()));
        if (m.buffers[i].size != want.size() || std::memcmp(got.data(), want.data(), want.size()) != 0) {
          return Status::Corruption(fmt::format("{}: buffer {} holds other bytes than written", what, i));
        }
      }
    }
  }
  // What the killed writer left behind must be reclaimable.
  PHOS_RETURN_IF_ERROR(store->CollectGarbage().status());
  return store->CheckConsistency();
}

}  // namespace phos::store::testing
