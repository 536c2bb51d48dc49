// The etcd client against a real etcd (a single member on loopback, from scripts/setup.sh's
// etcd-server; without it those tests skip, saying why): keys, compare-and-swap, leases kept and
// lost, watches. And against a fake server answering what etcd never would: every such answer is
// an error status, never a crash.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/etcd.h"
#include "../testing/free_port.h"
#include "../testing/wait_until.h"
#include "phos/cluster/etcd.h"

namespace phos::cluster {
namespace {

using phos::testing::WaitUntil;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = server_.Start();
    if (why.find("not installed") != std::string::npos) GTEST_SKIP() << why;
    ASSERT_EQ(why, "");
    Result<Etcd> made = Etcd::Make(server_.Options());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    etcd_.emplace(std::move(made).value());
  }
  const Etcd& etcd() const { return *etcd_; }

  testing::EtcdServer server_;
  std::optional<Etcd> etcd_;
};

// What a watch saw.
struct Seen {
  KeyValue kv;
  bool deleted = false;
};

// Runs a watch on a thread of its own until Stop (or until it ends by itself).
class Watcher {
 public:
  Watcher(const Etcd& etcd, std::string prefix, int64_t start_revision)
      : thread_([this, etcd, prefix = std::move(prefix), start_revision] {
          Status watched = etcd.Watch(
              prefix, start_revision,
              [this](const KeyValue& kv, bool deleted) {
                std::lock_guard<std::mutex> lock(mu_);
                seen_.push_back({kv, deleted});
              },
              [this] { return !stop_.load(); });
          std::lock_guard<std::mutex> lock(mu_);
          result_ = watched;
          done_ = true;
        }) {}
  ~Watcher() { Stop().IgnoreError(); }

  // Stops it (a watch asks about once a second) and returns how it ended.
  Status Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return result();
  }
  std::vector<Seen> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  Status result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
  bool done_ = false;
  Status result_ = Status::Internal("the watch has not returned");
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started once the rest is
};

