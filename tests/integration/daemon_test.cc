// phosd's failure handling end to end, with the probe function: each failure gets its HTTP
// error and the daemon keeps serving afterwards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "phos/base/subprocess.h"
#include "phosd_fixture.h"
#include "../testing/wait_until.h"

namespace phos::testing {
namespace {

class DaemonTest : public PhosdTest {
 protected:
  // HTTP status of POST <path> with `body` (curl -w), and extra curl arguments.
  std::string Status(const std::string& path, const std::string& body, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                                     "--data-binary", body};
    std::vector<std::string> admin = AdminHeader();
    argv.insert(argv.end(), admin.begin(), admin.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(endpoint() + path);
    return ::phos::testing::Run(argv).out;
  }
  void Deploy(int instances) {
    CommandResult r = PhosFn({"deploy", "probe", PHOS_PROBE_FN, "--instances", std::to_string(instances)});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  void ExpectServing() { EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "still").out, "still"); }

  // GET /metrics, parsed: families' HELP and TYPE lines, and each sample by its series
  // ("name{labels}" as written).
  struct Exposition {
    std::string text;
    std::map<std::string, std::string> helps, types;
    std::map<std::string, double> samples;

    // The family a series belongs to: its name, less a histogram's _bucket/_sum/_count.
    std::string FamilyOf(const std::string& series) const {
      std::string name = series.substr(0, series.find('{'));
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string_view s(suffix);
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
            types.count(name.substr(0, name.size() - s.size())) &&
            types.at(name.substr(0, name.size() - s.size())) == "histogram") {
          return name.substr(0, name.size() - s.size());
        }
      }
      return name;
    }
    // Series named `name` (whose labels contain `label`, if given).
    int Count(const std::string& name, const std::string& label = "") const {
      int n = 0;
      for (const auto& [series, value] : samples) {
        if (series.substr(0, series.find('{')) == name && series.find(label) != std::string::npos) ++n;
      }
      return n;
    }
    double Sum(const std::string& name) const {
      double sum = 0;
      for (const auto& [series, value] : samples) {
        if (series.substr(0, series.find('{')) == name) sum += value;
      }
      return sum;
    }
  };
  // phos-fn `args`, running until stopped, its standard output going to `out` (emptied first).
  Result<Subprocess> Follow(const std::vector<std::string>& args, const std::string& out) {
    std::filesystem::remove(out);
    SpawnOptions options;
    options.argv = PhosFnCommand(args);
    options.stdout_file = out;
    return Subprocess::Spawn(options);
  }
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  Exposition Scrape() {
    Exposition e;
    CommandResult r = ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/metrics"});
    EXPECT_EQ(r.exit_code, 0);
    e.text = r.out;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      std::istringstream words(line);
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::string hash, kind, name, rest;
        words >> hash >> kind >> name;
        std::getline(words >> std::ws, rest);
        (kind == "HELP" ? e.helps : e.types)[name] = rest;
        continue;
      }
      size_t space = line.rfind(' ');
      EXPECT_NE(space, std::string::npos) << "sample without a value: " << line;
      if (space == std::string::npos) continue;
      e.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
    return e;
  }
  // Raw bytes to the HTTP port; the first line of the answer.
  std::string RawStatusLine(const std::string& bytes) {
    int port = std::stoi(endpoint().substr(endpoint().rfind(':') + 1));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_GT(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0);
    char buf[256] = {};
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    std::string answer(buf, n > 0 ? n : 0);
    return answer.substr(0, answer.find("\r\n"));
  }
};

