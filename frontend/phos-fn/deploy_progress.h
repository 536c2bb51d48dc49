// phos-fn deploy's progress on a terminal: one line on standard error, rewritten in place, saying
// what the deploy is doing ("uploading 12.0 of 40.0 MiB", then phosd's stage for the function:
// "running to its entry point", "capturing its GPU state", ...) and for how long. Off (prints
// nothing) when standard error is no terminal, so scripts and logs see only the outcome.
//
//   DeployProgress progress(isatty(STDERR_FILENO) == 1, "mlp", fetch_stage);
//   progress.Uploaded(sent, total);   // from the upload's transfer callback
//   progress.Watch();                 // polls phosd's stage for the function until Stop()
//   ... the deploy call ...
//   progress.Stop();                  // clears the line
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace phos::fn_cli {

class DeployProgress {
 public:
  // `stage_of`: phosd's deploy_stage for the function ("" when none or unknown), asked every
  // 200 ms by Watch().
  DeployProgress(bool on, std::string name, std::function<std::string()> stage_of);
  ~DeployProgress();  // Stop()s
  DeployProgress(const DeployProgress&) = delete;
  DeployProgress& operator=(const DeployProgress&) = delete;

  // The upload's progress: `sent` of `total` bytes.
  void Uploaded(uint64_t sent, uint64_t total);
  // Shows `stage` now.
  void Show(const std::string& stage);
  // Polls stage_of until Stop().
  void Watch();
  // Ends the polling and clears the line.
  void Stop();

 private:
  void PrintLocked(const std::string& stage);

  const bool on_;
  const std::string name_;
  const std::function<std::string()> stage_of_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool printed_ = false;
  std::chrono::steady_clock::time_point last_upload_print_{};
  std::thread poller_;
};

}  // namespace phos::fn_cli