TEST_F(EtcdTest, KeysArePutGotListedAndDeleted) {
  // Bytes that are not text, a newline, and an empty value all go through base64.
  const std::string odd = std::string("cfg/\x01\xfe\xff\n", 8);
  const std::string binary = std::string("\0\x80\xff value", 9);
  Result<int64_t> first = etcd().Put("cfg/a", "one");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<int64_t> second = etcd().Put(odd, binary);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GT(*second, *first);
  ASSERT_TRUE(etcd().Put("cfg/empty", "").ok());
  ASSERT_TRUE(etcd().Put("cfh/outside", "x").ok()) << "the key after the prefix's range";
  ASSERT_TRUE(etcd().Put("cf", "x").ok()) << "a key before it";

  Result<std::optional<KeyValue>> got = etcd().Get("cfg/a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, "cfg/a");
  EXPECT_EQ((*got)->value, "one");
  EXPECT_EQ((*got)->create_revision, *first);
  EXPECT_EQ((*got)->mod_revision, *first);
  EXPECT_EQ((*got)->lease, 0);
  got = etcd().Get(odd);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, binary);
  got = etcd().Get("cfg/empty");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "");
  got = etcd().Get("cfg/none");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());

  Result<std::vector<KeyValue>> listed = etcd().List("cfg/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::string> keys;
  for (const KeyValue& kv : *listed) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{odd, "cfg/a", "cfg/empty"})) << "in byte order: 0x01 before 'a'";
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].value, binary);
  EXPECT_EQ((*listed)[1].mod_revision, *first);
  listed = etcd().List("nothing/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  listed = etcd().List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->size(), 5u) << "an empty prefix lists every key";

  // A put changes mod_revision, not create_revision.
  Result<int64_t> third = etcd().Put("cfg/a", "two");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  got = etcd().Get("cfg/a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "two");
  EXPECT_EQ((*got)->create_revision, *first);
  EXPECT_EQ((*got)->mod_revision, *third);

  ASSERT_TRUE(etcd().Delete("cfg/a").ok());
  EXPECT_TRUE(etcd().Delete("cfg/a").ok()) << "deleting what is not there is no error";
  got = etcd().Get("cfg/a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(etcd().List("cfg/")->size(), 2u);
  EXPECT_EQ(etcd().Put("", "x").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdTest, PutIfSwapsOnlyFromTheExpectedRevision) {
  Result<bool> made = etcd().PutIf("leader", "a", 0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(*made) << "0: the key must not exist, and it did not";
  made = etcd().PutIf("leader", "b", 0);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_FALSE(*made) << "it exists now";
  Result<std::optional<KeyValue>> got = etcd().Get("leader");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "a");
  const int64_t seen = (*got)->mod_revision;

  ASSERT_TRUE(etcd().Put("leader", "c").ok()) << "someone else's put since";
  Result<bool> swapped = etcd().PutIf("leader", "d", seen);
  ASSERT_TRUE(swapped.ok()) << swapped.status().ToString();
  EXPECT_FALSE(*swapped) << "a stale revision is refused";
  got = etcd().Get("leader");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "c");

  swapped = etcd().PutIf("leader", "e", (*got)->mod_revision);
  ASSERT_TRUE(swapped.ok()) << swapped.status().ToString();
  EXPECT_TRUE(*swapped);
  EXPECT_EQ(etcd().Get("leader")->value().value, "e");
}

TEST_F(EtcdTest, RevokingALeaseDeletesItsKeys) {
  Result<int64_t> lease = etcd().GrantLease(60);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_NE(*lease, 0);
  ASSERT_TRUE(etcd().Put("members/a", "addr", *lease).ok());
  Result<std::optional<KeyValue>> got = etcd().Get("members/a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->lease, *lease);
  EXPECT_TRUE(etcd().KeepAlive(*lease).ok());

  ASSERT_TRUE(etcd().Revoke(*lease).ok());
  got = etcd().Get("members/a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
  EXPECT_TRUE(etcd().Revoke(*lease).ok()) << "revoking a lease that is gone is no error";
  EXPECT_EQ(etcd().KeepAlive(*lease).code(), StatusCode::kNotFound);
  EXPECT_EQ(etcd().Put("members/b", "addr", *lease).status().code(), StatusCode::kNotFound)
      << "no key can be bound to it any more";
  EXPECT_EQ(etcd().GrantLease(0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdTest, ALeaseNotKeptAliveExpiresWithItsKeys) {
  // etcd raises a TTL below its minimum (2 s with the default election timeout).
  Result<int64_t> lease = etcd().GrantLease(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(etcd().Put("members/short", "addr", *lease).ok());
  EXPECT_TRUE(WaitUntil([&] {
    Result<std::optional<KeyValue>> got = etcd().Get("members/short");
    return got.ok() && !got->has_value();
  })) << "the key outlived its lease";
  EXPECT_EQ(etcd().KeepAlive(*lease).code(), StatusCode::kNotFound);
}

TEST_F(EtcdTest, ALeaseKeeperKeepsTheLeaseAcrossSeveralTtlsAndRevokesItWhenDestroyed) {
  Result<int64_t> lease = etcd().GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(etcd().Put("members/kept", "addr", *lease).ok());
  std::atomic<int> lost{0};
  {
    LeaseKeeper keeper(etcd(), *lease, 2, [&] { lost.fetch_add(1); });
    EXPECT_EQ(keeper.lease(), *lease);
    // Three rounds a TTL: nine span three TTLs, each of which would have ended the lease unkept.
    ASSERT_TRUE(WaitUntil([&] { return keeper.rounds() >= 9 || keeper.lost(); }));
    EXPECT_FALSE(keeper.lost());
    Result<std::optional<KeyValue>> got = etcd().Get("members/kept");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got->has_value()) << "the key went with its lease while it was kept alive";
  }
  EXPECT_EQ(lost.load(), 0);
  Result<std::optional<KeyValue>> got = etcd().Get("members/kept");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value()) << "the keeper's destructor revokes the lease";
  EXPECT_EQ(etcd().KeepAlive(*lease).code(), StatusCode::kNotFound);
}

TEST_F(EtcdTest, ALeaseKeeperReportsALeaseRevokedBehindItsBack) {
  Result<int64_t> lease = etcd().GrantLease(3);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::atomic<int> lost{0};
  {
    LeaseKeeper keeper(etcd(), *lease, 3, [&] { lost.fetch_add(1); });
    ASSERT_TRUE(WaitUntil([&] { return keeper.rounds() >= 1; }));
    ASSERT_TRUE(etcd().Revoke(*lease).ok());
    EXPECT_TRUE(WaitUntil([&] { return lost.load() > 0; })) << "on_lost was not called";
    EXPECT_TRUE(keeper.lost());
  }
  EXPECT_EQ(lost.load(), 1) << "on_lost is called once";
}

TEST_F(EtcdTest, AWatchSeesPutsAndDeletesInOrder) {
  Result<int64_t> before = etcd().Put("elsewhere", "x");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  // From the next revision: what happens before the watch is set up is replayed, not missed.
  Watcher watcher(etcd(), "jobs/", *before + 1);
  Result<int64_t> put = etcd().Put("jobs/a", "1");
  EXPECT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(etcd().Put("elsewhere", "y").ok());
  EXPECT_TRUE(etcd().Put("jobs/b", "").ok());
  EXPECT_TRUE(etcd().Delete("jobs/a").ok());
  EXPECT_TRUE(WaitUntil([&] { return watcher.seen().size() >= 3 || watcher.done(); }))
      << "the watch saw " << watcher.seen().size() << " changes";
  EXPECT_TRUE(watcher.Stop().ok()) << watcher.result().ToString();
  const std::vector<Seen> seen = watcher.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].kv.key, "jobs/a");
  EXPECT_EQ(seen[0].kv.value, "1");
  EXPECT_FALSE(seen[0].deleted);
  if (put.ok()) {
    EXPECT_EQ(seen[0].kv.mod_revision, *put);
  }
  EXPECT_EQ(seen[1].kv.key, "jobs/b");
  EXPECT_EQ(seen[1].kv.value, "");
  EXPECT_FALSE(seen[1].deleted);
  EXPECT_EQ(seen[2].kv.key, "jobs/a");
  EXPECT_TRUE(seen[2].deleted);
  EXPECT_GT(seen[2].kv.mod_revision, seen[0].kv.mod_revision);
}

TEST_F(EtcdTest, AWatchEndsUnavailableWhenEtcdGoesAway) {
  Watcher watcher(etcd(), "jobs/", 1);
  ASSERT_TRUE(etcd().Put("jobs/a", "1").ok());
  ASSERT_TRUE(WaitUntil([&] { return !watcher.seen().empty() || watcher.done(); }));
  ASSERT_FALSE(watcher.done()) << watcher.result().ToString();
  server_.Stop();
  EXPECT_TRUE(WaitUntil([&] { return watcher.done(); })) << "the watch outlived etcd";
  EXPECT_EQ(watcher.result().code(), StatusCode::kUnavailable) << watcher.result().ToString();
}

TEST_F(EtcdTest, AnUnreachableEndpointIsSkippedForTheNext) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  Result<Etcd> both = Etcd::Make({.endpoints = {dead, server_.endpoint()}});
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_TRUE(both->Ping().ok());
  ASSERT_TRUE(both->Put("k", "v").ok());
  EXPECT_EQ(etcd().Get("k")->value().value, "v");
}

TEST(EtcdClientTest, MakeRefusesBadEndpoints) {
  EXPECT_EQ(Etcd::Make({}).status().code(), StatusCode::kInvalidArgument);
  for (const char* bad : {"", "127.0.0.1:2379", "https://127.0.0.1:2379", "unix:///tmp/etcd.sock", "http://",
                          "http://127.0.0.1", "http://127.0.0.1:0", "http://127.0.0.1:70000",
                          "http://127.0.0.1:2379/v3", "http://user@127.0.0.1:2379", "http://[::1]"}) {
    Result<Etcd> made = Etcd::Make({.endpoints = {"http://127.0.0.1:2379", bad}});
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "' was taken";
  }
  Result<Etcd> made =
      Etcd::Make({.endpoints = {"http://127.0.0.1:2379/", "http://[::1]:2379", "http://etcd-0:2379"}});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->options().endpoints.front(), "http://127.0.0.1:2379");
}

TEST(EtcdClientTest, PingOnDeadPortsIsUnavailableNamingEach) {
  const std::string a = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  const std::string b = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  Result<Etcd> etcd = Etcd::Make({.endpoints = {a, b}});
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  Status ping = etcd->Ping();
  EXPECT_EQ(ping.code(), StatusCode::kUnavailable) << ping.ToString();
  EXPECT_NE(ping.message().find(a), std::string::npos) << ping.ToString();
  EXPECT_NE(ping.message().find(b), std::string::npos) << ping.ToString();
  EXPECT_EQ(etcd->Put("k", "v").status().code(), StatusCode::kUnavailable);
  const Status watched = etcd->Watch("k", 0, [](const KeyValue&, bool) {}, [] { return true; });
  EXPECT_EQ(watched.code(), StatusCode::kUnavailable) << watched.ToString();
}

TEST(EtcdClientTest, ALeaseKeeperGivesUpWhenEtcdStaysUnreachablePastTheTtl) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  Result<Etcd> etcd = Etcd::Make({.endpoints = {dead}});
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  std::atomic<int> lost{0};
  LeaseKeeper keeper(*etcd, 7, 1, [&] { lost.fetch_add(1); });
  EXPECT_TRUE(WaitUntil([&] { return lost.load() > 0; }));
  EXPECT_TRUE(keeper.lost());
  EXPECT_EQ(keeper.rounds(), 0);
}

