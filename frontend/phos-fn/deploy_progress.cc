#include "deploy_progress.h"

#include <cstdio>

#include <fmt/core.h>

namespace phos::fn_cli {

DeployProgress::DeployProgress(bool on, std::string name, std::function<std::string()> stage_of)
    : on_(on), name_(std::move(name)), stage_of_(std::move(stage_of)) {}

DeployProgress::~DeployProgress() { Stop(); }

void DeployProgress::Uploaded(uint64_t sent, uint64_t total) {
  if (!on_ || total == 0) return;
  std::lock_guard lock(mu_);
  // libcurl reports many times a second: the line changes ten times a second at most.
  const auto now = std::chrono::steady_clock::now();
  if (sent < total && now - last_upload_print_ < std::chrono::milliseconds(100)) return;
  last_upload_print_ = now;
  PrintLocked(fmt::format("uploading {:.1f} of {:.1f} MiB", sent / 1048576.0, total / 1048576.0));
}

void DeployProgress::Show(const std::string& stage) {
  if (!on_) return;
  std::lock_guard lock(mu_);
  PrintLocked(stage);
}

void DeployProgress::Watch() {
  if (!on_ || poller_.joinable()) return;
  poller_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      const std::string stage = stage_of_();
      lock.lock();
      if (stopping_) break;
      PrintLocked(stage.empty() ? "waiting for phosd" : stage);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; });
    }
  });
}

void DeployProgress::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  if (printed_) {
    std::fputs("\r\033[K", stderr);  // the line goes; the outcome follows on standard output
    std::fflush(stderr);
  }
}

void DeployProgress::PrintLocked(const std::string& stage) {
  if (stopping_) return;  // Stop() cleared the line for what follows
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r\033[Kdeploying %s: %s (%.1f s)", name_.c_str(), stage.c_str(), seconds);
  std::fflush(stderr);
  printed_ = true;
}

}  // namespace phos::fn_cli