// GET /metrics parsed as Prometheus text: every sample's family has its HELP and TYPE lines, the
// latency families are histograms, and the counters move with an invocation.
TEST_F(DaemonTest, MetricsArePrometheusTextWithHistogramsAndMovingCounters) {
  Deploy(1);
  Exposition before = Scrape();
  EXPECT_EQ(before.types["phos_ctxpool_leases_total"], "counter");
  EXPECT_TRUE(before.samples.count(R"(phos_ctxpool_contexts{device="0",state="ready"})")) << before.text;
  ASSERT_EQ(CurlPost("/v1/functions/probe/invoke", "counted").out, "counted");
  Exposition after = Scrape();
  for (const Exposition* e : {&before, &after}) {
    for (const auto& [series, value] : e->samples) {
      std::string family = e->FamilyOf(series);
      EXPECT_TRUE(e->helps.count(family)) << "no # HELP for " << series;
      EXPECT_TRUE(e->types.count(family)) << "no # TYPE for " << series;
    }
  }
  for (const char* family : {"phos_ctxpool_lease_latency_seconds", "phos_ctxpool_create_seconds",
                             "phos_ctxpool_scrub_seconds", "phos_invocation_stage_seconds"}) {
    EXPECT_EQ(after.types[family], "histogram") << family;
    EXPECT_GT(after.Count(family + std::string("_bucket"), "le=\"+Inf\""), 0) << family << "\n" << after.text;
    EXPECT_GT(after.Count(family + std::string("_sum")), 0) << family;
    EXPECT_GT(after.Count(family + std::string("_count")), 0) << family;
  }
  EXPECT_EQ(after.Sum("phos_invocations_total"), before.Sum("phos_invocations_total") + 1) << after.text;
  EXPECT_GT(after.Sum("phos_invocation_stage_seconds_count"),
            before.Sum("phos_invocation_stage_seconds_count"));
  EXPECT_EQ(after.types["phos_speculation_misses_total"], "counter");
  // On simgpu, its engines' operations, read at each scrape: counts that never go back, of which
  // the host-bound are a part.
  for (const char* family : {"phos_simgpu_paced_ops_total", "phos_simgpu_host_bound_ops_total"}) {
    EXPECT_EQ(after.types[family], "counter") << family;
    for (const char* engine : {"h2d", "d2h", "compute"}) {
      ASSERT_TRUE(after.samples.count(std::string(family) + R"({device="0",engine=")" + engine + R"("})"))
          << family << " " << engine << "\n" << after.text;
    }
    EXPECT_GE(after.Sum(family), before.Sum(family)) << family;
  }
  EXPECT_LE(after.Sum("phos_simgpu_host_bound_ops_total"), after.Sum("phos_simgpu_paced_ops_total"));
}

