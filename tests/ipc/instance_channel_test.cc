// The invocation channel's frame codec (ipc/src/instance_channel.cc): descriptors carried by a
// frame, session variables, and frames a hostile peer could send.
#include "phos/ipc/instance_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace phos::ipc::invoke {
namespace {

TEST(InstanceChannelCapabilitiesTest, AReadyFrameSaysWhetherTheSdkTakesRequestIds) {
  EXPECT_TRUE(TakesRequestIds(kReadyCapabilities));
  EXPECT_TRUE(TakesRequestIds("pieces  request-id"));
  EXPECT_FALSE(TakesRequestIds(""));  // an SDK from before capabilities
  EXPECT_FALSE(TakesRequestIds("request-ids request"));
  // A hostile function's oversized ready frame takes nothing (and is not split into words).
  EXPECT_FALSE(TakesRequestIds(std::string(kMaxReadyPayload, 'a') + " request-id"));
}

TEST(InstanceChannelTest, FrameCarriesADescriptor) {
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  ASSERT_TRUE(WriteFrameWithFd(a[0], FrameKind::kFork, "X=1", b[1]).ok());
  int passed = -1;
  Result<Frame> frame = ReadFrame(a[1], nullptr, &passed);
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_EQ(frame->kind, FrameKind::kFork);
  EXPECT_EQ(frame->payload, "X=1");
  ASSERT_GE(passed, 0);
  // The received descriptor is the same socket: what goes in one end comes out of b[0].
  ASSERT_EQ(write(passed, "z", 1), 1);
  char c = 0;
  ASSERT_EQ(read(b[0], &c, 1), 1);
  EXPECT_EQ(c, 'z');
  for (int fd : {a[0], a[1], b[0], b[1], passed}) close(fd);
}

TEST(InstanceChannelTest, SessionVariablesRoundTripAndBadInputIsRefused) {
  EnvList env = {{"A", "1"}, {"PHOS_INSTANCE_TOKEN", "ab=cd"}, {"EMPTY", ""}};
  Result<std::string> encoded = EncodeEnv(env);
  ASSERT_TRUE(encoded.ok());
  Result<EnvList> decoded = DecodeEnv(*encoded);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, env);
  EXPECT_EQ(EncodeEnv({{"A=B", "1"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeEnv({{"", "1"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeEnv("A=1").status().code(), StatusCode::kCorruption);  // not NUL-ended
  EXPECT_EQ(DecodeEnv(std::string("noequals\0", 9)).status().code(), StatusCode::kCorruption);
}

TEST(InstanceChannelTest, DescriptorOfARefusedFrameIsClosed) {
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
  ASSERT_TRUE(WriteFrameWithFd(a[0], static_cast<FrameKind>(kLastFrameKind + 1), "", b[1]).ok());
  close(b[1]);  // the copy in flight is now the only one
  int passed = -1;
  Result<Frame> frame = ReadFrame(a[1], nullptr, &passed);
  EXPECT_EQ(frame.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(passed, -1);
  // With every copy of b[1] closed, b[0] reads end of file (a leaked copy: EAGAIN).
  char c = 0;
  EXPECT_EQ(read(b[0], &c, 1), 0);
  for (int fd : {a[0], a[1], b[0]}) close(fd);
}

TEST(InstanceChannelTest, UnknownFrameKindIsCorruption) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const char unknown = static_cast<char>(kLastFrameKind + 1);
  const char header[5] = {0, 0, 0, 0, unknown};
  ASSERT_EQ(write(sv[0], header, 5), 5);
  Result<Frame> frame = ReadFrame(sv[1]);
  EXPECT_EQ(frame.status().code(), StatusCode::kCorruption);
  EXPECT_NE(frame.status().message().find("unknown kind " + std::to_string(kLastFrameKind + 1)), std::string::npos);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace phos::ipc::invoke
