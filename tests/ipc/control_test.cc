#include "phos/ipc/control.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

namespace phos::ipc {
namespace {

TEST(ControlTest, HelloRoundTripsAndCarriesTheToken) {
  std::string token = NewToken();
  ASSERT_EQ(token.size(), kTokenChars);
  Hello h = MakeHello(token, 1234);
  std::string got;
  ASSERT_TRUE(CheckHello(&h, sizeof(h), &got).ok());
  EXPECT_EQ(got, token);
  EXPECT_NE(NewToken(), token);
}

TEST(ControlTest, VersionMismatchNamesBothVersions) {
  Hello h = MakeHello(NewToken(), 1, kWireVersion + 6);
  std::string got;
  Status s = CheckHello(&h, sizeof(h), &got);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version " + std::to_string(kWireVersion + 6)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("version " + std::to_string(kWireVersion)), std::string::npos) << s.message();

  Answer a = MakeAnswer(0, "", 0, kWireVersion + 1);
  s = CheckAnswer(&a, sizeof(a));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::to_string(kWireVersion + 1)), std::string::npos);
}

TEST(ControlTest, MalformedHellosAreRefused) {
  Hello h = MakeHello(NewToken(), 1);
  std::string got;
  EXPECT_FALSE(CheckHello(&h, sizeof(h) - 1, &got).ok());
  Hello bad_magic = h;
  bad_magic.magic = 0;
  EXPECT_FALSE(CheckHello(&bad_magic, sizeof(bad_magic), &got).ok());
  Hello bad_token = MakeHello("ZZZZ", 1);
  Status s = CheckHello(&bad_token, sizeof(bad_token), &got);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token"), std::string::npos);
}

TEST(ControlTest, RefusalMessageReachesTheClient) {
  Answer a = MakeAnswer(1, "unknown instance token", 0);
  Status s = CheckAnswer(&a, sizeof(a));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown instance token"), std::string::npos);
}

TEST(ControlTest, DatagramsCarryDescriptorsAndRefuseOversize) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_TRUE(SendDatagram(sv[0], "hello", 5, pipe_fds[1]).ok());
  char buf[16];
  int fd = -1;
  auto n = ReceiveDatagram(sv[1], buf, sizeof(buf), &fd);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "x", 1), 1);
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  close(fd);

  char big[64] = {};
  ASSERT_TRUE(SendDatagram(sv[0], big, sizeof(big)).ok());
  n = ReceiveDatagram(sv[1], buf, sizeof(buf), &fd);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("longer than 16"), std::string::npos);

  close(sv[0]);
  n = ReceiveDatagram(sv[1], buf, sizeof(buf), &fd);
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound);
  close(sv[1]);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace phos::ipc