TEST_F(DaemonTest, HttpErrorsAndTheDaemonKeepsServing) {
  Deploy(1);
  EXPECT_EQ(RawStatusLine("NOT HTTP AT ALL\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  ExpectServing();
  EXPECT_EQ(RawStatusLine("GET /healthz HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'h') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  ExpectServing();
  EXPECT_EQ(RawStatusLine("POST /v1/functions/probe/invoke HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n"),
            "HTTP/1.1 413 Content Too Large");
  ExpectServing();
  EXPECT_EQ(Status("/v1/functions/nope/invoke", "x"), "404");
  ExpectServing();
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "x", {"-H", "X-Phos-Timeout-Ms: soon"}), "400");
  EXPECT_EQ(Status("/v1/functions", "{not json"), "400");
}

// Raw HTTP on a socket of its own, read as the answer arrives.
class RawConnection {
 public:
  explicit RawConnection(const std::string& endpoint) {
    int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawConnection() { close(fd_); }
  void Send(const std::string& bytes) { EXPECT_GT(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0); }
  // Reads until `needle` arrived (true) or the connection closed (false). A phosd that sends
  // neither still ends the answer at the invocation's deadline.
  bool ReadUntil(std::string_view needle) {
    while (received_.find(needle) == std::string::npos) {
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        return false;
      }
      received_.append(buf, n);
    }
    return true;
  }
  bool closed() const { return closed_; }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

// A function answering in pieces: phosd forwards each piece as an HTTP chunk while the function
// is still working on the next (it waits for a file the test creates only once the first piece
// arrived).
TEST_F(DaemonTest, PiecesOfAnAnswerArriveAsChunksAsTheyAreMade) {
  Deploy(1);
  const std::string go = ::testing::TempDir() + "phos-probe-go-on-" + std::to_string(getpid());
  std::filesystem::remove(go);
  const std::string body = "pieces:" + go;
  RawConnection c(endpoint());
  c.Send("POST /v1/functions/probe/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body);
  ASSERT_TRUE(c.ReadUntil("6\r\nfirst\n\r\n")) << c.received();
  EXPECT_EQ(c.received().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << c.received();
  EXPECT_NE(c.received().find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(c.received().find("X-Phos-Stage-First-Byte-Us: "), std::string::npos);
  EXPECT_EQ(c.received().find("second"), std::string::npos) << "the function has not made it yet";
  std::FILE* f = std::fopen(go.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  ASSERT_TRUE(c.ReadUntil("7\r\nsecond\n\r\n0\r\n\r\n")) << c.received();
  // phos-fn prints each piece as it comes: the first before the function has made the second.
  std::filesystem::remove(go);
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  SpawnOptions options;
  options.argv = {PHOS_PHOS_FN, "--endpoint", endpoint(), "invoke", "probe", "--data", body};
  options.fds = {{out[1], 1}};
  Result<Subprocess> phos_fn = Subprocess::Spawn(options);
  ASSERT_TRUE(phos_fn.ok()) << phos_fn.status().ToString();
  close(out[1]);
  std::string printed;
  char buf[256];
  for (ssize_t n; printed.find("first\n") == std::string::npos && (n = read(out[0], buf, sizeof(buf))) > 0;) {
    printed.append(buf, n);
  }
  EXPECT_EQ(printed, "first\n");
  std::FILE* g = std::fopen(go.c_str(), "w");
  ASSERT_NE(g, nullptr);
  std::fclose(g);
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) printed.append(buf, n);
  close(out[0]);
  Result<ExitStatus> how = phos_fn->Wait(std::chrono::minutes(1));
  ASSERT_TRUE(how.ok());
  EXPECT_TRUE(how->success()) << how->ToString();
  EXPECT_EQ(printed, "first\nsecond\n");
  std::filesystem::remove(go);
  ExpectServing();
}

// A burst over a function's queue bound (max_queue 2): while its one instance is held busy (the
// probe's "pieces:" waits for a file, the test's hook), two invocations queue and the rest are
// refused at once, 429 with Retry-After; once the instance is free the two queued are served, and
// nothing else failed.
TEST_F(DaemonTest, ABurstOverTheQueueBoundGets429WithRetryAfterAndNothingElseFails) {
  CommandResult deployed = PhosFn({"deploy", "probe", PHOS_PROBE_FN, "--instances", "1", "--max-instances", "1",
                                   "--max-queue", "2"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const std::string go = ::testing::TempDir() + "phos-probe-queue-" + std::to_string(getpid());
  std::filesystem::remove(go);
  const std::string held_body = "pieces:" + go;
  RawConnection held(endpoint());
  held.Send("POST /v1/functions/probe/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: " +
            std::to_string(held_body.size()) + "\r\n\r\n" + held_body);
  ASSERT_TRUE(held.ReadUntil("6\r\nfirst\n\r\n")) << held.received();  // the instance is busy until `go` exists
  constexpr int kBurst = 6;
  constexpr int kQueued = 2;
  std::vector<HttpResponse> answers(kBurst);
  std::atomic<int> answered{0};
  std::vector<std::thread> burst;
  for (int i = 0; i < kBurst; ++i) {
    burst.emplace_back([&, i] {
      answers[i] = ParseCurl(::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "--data-binary",
                                                   "echo-" + std::to_string(i),
                                                   endpoint() + "/v1/functions/probe/invoke"})
                                 .out);
      ++answered;
    });
  }
  // Those beyond the bound are answered while the instance is still held.
  EXPECT_TRUE(WaitUntil([&] { return answered.load() >= kBurst - kQueued; }));
  EXPECT_EQ(answered.load(), kBurst - kQueued) << "queued invocations were answered while the instance was busy";
  std::FILE* f = std::fopen(go.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  for (auto& t : burst) t.join();
  ASSERT_TRUE(held.ReadUntil("0\r\n\r\n")) << held.received();
  std::filesystem::remove(go);
  int refused = 0;
  int served = 0;
  for (int i = 0; i < kBurst; ++i) {
    SCOPED_TRACE("invocation " + std::to_string(i));
    if (answers[i].status == 429) {
      ++refused;
      EXPECT_EQ(answers[i].headers["retry-after"], "1");
      EXPECT_NE(answers[i].body.find("\"too_many_requests\""), std::string::npos) << answers[i].body;
    } else {
      ++served;
      EXPECT_EQ(answers[i].status, 200) << answers[i].body;
      EXPECT_EQ(answers[i].body, "echo-" + std::to_string(i));
    }
  }
  EXPECT_EQ(refused, kBurst - kQueued);
  EXPECT_EQ(served, kQueued);
  EXPECT_EQ(Scrape().Sum("phos_invocations_refused_total"), kBurst - kQueued);
  ExpectServing();
}

// A function deployed with no warm instance and a keep-alive of its own scales to zero once idle
// for that long, and the next request restores an instance for it.
TEST_F(DaemonTest, AFunctionsKeepAliveScalesItToZeroAndTheNextRequestRestoresIt) {
  CommandResult deployed = PhosFn({"deploy", "probe", PHOS_PROBE_FN, "--instances", "0", "--keep-alive-ms", "200"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  auto instances = [&] {
    nlohmann::json j = nlohmann::json::parse(PhosFn({"instances", "probe", "--json"}).out, nullptr, false);
    return j.is_object() && j.contains("instances") ? static_cast<int>(j["instances"].size()) : -1;
  };
  auto invoke = [&] {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "--data-binary", "instance"};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.push_back(endpoint() + "/v1/functions/probe/invoke");
    return ParseCurl(::phos::testing::Run(argv).out);
  };
  HttpResponse first = invoke();
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.headers["x-phos-restore-mode"], "phos");
  EXPECT_TRUE(WaitUntil([&] { return instances() == 0; })) << "it did not scale to zero";
  // phos-fn describe shows its settings and, now, no instance.
  CommandResult described = PhosFn({"describe", "probe"});
  ASSERT_EQ(described.exit_code, 0) << described.out;
  nlohmann::json j = nlohmann::json::parse(described.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << described.out;
  EXPECT_EQ(j["function"].value("keep_alive_ms", 0), 200) << described.out;
  EXPECT_EQ(j["function"].value("instances", -1), 0) << described.out;
  EXPECT_TRUE(j["instances"].empty()) << described.out;
  EXPECT_EQ(PhosFn({"describe", "absent"}).exit_code, 1);
  EXPECT_EQ(PhosFn({"describe"}).exit_code, 2);  // a wrong command line
  HttpResponse second = invoke();
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.headers["x-phos-restore-mode"], "phos");
  EXPECT_NE(second.body, first.body) << "the same instance answered: it never ended";
}

// A function's timeout is its invocations' deadline when the caller gives none; a caller's own wins.
TEST_F(DaemonTest, AFunctionsTimeoutIsTheDeadlineOfInvocationsThatGiveNone) {
  CommandResult deployed = PhosFn({"deploy", "probe", PHOS_PROBE_FN, "--timeout-ms", "300"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "hang"), "504");
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "sleep:1000", {"-H", "X-Phos-Timeout-Ms: 60000"}), "200");
  CommandResult bad = PhosFn({"deploy", "other", PHOS_PROBE_FN, "--timeout-ms", "4000000"});
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(CurlPost("/v1/functions", R"({"name": "other", "executable": ")" + std::string(PHOS_PROBE_FN) +
                                          R"(", "max_queue": -1})")
                .out.find("max_queue must be 0..100000"),
            std::string::npos);
}

// A function's logs: what its instances print, through GET /v1/functions/{name}/logs and phos-fn
// logs; followed (-f), each line arrives while phos-fn runs, printed as the instance prints it.
TEST_F(DaemonTest, PhosFnLogsFollowsWhatAnInstancePrints) {
  Deploy(1);
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "say:first-line").out, "said");
  CommandResult printed = PhosFn({"logs", "probe"});
  ASSERT_EQ(printed.exit_code, 0) << printed.out;
  EXPECT_NE(printed.out.find("==> probe-"), std::string::npos) << printed.out;
  EXPECT_NE(printed.out.find("first-line\n"), std::string::npos) << printed.out;

  const std::string out = ::testing::TempDir() + "phos-logs-" + std::to_string(getpid());
  Result<Subprocess> follower = Follow({"logs", "probe", "-f", "--tail", "0"}, out);
  ASSERT_TRUE(follower.ok()) << follower.status().ToString();
  auto followed = [&] { return ReadAll(out); };
  // It follows once the headers of the files (none of their bytes: --tail 0) have come.
  ASSERT_TRUE(WaitUntil([&] { return followed().find("==> probe-") != std::string::npos; })) << followed();
  // --tail 0: what was printed before it started is not repeated; what comes next is.
  for (const char* line : {"second-line", "third-line"}) {
    EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", std::string("say:") + line).out, "said");
    EXPECT_TRUE(WaitUntil([&] { return followed().find(std::string(line) + "\n") != std::string::npos; }))
        << line << " never arrived: " << followed();
  }
  EXPECT_EQ(followed().find("first-line"), std::string::npos) << followed();
  Result<ExitStatus> stopped = follower->Stop(std::chrono::seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  std::filesystem::remove(out);
  // A function that is not there, and a bad parameter.
  EXPECT_NE(PhosFn({"logs", "absent"}).exit_code, 0);
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"};
  for (const std::string& h : AdminHeader()) argv.push_back(h);
  argv.push_back(endpoint() + "/v1/functions/probe/logs?tail=lots");
  EXPECT_EQ(::phos::testing::Run(argv).out, "400");
  ExpectServing();
}

// phos-fn top: the function's instances from phosd's listing, and the invocations by mode with
// their time to the first byte from its metrics (prometheus-cpp's text, read back by phos-fn).
TEST_F(DaemonTest, TopShowsInstancesAndInvocationsByMode) {
  Deploy(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Status("/v1/functions/probe/invoke", "x", {"-H", "X-Phos-Restore-Mode: phos"}), "200");
  }
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "warm-one").out, "warm-one");
  CommandResult frame = PhosFn({"top", "--once", "--json"});
  ASSERT_EQ(frame.exit_code, 0) << frame.out;
  nlohmann::json j = nlohmann::json::parse(frame.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << frame.out;
  ASSERT_EQ(j["functions"].size(), 1u) << frame.out;
  EXPECT_EQ(j["functions"][0].value("name", ""), "probe");
  EXPECT_EQ(j["functions"][0].value("version", 0), 1);
  // What the metrics count, by mode: three restores, and at least the warm one.
  std::map<std::string, nlohmann::json> modes;
  for (const auto& m : j["modes"]) modes[m.value("mode", "")] = m;
  ASSERT_EQ(modes.count("phos"), 1u) << frame.out;
  EXPECT_EQ(modes["phos"].value("invocations", 0), 3) << frame.out;
  ASSERT_TRUE(modes["phos"].contains("first_byte_ms")) << frame.out;
  const nlohmann::json& latency = modes["phos"]["first_byte_ms"];
  EXPECT_GT(latency.value("mean", 0.0), 0.0) << frame.out;
  EXPECT_LE(latency.value("p50", 0.0), latency.value("p99", 0.0)) << frame.out;
  EXPECT_GE(modes["warm"].value("invocations", 0), 1) << frame.out;
  CommandResult table = PhosFn({"top", "--once"});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("FUNCTION"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("probe"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("phos"), std::string::npos) << table.out;
}

// phos-fn events follows what becomes of instances: subscribed first, then, as they happen, the warm
// instance evicted for a request's restore and the new instance up (started: the probe holds no
// GPU state, so nothing of it is restored from a snapshot).
TEST_F(DaemonTest, PhosFnEventsFollowsInstancesAsTheyComeAndGo) {
  Deploy(1);
  const std::string out = ::testing::TempDir() + "phos-events-" + std::to_string(getpid());
  Result<Subprocess> follower = Follow({"events", "--json"}, out);
  ASSERT_TRUE(follower.ok()) << follower.status().ToString();
  auto followed = [&] { return ReadAll(out); };
  ASSERT_TRUE(WaitUntil([&] { return followed().find(R"({"event":"subscribed"})") != std::string::npos; }))
      << followed();
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "x", {"-H", "X-Phos-Restore-Mode: phos"}), "200");
  EXPECT_TRUE(WaitUntil([&] {
    const std::string now = followed();
    return now.find(R"("event":"evicted","function":"probe")") != std::string::npos &&
           now.find(R"("event":"started","function":"probe")") != std::string::npos;
  })) << followed();
  Result<ExitStatus> stopped = follower->Stop(std::chrono::seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  std::filesystem::remove(out);
}