// A loopback HTTP server answering every request with the same status and body, then closing the
// connection; the body goes out in pieces of `piece` bytes (0: at once), each its own segment, so
// that a message reaches the client split.
class FakeServer {
 public:
  FakeServer(int status, std::string body, size_t piece = 0)
      : status_(status), body_(std::move(body)), piece_(piece) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    endpoint_ = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    close(listen_fd_);
  }
  Etcd Client() const { return Etcd::Make({.endpoints = {endpoint_}}).value(); }

 private:
  void Serve() {
    while (true) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      Answer(fd);
      close(fd);
    }
  }
  void Answer(int fd) {
    // The request's head, then as much body as it announces, so that closing sends no reset.
    std::string request;
    char buffer[65536];
    size_t head_end = std::string::npos;
    while (head_end == std::string::npos) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<size_t>(n));
      head_end = request.find("\r\n\r\n");
    }
    size_t length = 0;
    std::string head = request.substr(0, head_end);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (size_t at = head.find("content-length:"); at != std::string::npos) {
      length = std::stoul(head.substr(at + 15));
    }
    while (request.size() < head_end + 4 + length) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<size_t>(n));
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string response_head = "HTTP/1.1 " + std::to_string(status_) +
                                      " Fake\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    if (!SendAll(fd, response_head)) return;
    const size_t step = piece_ == 0 ? body_.size() : piece_;
    for (size_t at = 0; at < body_.size(); at += step) {
      if (!SendAll(fd, std::string_view(body_).substr(at, step))) return;
    }
    shutdown(fd, SHUT_WR);
    while (recv(fd, buffer, sizeof(buffer), 0) > 0) {
    }
  }
  static bool SendAll(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  const int status_;
  const std::string body_;
  const size_t piece_;
  int listen_fd_ = -1;
  std::string endpoint_;
  std::thread thread_;
};

