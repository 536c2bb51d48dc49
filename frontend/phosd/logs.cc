#include "logs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace phos::phosd {
namespace {

// How often a follower looks at the files, and the most it sends in one chunk.
constexpr auto kFollowEvery = std::chrono::milliseconds(200);
constexpr uint64_t kMostPerChunk = uint64_t{1} << 20;

std::string Header(const std::string& path) {
  return "==> " + std::filesystem::path(path).filename().string() + " <==\n";
}

// Bytes [from, from + count) of `path` (fewer at its end).
std::string ReadRange(const std::string& path, uint64_t from, uint64_t count) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(count, '\0');
  in.seekg(static_cast<std::streamoff>(from));
  in.read(bytes.data(), static_cast<std::streamsize>(count));
  bytes.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return bytes;
}

uint64_t SizeOf(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

}  // namespace

std::string TailLogs(const std::vector<std::string>& files, uint64_t tail, LogOffsets* offsets) {
  std::string text;
  for (const std::string& path : files) {
    const uint64_t size = SizeOf(path);
    const uint64_t from = size > tail ? size - tail : 0;
    std::string bytes = ReadRange(path, from, size - from);
    (*offsets)[path] = from + bytes.size();
    text += Header(path) + bytes;
    if (!bytes.empty() && bytes.back() != '\n') text += '\n';
  }
  return text;
}

std::string NewLogBytes(const std::vector<std::string>& files, uint64_t most, LogOffsets* offsets) {
  std::string text;
  for (const std::string& path : files) {
    if (text.size() >= most) break;
    const uint64_t size = SizeOf(path);
    auto it = offsets->find(path);
    uint64_t from = it != offsets->end() ? it->second : 0;
    if (size < from) from = 0;  // cut since: its new start
    if (size == from) {
      (*offsets)[path] = from;
      continue;
    }
    std::string bytes = ReadRange(path, from, std::min(size - from, most - text.size()));
    (*offsets)[path] = from + bytes.size();
    text += Header(path) + bytes;
  }
  return text;
}

LogFollowers::~LogFollowers() {
  std::vector<Follower> followers;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    followers.swap(followers_);
  }
  cv_.notify_all();
  for (Follower& f : followers) f.thread.join();
}

void LogFollowers::JoinFinishedLocked() {
  for (auto it = followers_.begin(); it != followers_.end();) {
    if (*it->done) {
      it->thread.join();  // returning already: it takes no lock after setting done
      it = followers_.erase(it);
    } else {
      ++it;
    }
  }
}

void LogFollowers::Follow(ListFiles list, http::Responder out, uint64_t tail) {
  std::lock_guard lock(mu_);
  JoinFinishedLocked();
  if (stopping_) return out.End();
  auto done = std::make_shared<bool>(false);
  std::thread thread([this, list = std::move(list), out, tail, done] {
    LogOffsets offsets;
    std::optional<std::vector<std::string>> files = list();
    if (files) out.Chunk(TailLogs(*files, tail, &offsets));
    std::unique_lock lock(mu_);
    while (files && !out.Gone() && !stopping_) {
      if (cv_.wait_for(lock, kFollowEvery, [&] { return stopping_; })) break;
      lock.unlock();
      files = list();
      if (files) out.Chunk(NewLogBytes(*files, kMostPerChunk, &offsets));
      lock.lock();
    }
    *done = true;
    lock.unlock();
    out.End();
  });
  followers_.push_back({std::move(thread), std::move(done)});
}

}  // namespace phos::phosd
