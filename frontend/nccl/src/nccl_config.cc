// ncclConfig_t, read as NCCL 2.28's parseCommConfig reads it: the caller's struct up to its `size`
// (older versions' fields take their defaults), its magic, and each attribute's range. Every
// accepted attribute is a hint about how NCCL builds its channels and kernels (CTAs, CGA
// clusters, collnet, NVLink scheduling): the communicators a function gets are phosd's, made ahead
// of it with phosd's settings, so the hints change nothing, as NCCL's own clamping of them changes
// no result. `blocking` = 0 is accepted too: every call answers once done, which a non-blocking
// communicator's caller must accept (NCCL lets any call of one return ncclSuccess).
#include <fmt/format.h>
#include <strings.h>

#include <algorithm>
#include <cstring>

#include "nccl_internal.h"

namespace phos::frontend::nccl {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's
constexpr int kMaxChannels = 64;               // NCCL 2.28's MAXCHANNELS

bool Undefined(int v) {
  return v == NCCL_CONFIG_UNDEF_INT;
}
bool Flag(int v) {
  return Undefined(v) || v == 0 || v == 1;
}

}  // namespace

ncclResult_t CheckConfig(const ncclConfig_t* config, std::string* why) {
  if (config == nullptr) return ncclSuccess;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  c.magic = 0;
  size_t size = 0;
  std::memcpy(&size, config, sizeof(size));
  std::memcpy(&c, config, std::min(size, sizeof(c)));
  if (c.magic != kConfigMagic) {
    *why = "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER";
    return ncclInvalidArgument;
  }
  // Fields a caller built against an older nccl.h does not have.
  if (c.version < NCCL_VERSION(2, 14, 0)) c.blocking = defaults.blocking;
  if (c.version < NCCL_VERSION(2, 17, 0)) {
    c.cgaClusterSize = defaults.cgaClusterSize;
    c.minCTAs = defaults.minCTAs;
    c.maxCTAs = defaults.maxCTAs;
    c.netName = defaults.netName;
  }
  if (c.version < NCCL_VERSION(2, 25, 0)) c.trafficClass = defaults.trafficClass;
  if (c.version < NCCL_VERSION(2, 27, 0)) {
    c.collnetEnable = defaults.collnetEnable;
    c.CTAPolicy = defaults.CTAPolicy;
    c.shrinkShare = defaults.shrinkShare;
    c.nvlsCTAs = defaults.nvlsCTAs;
  }
  if (c.version < NCCL_VERSION(2, 28, 0)) {
    c.nChannelsPerNetPeer = defaults.nChannelsPerNetPeer;
    c.nvlinkCentricSched = defaults.nvlinkCentricSched;
  }
  auto invalid = [why](const char* field, int value) {
    *why = fmt::format("invalid config {} attribute value {}", field, value);
    return ncclInvalidArgument;
  };
  if (!Flag(c.blocking)) return invalid("blocking", c.blocking);
  if (!Undefined(c.cgaClusterSize) && c.cgaClusterSize < 0)
    return invalid("cgaClusterSize", c.cgaClusterSize);
  // NCCL 2.28 compares the two even when one is undefined (NCCL_CONFIG_UNDEF_INT is INT_MIN): a
  // minCTAs without a maxCTAs is refused there too.
  if ((!Undefined(c.minCTAs) && c.minCTAs <= 0) || (!Undefined(c.maxCTAs) && c.maxCTAs <= 0) ||
      c.minCTAs > c.maxCTAs) {
    *why = fmt::format("invalid config min/max channels attribute value {}/{}", c.minCTAs, c.maxCTAs);
    return ncclInvalidArgument;
  }
  if (!Flag(c.splitShare)) return invalid("splitShare", c.splitShare);
  if (!Flag(c.collnetEnable)) return invalid("collnetEnable", c.collnetEnable);
  const int policies = NCCL_CTA_POLICY_DEFAULT | NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  if (!Undefined(c.CTAPolicy) && (c.CTAPolicy < 0 || c.CTAPolicy > policies))
    return invalid("CTAPolicy", c.CTAPolicy);
  if (!Flag(c.shrinkShare)) return invalid("shrinkShare", c.shrinkShare);
  if (!Undefined(c.nvlsCTAs) && c.nvlsCTAs <= 0) return invalid("nvlsCTAs", c.nvlsCTAs);
  if (!Undefined(c.nChannelsPerNetPeer) &&
      (c.nChannelsPerNetPeer <= 0 || c.nChannelsPerNetPeer > kMaxChannels)) {
    return invalid("nChannelsPerNetPeer", c.nChannelsPerNetPeer);
  }
  if (!Flag(c.nvlinkCentricSched)) return invalid("nvlinkCentricSched", c.nvlinkCentricSched);
  // NCCL refuses a network it has no transport for (ncclInvalidUsage); its own are IB and Socket.
  // The ranks of a function's communicator share one node, so the network is never used.
  if (c.netName != nullptr && strcasecmp(c.netName, "IB") != 0 && strcasecmp(c.netName, "Socket") != 0) {
    *why = fmt::format("network {} not found (NCCL's are IB and Socket)", c.netName);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

}  // namespace phos::frontend::nccl