// What a call makes of one fake answer.
Status Against(int status, const std::string& body, const std::function<Status(const Etcd&)>& call) {
  FakeServer server(status, body);
  return call(server.Client());
}

const auto kPing = [](const Etcd& e) { return e.Ping(); };
const auto kPut = [](const Etcd& e) { return e.Put("foo", "bar").status(); };
const auto kGet = [](const Etcd& e) { return e.Get("foo").status(); };
const auto kList = [](const Etcd& e) { return e.List("jobs/").status(); };
const auto kDelete = [](const Etcd& e) { return e.Delete("foo"); };
const auto kPutIf = [](const Etcd& e) { return e.PutIf("foo", "bar", 3).status(); };
const auto kGrant = [](const Etcd& e) { return e.GrantLease(5).status(); };
const auto kKeepAlive = [](const Etcd& e) { return e.KeepAlive(7); };
const auto kRevoke = [](const Etcd& e) { return e.Revoke(7); };

TEST(EtcdClientTest, MalformedAnswersAreCorruptionNotCrashes) {
  struct Case {
    const char* what;
    std::function<Status(const Etcd&)> call;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"not JSON", kPing, "<html>hello</html>"},
      {"no version", kPing, R"({"etcdcluster":"3.4.0"})"},
      {"an array", kPing, "[1,2]"},
      {"empty", kPut, ""},
      {"cut short", kPut, R"({"header":{"revision":"1")"},
      {"no header", kPut, "{}"},
      {"no revision", kPut, R"({"header":{}})"},
      {"a word for a revision", kPut, R"({"header":{"revision":"abc"}})"},
      {"digits then letters", kPut, R"({"header":{"revision":"12abc"}})"},
      {"beyond 64 bits", kPut, R"({"header":{"revision":"99999999999999999999999"}})"},
      {"an object for a revision", kPut, R"({"header":{"revision":{"n":1}}})"},
      {"a zero revision", kPut, R"({"header":{"revision":"0"}})"},
      {"kvs not an array", kGet, R"({"kvs":"x"})"},
      {"a key not base64", kGet, R"({"kvs":[{"key":"!!!!"}]})"},
      {"a value of bad length", kGet, R"({"kvs":[{"key":"Zm9v","value":"Zm9v="}]})"},
      {"padding inside", kGet, R"({"kvs":[{"key":"Zm9v","value":"Zg=v"}]})"},
      {"whitespace in base64", kGet, R"({"kvs":[{"key":"Zm9v","value":" Zm9"}]})"},
      {"a kv without key", kGet, R"({"kvs":[{"value":"eA=="}]})"},
      {"a kv not an object", kGet, R"({"kvs":[7]})"},
      {"a revision of the wrong type", kGet, R"({"kvs":[{"key":"Zm9v","mod_revision":{"a":1}}]})"},
      {"another key", kGet, R"({"kvs":[{"key":"YmFy"}]})"},
      {"two keys for one", kGet, R"({"kvs":[{"key":"Zm9v"},{"key":"Zm9v"}]})"},
      {"a key outside the prefix", kList, R"({"kvs":[{"key":"Zm9v"}]})"},
      {"a count that is a word", kDelete, R"({"deleted":"many"})"},
      {"succeeded not a boolean", kPutIf, R"({"header":{"revision":"3"},"succeeded":"yes"})"},
      {"a lease ID that is not a number", kGrant, R"({"ID":"12x","TTL":"5"})"},
      {"no lease ID", kGrant, R"({"TTL":"5"})"},
      {"a TTL that is a word", kKeepAlive, R"({"result":{"ID":"7","TTL":"soon"}})"},
      {"a result not an object", kKeepAlive, R"({"result":"x"})"},
      {"another lease", kKeepAlive, R"({"result":{"ID":"8","TTL":"5"}})"},
      {"garbage to a revoke", kRevoke, "garbage"},
  };
  for (const Case& c : cases) {
    const Status got = Against(200, c.body, c.call);
    EXPECT_EQ(got.code(), StatusCode::kCorruption) << c.what << ": " << got.ToString();
    EXPECT_NE(got.message().find("etcd at http://127.0.0.1:"), std::string::npos)
        << c.what << ": " << got.ToString();
  }
  EXPECT_EQ(Against(200, R"({"result":{"ID":"7"}})", kKeepAlive).code(), StatusCode::kNotFound)
      << "the gateway's answer about a lease that is gone";
}

