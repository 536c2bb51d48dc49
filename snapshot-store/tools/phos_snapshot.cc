// phos-snapshot: offline look at a snapshot store (opened read-only unless it runs gc).
//
//   phos-snapshot --store DIR ls
//   phos-snapshot --store DIR inspect FUNCTION [VERSION]   manifest, sizes, dedup ratio
//   phos-snapshot --store DIR verify [FUNCTION [VERSION]]  read and check every chunk
//   phos-snapshot --store DIR gc                           free unreferenced chunks and segments
//   phos-snapshot bucket-ls --s3-endpoint URL --s3-bucket NAME [PREFIX]
//                                                          the remote tier's snapshots
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "phos/base/version.h"
#include "phos/objstore/s3.h"
#include "phos/store/manifest.h"
#include "phos/store/store.h"

namespace {

using phos::Result;
using phos::Status;
using phos::store::Store;

int Fail(const Status& s) {
  fmt::print(stderr, "phos-snapshot: {}\n", s.ToString());
  return 1;
}

Result<uint64_t> Latest(Store& store, const std::string& function) {
  PHOS_ASSIGN_OR_RETURN(auto versions, store.ListVersions(function));
  if (versions.empty()) return Status::NotFound("no snapshot of '" + function + "'");
  return versions.back();
}

int Ls(Store& store) {
  auto functions = store.ListFunctions();
  if (!functions.ok()) return Fail(functions.status());
  for (const auto& f : *functions) {
    auto versions = store.ListVersions(f);
    if (!versions.ok()) return Fail(versions.status());
    std::string list;
    for (uint64_t v : *versions) list += fmt::format("{}v{}", list.empty() ? "" : " ", v);
    fmt::print("{}\t{}\n", f, list);
  }
  return 0;
}

int Inspect(Store& store, const std::string& function, uint64_t version) {
  if (version == 0) {
    auto latest = Latest(store, function);
    if (!latest.ok()) return Fail(latest.status());
    version = *latest;
  }
  auto m = store.LoadManifest(function, version);
  if (!m.ok()) return Fail(m.status());
  fmt::print("snapshot '{}' v{}\n  device profile {}  compute capability {}  chunk bytes {}  created {} ms\n",
             m->function, m->version, m->device_profile, m->compute_capability, m->chunk_bytes,
             m->created_unix_ms);
  uint64_t total = 0;
  for (size_t i = 0; i < m->buffers.size(); ++i) {
    const phos::store::Buffer& b = m->buffers[i];
    total += b.size;
    fmt::print("  buffer {:3} {:#016x} {:>12} B  {:>5} chunks  rank {:>3}  {}  {}\n", i, b.device_address,
               b.size, b.chunks.size(), b.first_touch_rank, phos::store::AccessClassName(b.access_class),
               b.label);
  }
  for (size_t i = 0; i < m->modules.size(); ++i) {
    const phos::store::Module& mod = m->modules[i];
    total += mod.size;
    fmt::print("  module {:3} {} {} B {} chunks\n", i, mod.kind, mod.size, mod.chunks.size());
  }
  fmt::print("  {} streams, {} events, {} library handles, cpu state {} {}\n", m->streams.size(),
             m->events.size(), m->library_handles.size(), m->cpu_state.kind, m->cpu_state.location);
  fmt::print("  {} bytes in {} buffers and {} modules\n", total, m->buffers.size(), m->modules.size());
  auto stats = store.Stats();
  if (!stats.ok()) return Fail(stats.status());
  fmt::print("store: {} snapshots, {} logical bytes, {} unique, {} on disk, dedup ratio {:.2f}\n", stats->snapshots,
             stats->logical_bytes, stats->unique_bytes, stats->segment_bytes, stats->dedup_ratio);
  return 0;
}

int Verify(Store& store, const std::string& function, uint64_t version) {
  std::vector<std::pair<std::string, uint64_t>> targets;
  auto functions = function.empty() ? store.ListFunctions() : Result<std::vector<std::string>>({function});
  if (!functions.ok()) return Fail(functions.status());
  for (const auto& f : *functions) {
    if (version != 0) {
      targets.emplace_back(f, version);
      continue;
    }
    auto versions = store.ListVersions(f);
    if (!versions.ok()) return Fail(versions.status());
    for (uint64_t v : *versions) targets.emplace_back(f, v);
  }
  int bad = 0;
  for (const auto& [f, v] : targets) {
    Status s = store.VerifySnapshot(f, v);
    if (s.ok()) {
      fmt::print("ok   '{}' v{}\n", f, v);
    } else {
      ++bad;
      fmt::print("BAD  {}\n", s.ToString());
    }
  }
  if (function.empty()) {
    Status s = store.CheckConsistency();
    if (!s.ok()) {
      ++bad;
      fmt::print("BAD  {}\n", s.ToString());
    }
  }
  return bad == 0 ? 0 : 1;
}

// Every snapshot uploaded to a bucket (manifests/<function>/<node>-<version>) under
// "manifests/<prefix>": its object, buffers and bytes, read from the manifest itself.
int BucketLs(const phos::objstore::S3Options& options, const std::string& prefix) {
  phos::objstore::S3Client bucket(options);
  auto keys = bucket.List("manifests/" + prefix);
  if (!keys.ok()) return Fail(keys.status());
  int bad = 0;
  for (const std::string& key : *keys) {
    auto bytes = bucket.Get(key);
    auto manifest = bytes.ok() ? phos::store::DecodeManifest(*bytes) : Result<phos::store::Manifest>(bytes.status());
    if (!manifest.ok()) {
      fmt::print("{}\tunreadable: {}\n", key, manifest.status().ToString());
      ++bad;
      continue;
    }
    uint64_t total = 0;
    for (const auto& b : manifest->buffers) total += b.size;
    fmt::print("{}\t{} buffers\t{} bytes\t{}\n", key, manifest->buffers.size(), total, manifest->device_profile);
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect, verify and collect garbage in a phos snapshot store"};
  app.set_version_flag("--version", fmt::format("phos-snapshot {}\nsnapshot manifest format {}, store format {}",
                                                phos::kVersion, phos::store::kManifestFormatVersion,
                                                phos::store::kStoreFormatVersion));
  std::string dir;
  app.add_option("--store", dir, "store directory (every subcommand but bucket-ls)");
  app.require_subcommand(1);
  auto* ls = app.add_subcommand("ls", "list functions and their versions");
  auto* inspect = app.add_subcommand("inspect", "print a manifest, its sizes and the store's dedup ratio");
  std::string function;
  uint64_t version = 0;
  inspect->add_option("function", function, "function name")->required();
  inspect->add_option("version", version, "version (default: latest)");
  auto* verify = app.add_subcommand("verify", "read and check every chunk; exit 1 naming any bad chunk");
  verify->add_option("function", function, "only this function");
  verify->add_option("version", version, "only this version");
  auto* gc = app.add_subcommand("gc", "free unreferenced chunks and delete dead segment files");
  auto* bucket_ls = app.add_subcommand(
      "bucket-ls", "list the snapshots uploaded to a remote tier's bucket (credentials as phosd finds them)");
  phos::objstore::S3Options s3;
  std::string credentials_file, prefix;
  bucket_ls->add_option("--s3-endpoint", s3.endpoint, "http://HOST:PORT")->required();
  bucket_ls->add_option("--s3-bucket", s3.bucket, "the bucket")->required();
  bucket_ls->add_option("--s3-region", s3.region, "its region")->capture_default_str();
  bucket_ls->add_option("--s3-credentials-file", credentials_file, "when not in the environment");
  bucket_ls->add_option("prefix", prefix, "only functions beginning so");
  CLI11_PARSE(app, argc, argv);

  if (bucket_ls->parsed()) {
    auto credentials = phos::objstore::FindCredentials(credentials_file);
    if (!credentials.ok()) return Fail(credentials.status());
    s3.credentials = *credentials;
    return BucketLs(s3, prefix);
  }
  if (dir.empty()) return Fail(Status::InvalidArgument("--store is required"));

  phos::store::StoreOptions options;
  options.path = dir;
  options.read_only = !gc->parsed();
  auto store = Store::Open(options);
  if (!store.ok()) return Fail(store.status());
  if (ls->parsed()) return Ls(**store);
  if (inspect->parsed()) return Inspect(**store, function, version);
  if (verify->parsed()) return Verify(**store, function, version);
  auto stats = (*store)->CollectGarbage();
  if (!stats.ok()) return Fail(stats.status());
  fmt::print("gc: {} chunks freed, {} segment files ({} bytes) deleted\n", stats->chunks_freed,
             stats->segments_deleted, stats->bytes_reclaimed);
  return 0;
}