// Versions through phos-fn: a new version serves once deployed, `versions` lists them, `rollback`
// serves the earlier one again, a kept one can be deleted; each version's logs are the function's.
TEST_F(DaemonTest, VersionsRollBack) {
  ASSERT_EQ(PhosFn({"deploy", "probe", PHOS_PROBE_FN, "--env", "V=one"}).exit_code, 0);
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "env:V").out, "one");
  // A taken name is refused (409): a deploy of it again is a new version.
  EXPECT_EQ(PhosFn({"deploy", "probe", PHOS_PROBE_FN}).exit_code, 1);
  CommandResult second = PhosFn({"deploy", "--new-version", "probe", PHOS_PROBE_FN, "--env", "V=two"});
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(second.out.find("deployed probe version 2"), std::string::npos) << second.out;
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "env:V").out, "two");
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "say:from-two").out, "said");
  auto states = [&] {
    nlohmann::json j = nlohmann::json::parse(PhosFn({"versions", "probe", "--json"}).out, nullptr, false);
    std::string out;
    if (!j.is_object() || !j.contains("versions")) return out;
    for (const auto& v : j["versions"]) out += std::to_string(v.value("version", 0)) + ":" + v.value("state", "") + " ";
    return out;
  };
  EXPECT_EQ(states(), "1:kept 2:serving ");
  CommandResult table = PhosFn({"versions", "probe"});
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("serving"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(PHOS_PROBE_FN), std::string::npos) << table.out;

  CommandResult back = PhosFn({"rollback", "probe"});
  ASSERT_EQ(back.exit_code, 0) << back.out;
  EXPECT_NE(back.out.find("version 1 serves"), std::string::npos) << back.out;
  EXPECT_EQ(CurlPost("/v1/functions/probe/invoke", "env:V").out, "one");
  EXPECT_EQ(states(), "1:serving 2:kept ");
  EXPECT_EQ(PhosFn({"rollback", "probe", "--to", "1"}).exit_code, 1);  // it serves already
  EXPECT_EQ(PhosFn({"versions", "probe", "--delete", "1"}).exit_code, 1);
  ASSERT_EQ(PhosFn({"versions", "probe", "--delete", "2"}).exit_code, 0);
  EXPECT_EQ(states(), "1:serving ");
  // What version 2 printed is still among the function's logs.
  EXPECT_NE(PhosFn({"logs", "probe"}).out.find("from-two"), std::string::npos);
  EXPECT_EQ(PhosFn({"versions", "absent"}).exit_code, 1);
  ExpectServing();
}

