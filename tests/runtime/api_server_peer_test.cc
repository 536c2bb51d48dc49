// Who may connect to the API server's socket: its file mode, whatever the umask, and the
// connecting process's uid (SO_PEERCRED), checked before its hello is read.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "phos/ipc/control.h"
#include "phos/ipc/wire.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/peer_policy.h"

namespace phos::runtime {
namespace {

constexpr uid_t kNobody = 65534;

TEST(PeerPolicyTest, RootOwnUidAndAllowedRanges) {
  PeerPolicy policy(1000);
  EXPECT_TRUE(policy.Allowed({.pid = 1, .uid = 0, .gid = 0}));
  EXPECT_TRUE(policy.Allowed({.pid = 1, .uid = 1000, .gid = 0}));
  EXPECT_FALSE(policy.Allowed({.pid = 1, .uid = 1001, .gid = 0}));
  policy.AllowUids(2000, 2009);
  EXPECT_TRUE(policy.Allowed({.pid = 1, .uid = 2000, .gid = 0}));
  EXPECT_TRUE(policy.Allowed({.pid = 1, .uid = 2009, .gid = 0}));
  EXPECT_FALSE(policy.Allowed({.pid = 1, .uid = 2010, .gid = 0}));
  EXPECT_FALSE(policy.Allowed({.pid = 1, .uid = 1999, .gid = 0}));
}

class ApiServerPeerTest : public ::testing::Test {
 protected:
  void Start(mode_t mode) {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-peer-test-" + std::to_string(getpid()) + ".sock";
    ApiServerOptions options{.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10};
    options.socket_mode = mode;
    options.va_slots = 0;
    auto server = ApiServer::Start(options, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  // Connects as `uid` (a child process that drops to it), says hello with an unknown token when
  // `hello` (a peer refused before its hello is read waits for the answer instead: a hello sent to
  // a socket closed unread would make the answer a connection reset) and returns the refusal's
  // message; "connect: <errno>" when it could not connect.
  std::string RefusalAs(uid_t uid, bool say_hello) {
    ipc::Hello hello = ipc::MakeHello(ipc::NewToken(), getpid(), ipc::kWireVersion);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    int out[2];
    if (pipe(out) != 0) return "pipe failed";
    pid_t child = fork();
    if (child == 0) {
      close(out[0]);
      char message[256] = {};
      if (setgid(kNobody) != 0 || setuid(uid) != 0) {
        std::snprintf(message, sizeof(message), "setuid failed");
      } else {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          std::snprintf(message, sizeof(message), "connect: %s", std::strerror(errno));
        } else {
          ipc::Answer answer{};
          if (say_hello) send(fd, &hello, sizeof(hello), MSG_NOSIGNAL);
          if (recv(fd, &answer, sizeof(answer), 0) > 0) {
            std::memcpy(message, answer.message, std::min(sizeof(message), sizeof(answer.message)) - 1);
          }
        }
      }
      [[maybe_unused]] ssize_t n = write(out[1], message, std::strlen(message));
      _exit(0);
    }
    close(out[1]);
    std::string message;
    char buf[256];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof(buf))) > 0) message.append(buf, static_cast<size_t>(n));
    close(out[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return message;
  }

  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
};

TEST_F(ApiServerPeerTest, SocketIs0660WhateverTheUmask) {
  mode_t old = umask(0);
  Start(0660);
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(ApiServerPeerTest, ConnectionsFromUidsNotAllowedAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid (setuid " << kNobody << ")";
  // Open to everyone on the file system: only the peer check stands in the way.
  Start(0666);
  std::string refused = RefusalAs(kNobody, /*say_hello=*/false);
  EXPECT_NE(refused.find("peer uid 65534"), std::string::npos) << refused;
  // Once the uid is allowed (a function user), its hello is read: refused for its unknown token.
  server_->AllowPeerUids(kNobody, kNobody);
  std::string read = RefusalAs(kNobody, /*say_hello=*/true);
  EXPECT_NE(read.find("unknown instance token"), std::string::npos) << read;
  // The socket's mode keeps other users out before any of that.
  server_.reset();
  Start(0660);
  EXPECT_EQ(RefusalAs(kNobody, /*say_hello=*/true).rfind("connect: ", 0), 0u);
}

}  // namespace
}  // namespace phos::runtime