TEST(EtcdClientTest, ErrorAnswersCarryEtcdsMessage) {
  const Status invalid = Against(
      400, R"({"error":"etcdserver: boom","message":"etcdserver: boom","code":3})", kPut);
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument) << invalid.ToString();
  EXPECT_NE(invalid.message().find("etcdserver: boom"), std::string::npos) << invalid.ToString();
  const std::string lease_not_found =
      R"({"error":"etcdserver: requested lease not found",)"
      R"("message":"etcdserver: requested lease not found","code":5})";
  const Status gone = Against(404, lease_not_found, kKeepAlive);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
  EXPECT_TRUE(Against(404, lease_not_found, kRevoke).ok()) << "a lease etcd says is gone needs no revoking";
  const Status not_etcd = Against(404, "404 page not found\n", kRevoke);
  EXPECT_EQ(not_etcd.code(), StatusCode::kFailedPrecondition)
      << "a 404 that is not etcd's is no proof the lease is gone: " << not_etcd.ToString();
  const Status no_leader = Against(503, R"({"error":"etcdserver: no leader","code":14})", kGet);
  EXPECT_EQ(no_leader.code(), StatusCode::kUnavailable) << no_leader.ToString();
  EXPECT_NE(no_leader.message().find("no leader"), std::string::npos) << no_leader.ToString();
  const Status proxy = Against(502, std::string("<html>bad \x01 gateway</html>"), kGet);
  EXPECT_EQ(proxy.code(), StatusCode::kUnavailable) << proxy.ToString();
  EXPECT_NE(proxy.message().find("HTTP 502"), std::string::npos) << proxy.ToString();
  const std::string no_leader_streamed =
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})";
  const Status streamed = Against(200, no_leader_streamed, kKeepAlive);
  EXPECT_EQ(streamed.code(), StatusCode::kUnavailable) << streamed.ToString();
  EXPECT_NE(streamed.message().find("no leader"), std::string::npos) << streamed.ToString();
}