// An instance lost after the first piece: the answer is cut short (no last chunk, the connection
// closed), and the next request is served by a fresh instance.
TEST_F(DaemonTest, AnAnswerInPiecesCutShortByACrashIsNotMadeToLookWhole) {
  Deploy(1);
  RawConnection c(endpoint());
  c.Send("POST /v1/functions/probe/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\npiece-then-crash");
  // Read to the end: the connection closes, and the body holds the first piece and no last chunk
  // (searched after the head, whose last header may well end in 0).
  EXPECT_FALSE(c.ReadUntil("no such text")) << c.received();
  EXPECT_TRUE(c.closed()) << c.received();
  const size_t head_end = c.received().find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << c.received();
  EXPECT_EQ(c.received().substr(head_end + 4), "6\r\nfirst\n\r\n") << c.received();
  ExpectServing();
}

// A function knows the id of the request it serves (phos::fn::RequestId()): the client's
// X-Request-Id, or the one phosd made and answers with; and none outside a handler's request.
TEST_F(DaemonTest, AFunctionSeesTheIdOfTheRequestItServes) {
  Deploy(1);
  const std::string invoke = endpoint() + "/v1/functions/probe/invoke";
  CommandResult given = ::phos::testing::Run(
      {"/usr/bin/curl", "-s", "-H", "X-Request-Id: trace-42.a", "--data", "request-id", invoke});
  EXPECT_EQ(given.out, "trace-42.a");
  CommandResult made = ::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "--data", "request-id", invoke});
  const size_t header = made.out.find("X-Request-Id: ");
  ASSERT_NE(header, std::string::npos) << made.out;
  const std::string id = made.out.substr(header + 14, 32);
  EXPECT_EQ(made.out.substr(made.out.find("\r\n\r\n") + 4), id) << made.out;
  // Each request its own: the next one does not see the last one's.
  CommandResult next = ::phos::testing::Run(
      {"/usr/bin/curl", "-s", "-H", "X-Request-Id: second", "--data", "request-id", invoke});
  EXPECT_EQ(next.out, "second");
}

