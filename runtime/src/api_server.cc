#include "phos/runtime/api_server.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api_server_impl.h"

namespace phos::runtime {

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServer::~ApiServer() = default;

Result<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                    std::shared_ptr<driver::DriverTable> driver) {
  if (driver == nullptr) return Status::InvalidArgument("ApiServer needs a driver table");
  if (!options.clock) return Status::InvalidArgument("ApiServer needs a clock (ApiServerOptions::clock)");
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  PHOS_ASSIGN_OR_RETURN(int listen_fd, ipc::ListenSeqpacket(options.socket_path));
  // Who may connect is the socket file's mode and group, set here whatever the umask was.
  if (chmod(options.socket_path.c_str(), options.socket_mode) != 0 ||
      (options.socket_group != static_cast<gid_t>(-1) &&
       chown(options.socket_path.c_str(), static_cast<uid_t>(-1), options.socket_group) != 0)) {
    Status s = Status::FromErrno(errno, "set the mode and group of " + options.socket_path);
    close(listen_fd);
    return s;
  }
  // The acceptor takes every connection waiting and stops at EAGAIN: it never blocks in accept.
  if (fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK) != 0) {
    Status s = Status::FromErrno(errno, "fcntl(O_NONBLOCK) on " + options.socket_path);
    close(listen_fd);
    return s;
  }
  int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return Status::FromErrno(errno, "eventfd");
  }
  auto impl = std::make_unique<Impl>(options, std::move(driver), listen_fd, wake_fd);
  if (Status s = impl->OpenContextPools(); !s.ok()) return s.WithContext("API server");
  if (Status s = impl->ReserveArena(); !s.ok()) return s.WithContext("API server: instance ranges for snapshots");
  impl->OpenDeviceGroups();
  impl->StartAcceptor();
  PHOS_LOG(Info, "runtime", "API server listening on {}", options.socket_path);
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

std::string ApiServer::IssueToken(int gpus) { return impl_->IssueToken(gpus); }
std::string ApiServer::IssueToken(int gpus, const std::string& function) {
  return impl_->IssueToken(gpus, std::chrono::milliseconds::zero(), function);
}
std::string ApiServer::IssueToken(SessionPlan plan) { return impl_->IssueToken(std::move(plan)); }
std::string ApiServer::IssueToken(int gpus, std::chrono::milliseconds unclaimed_for) {
  return impl_->IssueToken(gpus, unclaimed_for);
}
void ApiServer::ExpireUnclaimedTokens() { impl_->ExpireUnclaimedTokens(); }
Status ApiServer::WaitPrepared(const std::string& token, std::chrono::milliseconds timeout) {
  return impl_->WaitPrepared(token, timeout);
}
Result<SessionTimeline> ApiServer::Timeline(const std::string& token) const { return impl_->Timeline(token); }
LearnedUsage ApiServer::TakeLearnedUsage(const std::string& token) { return impl_->TakeLearnedUsage(token); }
Result<uint64_t> ApiServer::CaptureSession(const std::string& token, store::Store& store, const std::string& function,
                                           const std::string& device_profile, std::chrono::milliseconds timeout,
                                           const CaptureOptions& options) {
  return impl_->CaptureSession(token, store, function, device_profile, timeout, options);
}
void ApiServer::EndSession(const std::string& token, RangeRelease how) { impl_->EndSession(token, how); }
void ApiServer::MarkMoving(const std::string& token) { impl_->MarkMoving(token); }
uint64_t ApiServer::ranges_zeroed_behind() const { return impl_->ranges_zeroed_behind(); }
Result<int> ApiServer::ClaimVaSlot(int wanted) { return impl_->ClaimVaSlot(wanted); }
void ApiServer::SetFunctionQuota(const std::string& function, SessionQuota quota) {
  impl_->SetFunctionQuota(function, quota);
}
void ApiServer::ReleaseVaSlot(int slot) { impl_->ReleaseVaSlot(slot); }
size_t ApiServer::session_count() const { return impl_->session_count(); }
void ApiServer::SetContextDemand(size_t contexts) { impl_->SetContextDemand(contexts); }
bool ApiServer::WaitForContexts(std::chrono::milliseconds timeout, const std::function<bool()>& stopping) {
  return impl_->WaitForContexts(timeout, stopping);
}
void ApiServer::AllowPeerUids(uid_t first, uid_t last) { impl_->peers().AllowUids(first, last); }
const std::string& ApiServer::socket_path() const { return impl_->options().socket_path; }
int ApiServer::device_count() const { return impl_->device_count(); }
int ApiServer::default_device() const { return impl_->options().device; }

}  // namespace phos::runtime