TEST(EtcdClientTest, AnAnswerAbove64MiBIsRefused) {
  std::string body = R"({"kvs":[{"key":"Zm9v","value":")";
  body.append((size_t{64} << 20) + 4, 'A');
  body += R"("}]})";
  const Status got = Against(200, body, kGet);
  EXPECT_EQ(got.code(), StatusCode::kCorruption) << got.ToString();
  EXPECT_NE(got.message().find("larger than"), std::string::npos) << got.ToString();
}

// A watch against a fake stream: what it delivered, and how it ended.
std::pair<std::vector<Seen>, Status> WatchFake(const std::string& stream, size_t piece) {
  FakeServer server(200, stream, piece);
  std::vector<Seen> seen;
  auto record = [&](const KeyValue& kv, bool deleted) { seen.push_back({kv, deleted}); };
  Status ended = server.Client().Watch("jobs/", 0, record, [] { return true; });
  return {std::move(seen), ended};
}

TEST(EtcdClientTest, AWatchStreamSplitAnywhereIsReadWhole) {
  // Braces and quotes inside strings do not end a message; messages may share a piece or span
  // several.
  const std::string stream =
      R"({"result":{"header":{"revision":"4"},"created":true,"cancel_reason":"}{\"]\\"}})" "\n"
      R"({"result":{"header":{"revision":"5"},)"
      R"("events":[{"kv":{"key":"am9icy9h","mod_revision":"5","value":"MQ=="}}]}})" "\n"
      R"({"result":{"header":{"revision":"6"},"events":[{"kv":{"key":"am9icy9i","mod_revision":"6"}},)"
      R"({"type":"DELETE","kv":{"key":"am9icy9h","mod_revision":"6"}}]}})" "\n";
  for (size_t piece : {size_t{0}, size_t{1}, size_t{5}, size_t{64}}) {
    auto [seen, ended] = WatchFake(stream, piece);
    EXPECT_EQ(ended.code(), StatusCode::kUnavailable) << "pieces of " << piece << ": " << ended.ToString();
    ASSERT_EQ(seen.size(), 3u) << "pieces of " << piece;
    EXPECT_EQ(seen[0].kv.key, "jobs/a");
    EXPECT_EQ(seen[0].kv.value, "1");
    EXPECT_FALSE(seen[0].deleted);
    EXPECT_EQ(seen[1].kv.key, "jobs/b");
    EXPECT_FALSE(seen[1].deleted);
    EXPECT_EQ(seen[2].kv.key, "jobs/a");
    EXPECT_TRUE(seen[2].deleted);
    EXPECT_EQ(seen[2].kv.mod_revision, 6);
  }
}