// PHOS_LOG_SUBSYS (or --log-subsys) filters phosd's own lines below warn by subsystem.
class DaemonLogFilterTest : public DaemonTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--log-subsys", "^http"}; }
};

TEST_F(DaemonLogFilterTest, PhosdsOwnLinesAreFilteredBySubsystem) {
  Deploy(1);
  const std::string log = PhosdLog();
  EXPECT_EQ(log.find("[http]"), std::string::npos) << log;  // "listening on ..." is an [http] info line
  EXPECT_NE(log.find("[instances]"), std::string::npos) << log;
}

// While a deploy is under way, the listing says what it is doing; on a terminal, phos-fn deploy
// shows that on a line of its own it rewrites, and nothing of it when its output is no terminal.
TEST_F(DaemonTest, ADeployUnderWaySaysWhatItIsDoing) {
  const std::string token_file = data_dir() + "/admin.token";
  // The function waits before its entry point until this file exists (the test's hook).
  const std::string go = ::testing::TempDir() + "phos-deploy-go-on-" + std::to_string(getpid());
  std::filesystem::remove(go);
  // phos-fn deploy under a pseudo-terminal (script).
  SpawnOptions options;
  options.argv = {"/usr/bin/script", "-qfec",
                  std::string(PHOS_PHOS_FN) + " --endpoint " + endpoint() + " --token-file " + token_file +
                      " deploy slow " + PHOS_PROBE_FN + " -- --wait-at-start " + go,
                  "/dev/null"};
  options.stdout_file = data_dir() + ".script";
  options.stderr_to_stdout = true;
  Result<Subprocess> deploy = Subprocess::Spawn(options);
  ASSERT_TRUE(deploy.ok()) << deploy.status().ToString();
  std::string seen;
  const bool stage_seen = WaitUntil([&] {
    nlohmann::json j = nlohmann::json::parse(::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out,
                                             nullptr, false);
    if (!j.is_object() || !j["functions"].is_array()) return false;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") == "slow") seen = f.value("deploy_stage", "");
    }
    return seen == "running to its entry point";
  });
  EXPECT_TRUE(stage_seen) << "last stage seen: '" << seen << "'";
  // phos-fn's line says so too before the function may go on (script writes through, -f).
  auto shown_so_far = [&] {
    std::ifstream in(data_dir() + ".script");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  EXPECT_TRUE(WaitUntil([&] {
    return shown_so_far().find("\r\033[Kdeploying slow: running to its entry point (") != std::string::npos;
  })) << shown_so_far();
  std::ofstream(go) << "go\n";
  Result<ExitStatus> ended = deploy->Wait(std::chrono::seconds(120));
  std::filesystem::remove(go);
  ASSERT_TRUE(ended.ok() && ended->success()) << (ended.ok() ? ended->ToString() : ended.status().ToString());
  const std::string shown = shown_so_far();
  EXPECT_NE(shown.find("\r\033[Kdeploying slow: running to its entry point ("), std::string::npos) << shown;
  EXPECT_NE(shown.find("deployed slow"), std::string::npos) << shown;
  std::remove((data_dir() + ".script").c_str());
  // Deployed: no stage any more.
  const std::string listed = ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out;
  EXPECT_EQ(listed.find("deploy_stage"), std::string::npos) << listed;
  // Not on a terminal: the outcome alone.
  CommandResult plain = PhosFn({"deploy", "plain", PHOS_PROBE_FN});
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(plain.out.find("\033[K"), std::string::npos) << plain.out;
}

