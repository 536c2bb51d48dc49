// The manifest envelope (see manifest.h for the layout) and the mapping between the plain
// manifest and its protobuf schema, which nothing outside this file sees.
#include "phos/store/manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "proto/manifest.pb.h"

namespace phos::store {

namespace {

void PutLe(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

// Printable form of bytes that should have been the magic.
std::string Escaped(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

void AddChunkRefs(const std::vector<ChunkRef>& refs,
                  google::protobuf::RepeatedPtrField<proto::ChunkRef>* out) {
  out->Reserve(static_cast<int>(refs.size()));
  for (const ChunkRef& ref : refs) {
    proto::ChunkRef* p = out->Add();
    p->set_id(ref.id.ToBytes());
    p->set_size(ref.size);
  }
}

proto::Manifest ToProto(const Manifest& m) {
  proto::Manifest p;
  p.set_function(m.function);
  p.set_version(m.version);
  p.set_device_profile(m.device_profile);
  p.set_compute_capability(m.compute_capability);
  p.set_chunk_bytes(m.chunk_bytes);
  for (const Buffer& b : m.buffers) {
    proto::Buffer* pb = p.add_buffers();
    pb->set_device_address(b.device_address);
    pb->set_size(b.size);
    pb->set_alignment(b.alignment);
    AddChunkRefs(b.chunks, pb->mutable_chunks());
    pb->set_first_touch_rank(b.first_touch_rank);
    pb->set_access_class(static_cast<proto::AccessClass>(b.access_class));
    pb->set_label(b.label);
    pb->set_device(b.device);
  }
  for (const Module& mod : m.modules) {
    proto::Module* pm = p.add_modules();
    pm->set_content_hash(mod.content_hash.ToBytes());
    pm->set_size(mod.size);
    pm->set_kind(mod.kind);
    AddChunkRefs(mod.chunks, pm->mutable_chunks());
    for (const ModuleGlobal& g : mod.globals) {
      proto::ModuleGlobal* pg = pm->add_globals();
      pg->set_name(g.name);
      pg->set_contents(g.contents);
    }
  }
  for (const StreamState& s : m.streams) {
    proto::StreamState* ps = p.add_streams();
    ps->set_handle(s.handle);
    ps->set_flags(s.flags);
    ps->set_priority(s.priority);
    ps->set_device(s.device);
  }
  for (const EventState& e : m.events) {
    proto::EventState* pe = p.add_events();
    pe->set_handle(e.handle);
    pe->set_flags(e.flags);
    pe->set_device(e.device);
  }
  for (const LibraryHandle& l : m.library_handles) {
    proto::LibraryHandle* pl = p.add_library_handles();
    pl->set_handle(l.handle);
    pl->set_library(l.library);
    pl->set_stream(l.stream);
    pl->set_math_mode(l.math_mode);
    pl->set_device(l.device);
  }
  if (!m.cpu_state.kind.empty() || !m.cpu_state.location.empty()) {
    p.mutable_cpu_state()->set_kind(m.cpu_state.kind);
    p.mutable_cpu_state()->set_location(m.cpu_state.location);
  }
  p.set_created_unix_ms(m.created_unix_ms);
  p.set_va_base(m.va_base);
  p.set_va_bytes(m.va_bytes);
  p.set_next_handle(m.next_handle);
  p.set_gpus(m.gpus);
  for (const GraphState& g : m.graphs) {
    proto::GraphState* pg = p.add_graphs();
    pg->set_handle(g.handle);
    pg->set_device(g.device);
    pg->set_executable(g.executable);
    for (const GraphNodeState& n : g.nodes) {
      proto::GraphNodeState* pn = pg->add_nodes();
      pn->set_type(n.type);
      pn->set_destroyed(!n.live);
      for (uint32_t d : n.depends) pn->add_depends(d);
      pn->set_kernel(n.kernel);
      pn->set_params(n.params);
      for (uint32_t v : n.grid) pn->add_grid(v);
      for (uint32_t v : n.block) pn->add_block(v);
      pn->set_shared_bytes(n.shared_bytes);
      pn->set_dst(n.dst);
      pn->set_dst_pitch(n.dst_pitch);
      pn->set_src(n.src);
      pn->set_src_pitch(n.src_pitch);
      pn->set_width(n.width);
      pn->set_height(n.height);
      pn->set_value(n.value);
      pn->set_element_size(n.element_size);
      pn->set_event(n.event);
    }
  }
  for (const NcclCommState& c : m.nccl_comms) {
    proto::NcclCommState* pc = p.add_nccl_comms();
    pc->set_handle(c.handle);
    pc->set_device(c.device);
  }
  return p;
}

// `what` names the list ("buffer 3") for the error of a malformed id.
Result<std::vector<ChunkRef>> FromProto(const google::protobuf::RepeatedPtrField<proto::ChunkRef>& refs,
                                        const std::string& what) {
  std::vector<ChunkRef> out;
  out.reserve(static_cast<size_t>(refs.size()));
  for (int i = 0; i < refs.size(); ++i) {
    Result<ChunkId> id = ChunkId::FromBytes(refs[i].id());
    if (!id.ok()) {
      return Status::Corruption(fmt::format("manifest {} chunk {}: {}", what, i, id.status().message()));
    }
    out.push_back(ChunkRef{*id, refs[i].size()});
  }
  return out;
}

// A value written by a newer build that knows more access classes reads as "not observed", which
// restores the buffer like any other.
AccessClass FromProto(proto::AccessClass access_class) {
  switch (access_class) {
    case proto::ACCESS_READ_ONLY:
      return AccessClass::kReadOnly;
    case proto::ACCESS_READ_WRITE:
      return AccessClass::kReadWrite;
    case proto::ACCESS_SCRATCH:
      return AccessClass::kScratch;
    default:
      return AccessClass::kUnknown;
  }
}

Result<Manifest> FromProto(const proto::Manifest& p) {
  Manifest m;
  m.function = p.function();
  m.version = p.version();
  m.device_profile = p.device_profile();
  m.compute_capability = p.compute_capability();
  m.chunk_bytes = p.chunk_bytes();
  m.buffers.reserve(static_cast<size_t>(p.buffers_size()));
  for (int i = 0; i < p.buffers_size(); ++i) {
    const proto::Buffer& pb = p.buffers(i);
    Buffer& b = m.buffers.emplace_back();
    b.device_address = pb.device_address();
    b.size = pb.size();
    b.alignment = pb.alignment();
    PHOS_ASSIGN_OR_RETURN(b.chunks, FromProto(pb.chunks(), fmt::format("buffer {}", i)));
    b.first_touch_rank = pb.first_touch_rank();
    b.access_class = FromProto(pb.access_class());
    b.label = pb.label();
    b.device = pb.device();
  }
  m.modules.reserve(static_cast<size_t>(p.modules_size()));
  uint64_t global_bytes = 0;
  for (int i = 0; i < p.modules_size(); ++i) {
    const proto::Module& pm = p.modules(i);
    Module& mod = m.modules.emplace_back();
    Result<ChunkId> hash = ChunkId::FromBytes(pm.content_hash());
    if (!hash.ok()) {
      return Status::Corruption(
          fmt::format("manifest module {} content hash: {}", i, hash.status().message()));
    }
    mod.content_hash = *hash;
    mod.size = pm.size();
    mod.kind = pm.kind();
    PHOS_ASSIGN_OR_RETURN(mod.chunks, FromProto(pm.chunks(), fmt::format("module {}", i)));
    for (const proto::ModuleGlobal& pg : pm.globals()) {
      if (pg.name().empty() || pg.contents().empty()) {
        return Status::Corruption(fmt::format("manifest module {}: a global without a name or bytes", i));
      }
      global_bytes += pg.contents().size();
      if (global_bytes > kMaxGlobalBytes) {
        return Status::Corruption(
            fmt::format("manifest module {}: globals hold more than the {} bytes a snapshot may", i, kMaxGlobalBytes));
      }
      mod.globals.push_back({pg.name(), pg.contents()});
    }
  }
  for (const proto::StreamState& ps : p.streams()) {
    m.streams.push_back(StreamState{ps.handle(), ps.flags(), ps.priority(), ps.device()});
  }
  for (const proto::EventState& pe : p.events()) {
    m.events.push_back(EventState{pe.handle(), pe.flags(), pe.device()});
  }
  for (const proto::LibraryHandle& pl : p.library_handles()) {
    m.library_handles.push_back(
        LibraryHandle{pl.handle(), pl.library(), pl.stream(), pl.math_mode(), pl.device()});
  }
  m.cpu_state = CpuStateRef{p.cpu_state().kind(), p.cpu_state().location()};
  m.created_unix_ms = p.created_unix_ms();
  m.va_base = p.va_base();
  m.va_bytes = p.va_bytes();
  m.next_handle = p.next_handle();
  m.gpus = p.gpus();
  for (const proto::NcclCommState& pc : p.nccl_comms()) {
    m.nccl_comms.push_back(NcclCommState{pc.handle(), pc.device()});
  }
  for (int i = 0; i < p.graphs_size(); ++i) {
    const proto::GraphState& pg = p.graphs(i);
    GraphState g{.handle = pg.handle(), .device = pg.device(), .executable = pg.executable(), .nodes = {}};
    for (const proto::GraphNodeState& pn : pg.nodes()) {
      // A kernel's shape is three extents each; a dependency names an index of the same graph.
      if ((pn.grid_size() != 0 && pn.grid_size() != 3) || pn.block_size() != pn.grid_size()) {
        return Status::Corruption(fmt::format("manifest graph {}: a kernel node without a 3-extent shape", i));
      }
      for (uint32_t d : pn.depends()) {
        if (d >= static_cast<uint32_t>(pg.nodes_size())) {
          return Status::Corruption(fmt::format("manifest graph {}: a dependency on node {} of {}", i, d, pg.nodes_size()));
        }
      }
      g.nodes.push_back(GraphNodeState{.type = pn.type(),
                                       .live = !pn.destroyed(),
                                       .depends = {pn.depends().begin(), pn.depends().end()},
                                       .kernel = pn.kernel(),
                                       .params = pn.params(),
                                       .grid = {pn.grid().begin(), pn.grid().end()},
                                       .block = {pn.block().begin(), pn.block().end()},
                                       .shared_bytes = pn.shared_bytes(),
                                       .dst = pn.dst(),
                                       .dst_pitch = pn.dst_pitch(),
                                       .src = pn.src(),
                                       .src_pitch = pn.src_pitch(),
                                       .width = pn.width(),
                                       .height = pn.height(),
                                       .value = pn.value(),
                                       .element_size = pn.element_size(),
                                       .event = pn.event()});
    }
    m.graphs.push_back(std::move(g));
  }
  return m;
}

}  // namespace

std::string_view AccessClassName(AccessClass access_class) {
  switch (access_class) {
    case AccessClass::kReadOnly:
      return "read-only";
    case AccessClass::kReadWrite:
      return "read-write";
    case AccessClass::kScratch:
      return "scratch";
    case AccessClass::kUnknown:
      break;
  }
  return "unknown";
}

std::vector<ChunkRef> ChunksOf(const Manifest& manifest) {
  std::vector<ChunkRef> refs;
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  auto add = [&](const std::vector<ChunkRef>& chunks) {
    for (const ChunkRef& c : chunks) {
      if (seen.insert(c.id).second) refs.push_back(c);
    }
  };
  for (const Buffer& b : manifest.buffers) add(b.chunks);
  for (const Module& m : manifest.modules) add(m.chunks);
  return refs;
}

std::string EncodeManifest(const Manifest& manifest) {
  std::string payload;
  ToProto(manifest).SerializeToString(&payload);
  std::string out(kManifestHeaderBytes, '\0');
  std::memcpy(out.data(), kManifestMagic, sizeof kManifestMagic);
  PutLe(kManifestFormatVersion, 4, out.data() + 8);
  PutLe(0, 4, out.data() + 12);
  PutLe(payload.size(), 8, out.data() + 16);
  PutLe(XXH3_64bits(payload.data(), payload.size()), 8, out.data() + 24);
  out += payload;
  return out;
}

Result<Manifest> DecodeManifest(std::string_view bytes, uint64_t max_payload) {
  if (bytes.size() < kManifestHeaderBytes) {
    return Status::Corruption(
        fmt::format("manifest truncated: {} bytes, the header alone is {}", bytes.size(), kManifestHeaderBytes));
  }
  std::string_view magic = bytes.substr(0, sizeof kManifestMagic);
  if (magic != std::string_view(kManifestMagic, sizeof kManifestMagic)) {
    return Status::Corruption(fmt::format("manifest has bad magic: expected 'PHOSSNAP', found '{}'", Escaped(magic)));
  }
  uint64_t version = GetLe(bytes.data() + 8, 4);
  if (version == 0 || version > kManifestFormatVersion) {
    return Status::NotSupported(
        fmt::format("manifest format version {} is {} (this build reads version {})", version,
                    version == 0 ? "not a valid version" : "newer than this build", kManifestFormatVersion));
  }
  uint64_t flags = GetLe(bytes.data() + 12, 4);
  if (flags != 0) {
    return Status::NotSupported(
        fmt::format("manifest has flags {:#x} this build does not know (written by a newer version?)", flags));
  }
  uint64_t length = GetLe(bytes.data() + 16, 8);
  if (length > max_payload) {
    return Status::Corruption(
        fmt::format("manifest payload of {} bytes exceeds the cap of {} bytes", length, max_payload));
  }
  uint64_t available = bytes.size() - kManifestHeaderBytes;
  if (available < length) {
    return Status::Corruption(
        fmt::format("manifest truncated: header promises {} payload bytes, only {} present", length, available));
  }
  if (available > length) {
    return Status::Corruption(
        fmt::format("manifest has {} trailing bytes after its {}-byte payload", available - length, length));
  }
  std::string_view payload = bytes.substr(kManifestHeaderBytes);
  uint64_t want = GetLe(bytes.data() + 24, 8);
  uint64_t got = XXH3_64bits(payload.data(), payload.size());
  if (want != got) {
    return Status::Corruption(
        fmt::format("manifest checksum mismatch: header says {:016x}, payload hashes to {:016x}", want, got));
  }
  proto::Manifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::Corruption("manifest payload passes its checksum but does not parse as a phos.store.Manifest");
  }
  return FromProto(manifest);
}

Status WriteManifestFile(const std::string& path, const Manifest& manifest) {
  std::string bytes = EncodeManifest(manifest);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "fsync " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp + " to " + path);
  return Status::Ok();
}

Result<Manifest> ReadManifestFile(const std::string& path, uint64_t max_payload) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  // Refuse before reading what could never pass the cap.
  if (static_cast<uint64_t>(st.st_size) > max_payload + kManifestHeaderBytes) {
    ::close(fd);
    return Status::Corruption(fmt::format("{}: {} bytes exceeds the manifest cap of {} bytes", path, st.st_size,
                                          max_payload + kManifestHeaderBytes));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "read " + path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  auto manifest = DecodeManifest(bytes, max_payload);
  if (!manifest.ok()) return manifest.status().WithContext(path);
  return manifest;
}

}  // namespace phos::store