TEST(EtcdClientTest, AMalformedWatchStreamIsAnError) {
  const std::string created = R"({"result":{"header":{"revision":"4"},"created":true}})" "\n";
  struct Case {
    const char* what;
    std::string stream;
    StatusCode code;
    std::string says = "";  // what the status's message holds
  };
  const std::vector<Case> cases = {
      {"not JSON", "garbage", StatusCode::kCorruption},
      {"an array", "[1]", StatusCode::kCorruption},
      {"bad JSON inside braces", created + R"({"result":{,}})", StatusCode::kCorruption},
      {"no result", created + R"({"header":{}})", StatusCode::kCorruption},
      {"events not an array", created + R"({"result":{"events":{}}})", StatusCode::kCorruption},
      {"a key not base64", created + R"({"result":{"events":[{"kv":{"key":"%%%%"}}]}})",
       StatusCode::kCorruption},
      {"an unknown type", created + R"({"result":{"events":[{"type":"EXPLODE","kv":{"key":"am9icy9h"}}]}})",
       StatusCode::kCorruption},
      {"an event without kv", created + R"({"result":{"events":[{"type":"PUT"}]}})", StatusCode::kCorruption},
      {"a key outside the prefix", created + R"({"result":{"events":[{"kv":{"key":"Zm9v"}}]}})",
       StatusCode::kCorruption},
      {"a revision that is a word",
       created + R"({"result":{"events":[{"kv":{"key":"am9icy9h","mod_revision":"x"}}]}})",
       StatusCode::kCorruption},
      {"nested beyond reason", created + std::string(100, '{'), StatusCode::kCorruption},
      {"canceled",
       created + R"({"result":{"canceled":true,"cancel_reason":"compacted","compact_revision":"9"}})",
       StatusCode::kFailedPrecondition, "compacted"},
      {"an error in the stream", created + R"({"error":{"grpc_code":14,"message":"etcdserver: no leader"}})",
       StatusCode::kUnavailable, "no leader"},
  };
  for (const Case& c : cases) {
    auto [seen, ended] = WatchFake(c.stream, 7);
    EXPECT_EQ(ended.code(), c.code) << c.what << ": " << ended.ToString();
    EXPECT_NE(ended.message().find(c.says), std::string::npos) << c.what << ": " << ended.ToString();
    EXPECT_TRUE(seen.empty()) << c.what << ": a change was delivered from a malformed message";
  }
}

}  // namespace
}  // namespace phos::cluster