// A function process finds phos's CUDA libraries as the phosd serving it has them (its tree's
// lib/phos/frontend) first on its library path, whatever the function was linked against.
TEST_F(DaemonTest, AFunctionUsesTheCudaLibrariesOfThePhosdServingIt) {
  Deploy(1);
  const std::string path = CurlPost("/v1/functions/probe/invoke", "env:LD_LIBRARY_PATH").out;
  const std::string frontend =
      std::filesystem::canonical(std::filesystem::path(PHOS_PHOSD).parent_path() / "../lib/phos/frontend").string();
  EXPECT_EQ(path.substr(0, path.find(':')), frontend) << path;
}

TEST_F(DaemonTest, CrashGives502AndAFreshInstanceServesNext) {
  Deploy(1);
  std::string before = CurlPost("/v1/functions/probe/invoke", "instance").out;
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "crash"), "502");
  std::string after = CurlPost("/v1/functions/probe/invoke", "instance").out;
  EXPECT_FALSE(after.empty());
  EXPECT_NE(after, before);
  ExpectServing();
}

TEST_F(DaemonTest, HangGives504AndPhosFnExits1) {
  Deploy(1);
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "hang", {"-H", "X-Phos-Timeout-Ms: 300"}), "504");
  CommandResult r = PhosFn({"invoke", "probe", "--data", "hang", "--timeout-ms", "300"});
  EXPECT_EQ(r.exit_code, 1);
  ExpectServing();
}

