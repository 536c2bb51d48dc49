// ncclConfig_t as the NCCL frontend reads it (frontend/nccl/src/nccl_config.cc), against NCCL
// 2.28's rules: the magic, fields a caller built against an older nccl.h lacks, each attribute's
// range, and the networks NCCL has.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "nccl_internal.h"

namespace phos::frontend::nccl {
namespace {

ncclResult_t Check(const ncclConfig_t& config, std::string* why = nullptr) {
  std::string ignored;
  return CheckConfig(&config, why != nullptr ? why : &ignored);
}

TEST(NcclConfigTest, NoConfigAndTheInitializerAreAccepted) {
  std::string why;
  EXPECT_EQ(CheckConfig(nullptr, &why), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(Check(config), ncclSuccess);
}

TEST(NcclConfigTest, AConfigNotMadeByTheInitializerIsRefused) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0x12345678;
  std::string why;
  EXPECT_EQ(Check(config, &why), ncclInvalidArgument);
  EXPECT_NE(why.find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << why;
}

TEST(NcclConfigTest, EachAttributeOutsideItsRangeIsRefusedAndInsideAccepted) {
  struct Case {
    const char* what;
    void (*set)(ncclConfig_t*);
    ncclResult_t want;
  };
  const Case cases[] = {
      {"blocking 0", [](ncclConfig_t* c) { c->blocking = 0; }, ncclSuccess},
      {"blocking 2", [](ncclConfig_t* c) { c->blocking = 2; }, ncclInvalidArgument},
      {"cgaClusterSize 8", [](ncclConfig_t* c) { c->cgaClusterSize = 8; }, ncclSuccess},
      {"cgaClusterSize -1", [](ncclConfig_t* c) { c->cgaClusterSize = -1; }, ncclInvalidArgument},
      {"min/max CTAs 2/16",
       [](ncclConfig_t* c) {
         c->minCTAs = 2;
         c->maxCTAs = 16;
       },
       ncclSuccess},
      {"min/max CTAs 16/2",
       [](ncclConfig_t* c) {
         c->minCTAs = 16;
         c->maxCTAs = 2;
       },
       ncclInvalidArgument},
      // NCCL 2.28 compares minCTAs with an unset maxCTAs (INT_MIN) too.
      {"minCTAs 4 alone", [](ncclConfig_t* c) { c->minCTAs = 4; }, ncclInvalidArgument},
      {"maxCTAs 4 alone", [](ncclConfig_t* c) { c->maxCTAs = 4; }, ncclSuccess},
      {"maxCTAs 0", [](ncclConfig_t* c) { c->maxCTAs = 0; }, ncclInvalidArgument},
      {"splitShare 2", [](ncclConfig_t* c) { c->splitShare = 2; }, ncclInvalidArgument},
      {"collnetEnable 1", [](ncclConfig_t* c) { c->collnetEnable = 1; }, ncclSuccess},
      {"CTAPolicy 3", [](ncclConfig_t* c) { c->CTAPolicy = 3; }, ncclSuccess},
      {"CTAPolicy 4", [](ncclConfig_t* c) { c->CTAPolicy = 4; }, ncclInvalidArgument},
      {"shrinkShare -3", [](ncclConfig_t* c) { c->shrinkShare = -3; }, ncclInvalidArgument},
      {"nvlsCTAs 0", [](ncclConfig_t* c) { c->nvlsCTAs = 0; }, ncclInvalidArgument},
      {"nChannelsPerNetPeer 64", [](ncclConfig_t* c) { c->nChannelsPerNetPeer = 64; }, ncclSuccess},
      {"nChannelsPerNetPeer 65", [](ncclConfig_t* c) { c->nChannelsPerNetPeer = 65; }, ncclInvalidArgument},
      {"nvlinkCentricSched 3", [](ncclConfig_t* c) { c->nvlinkCentricSched = 3; }, ncclInvalidArgument},
      {"netName Socket", [](ncclConfig_t* c) { c->netName = "Socket"; }, ncclSuccess},
      {"netName ib", [](ncclConfig_t* c) { c->netName = "ib"; }, ncclSuccess},
      {"netName Carrier pigeon", [](ncclConfig_t* c) { c->netName = "Carrier pigeon"; }, ncclInvalidUsage},
      {"commName", [](ncclConfig_t* c) { c->commName = "tp"; }, ncclSuccess},
  };
  for (const Case& c : cases) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    c.set(&config);
    std::string why;
    EXPECT_EQ(Check(config, &why), c.want) << c.what << ": " << why;
  }
}

// A caller built against NCCL 2.16's nccl.h has no CTA fields: whatever lies there is not read.
TEST(NcclConfigTest, FieldsNewerThanTheCallersVersionAreNotRead) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.version = NCCL_VERSION(2, 16, 0);
  config.minCTAs = 16;
  config.maxCTAs = 2;
  config.nvlinkCentricSched = 9;
  EXPECT_EQ(Check(config), ncclSuccess);
  config.version = NCCL_VERSION(2, 17, 0);
  EXPECT_EQ(Check(config), ncclInvalidArgument);
  // Nor past its size: a struct of the fields up to netName leaves the later ones unread.
  config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, splitShare);
  config.splitShare = 7;
  EXPECT_EQ(Check(config), ncclSuccess);
}

}  // namespace
}  // namespace phos::frontend::nccl