TEST_F(DaemonTest, SixteenConcurrentOverTwoInstances) {
  Deploy(2);
  std::vector<std::string> out(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] { out[i] = CurlPost("/v1/functions/probe/invoke", "echo-" + std::to_string(i)).out; });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], "echo-" + std::to_string(i));
  CommandResult ls = PhosFn({"ls", "--json"});
  EXPECT_NE(ls.out.find("\"instances\":2"), std::string::npos) << ls.out;
  EXPECT_EQ(PhosFn({"rm", "probe"}).exit_code, 0);
  EXPECT_EQ(Status("/v1/functions/probe/invoke", "x"), "404");
}

// The fixture's check of phosd's and the functions' logs (TearDown) finds a report of each
// sanitizer by its summary line, and only a sanitizer's.
TEST(SanitizerReportTest, FindsEachSanitizersReportAndNothingElse) {
  const std::string path = ::testing::TempDir() + "sanitizer_report_test.log";
  auto write = [&](const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write("I1124 [phosd.cc:12] listening\nSUMMARY: 3 functions\nthe SUMMARY: line of a tenant\n");
  EXPECT_EQ(SanitizerReport(path), "");
  const std::string asan =
      "==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602\n    #0 0x4f in Parse x.cc:3\n"
      "SUMMARY: AddressSanitizer: heap-buffer-overflow x.cc:3 in Parse";
  write("I1124 [phosd.cc:12] listening\n" + asan + "\nShadow bytes around the buggy address:\n");
  EXPECT_EQ(SanitizerReport(path), "I1124 [phosd.cc:12] listening\n" + asan);
  write("x.cc:7:3: runtime error: signed integer overflow\nSUMMARY: UndefinedBehaviorSanitizer: "
        "undefined-behavior x.cc:7:3\n");
  EXPECT_NE(SanitizerReport(path).find("runtime error: signed integer overflow"), std::string::npos);
  write("WARNING: ThreadSanitizer: data race (pid=7)\nSUMMARY: ThreadSanitizer: data race y.cc:9 in Run");
  EXPECT_NE(SanitizerReport(path).find("data race (pid=7)"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_EQ(SanitizerReport(path), "");  // no log at all
}

}  // namespace
}  // namespace phos::testing
