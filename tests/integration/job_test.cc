// Long-running jobs under phosd (docs/design.md D10), on the train function: its losses against a
// CPU reference written here, and a job killed at 20 random points (its instance, or phosd itself)
// that resumes from its checkpoints and answers every step exactly as an uninterrupted run does.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../testing/wait_until.h"
#include "phosd_fixture.h"
#include "train_data.h"

namespace phos::testing {
namespace {

constexpr int kSteps = 240;
constexpr int kCheckpointEvery = 10;
constexpr int kKeep = 3;

// The train function's steps computed on the CPU: its loss before each step's update, in order.
// Written from the model's definition (a ReLU layer, then a linear one; half the mean over the
// batch of the squared error; Adam), not from the kernels.
std::vector<float> ReferenceLosses(const train::Shape& s, uint32_t seed, const train::Adam& adam, int steps) {
  const int D = s.inputs, H = s.hidden, O = s.outputs, B = s.batch;
  std::vector<float> w1(H * D), b1(H, 0.0f), w2(O * H), b2(O, 0.0f);
  for (int j = 0; j < H; ++j)
    for (int d = 0; d < D; ++d) w1[j * D + d] = train::InitialParameter(s, seed, s.w1() + j * D + d);
  for (int k = 0; k < O; ++k)
    for (int j = 0; j < H; ++j) w2[k * H + j] = train::InitialParameter(s, seed, s.w2() + k * H + j);
  std::vector<float*> params = {w1.data(), b1.data(), w2.data(), b2.data()};
  const std::vector<size_t> sizes = {w1.size(), b1.size(), w2.size(), b2.size()};
  std::vector<std::vector<float>> m, v;
  for (size_t n : sizes) {
    m.emplace_back(n, 0.0f);
    v.emplace_back(n, 0.0f);
  }
  std::vector<float> losses;
  for (int t = 1; t <= steps; ++t) {
    std::vector<std::vector<float>> x(B, std::vector<float>(D)), y(B, std::vector<float>(O, 0.0f));
    std::vector<std::vector<float>> h(B, std::vector<float>(H)), out(B, std::vector<float>(O));
    for (int b = 0; b < B; ++b) {
      for (int d = 0; d < D; ++d) x[b][d] = train::Input(seed, t, b, d);
      for (int k = 0; k < O; ++k)
        for (int d = 0; d < D; ++d) y[b][k] += train::Teacher(seed, k, d) * x[b][d];
      for (int j = 0; j < H; ++j) {
        float a = b1[j];
        for (int d = 0; d < D; ++d) a += w1[j * D + d] * x[b][d];
        h[b][j] = std::max(a, 0.0f);
      }
      for (int k = 0; k < O; ++k) {
        float a = b2[k];
        for (int j = 0; j < H; ++j) a += w2[k * H + j] * h[b][j];
        out[b][k] = a;
      }
    }
    float loss = 0.0f;
    std::vector<float> gw1(w1.size(), 0.0f), gb1(H, 0.0f), gw2(w2.size(), 0.0f), gb2(O, 0.0f);
    for (int b = 0; b < B; ++b) {
      for (int k = 0; k < O; ++k) loss += (out[b][k] - y[b][k]) * (out[b][k] - y[b][k]);
    }
    losses.push_back(0.5f * loss / B);
    for (int b = 0; b < B; ++b) {
      std::vector<float> dout(O), dh(H, 0.0f);
      for (int k = 0; k < O; ++k) dout[k] = (out[b][k] - y[b][k]) / B;
      for (int j = 0; j < H; ++j) {
        float a = 0.0f;
        for (int k = 0; k < O; ++k) a += w2[k * H + j] * dout[k];
        dh[j] = h[b][j] > 0.0f ? a : 0.0f;
      }
      for (int k = 0; k < O; ++k) {
        gb2[k] += dout[k];
        for (int j = 0; j < H; ++j) gw2[k * H + j] += dout[k] * h[b][j];
      }
      for (int j = 0; j < H; ++j) {
        gb1[j] += dh[j];
        for (int d = 0; d < D; ++d) gw1[j * D + d] += dh[j] * x[b][d];
      }
    }
    const std::vector<const float*> grads = {gw1.data(), gb1.data(), gw2.data(), gb2.data()};
    for (size_t p = 0; p < params.size(); ++p) {
      for (size_t i = 0; i < sizes[p]; ++i) {
        const float g = grads[p][i];
        m[p][i] = adam.beta1 * m[p][i] + (1 - adam.beta1) * g;
        v[p][i] = adam.beta2 * v[p][i] + (1 - adam.beta2) * g * g;
        const float m_hat = m[p][i] / (1 - std::pow(adam.beta1, static_cast<float>(t)));
        const float v_hat = v[p][i] / (1 - std::pow(adam.beta2, static_cast<float>(t)));
        params[p][i] -= adam.lr * m_hat / (std::sqrt(v_hat) + adam.eps);
      }
    }
  }
  return losses;
}

class JobTest : public PhosdTest {
 protected:
  nlohmann::json Get(const std::string& path) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s"};
    for (const std::string& h : AdminHeader()) argv.push_back(h);
    argv.push_back(endpoint() + path);
    return nlohmann::json::parse(::phos::testing::Run(argv).out, nullptr, false);
  }
  // What the DRAM tier keeps pinned (GET /metrics), or -1 when phosd does not say.
  double DramPinnedBytes() {
    std::istringstream lines(::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/metrics"}).out);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("phos_dram_tier_pinned_bytes ", 0) == 0) return std::stod(line.substr(line.find(' ') + 1));
    }
    return -1;
  }
  int64_t Step(const std::string& job) {
    nlohmann::json j = Get("/v1/functions/" + job + "/job");
    return j.is_object() ? j.value("step", int64_t{-1}) : -1;
  }
  void DeployJob(const std::string& name, int steps = kSteps) {
    CommandResult deployed =
        PhosFn({"deploy", name, PHOS_TRAIN_FUNCTION, "--job", "--checkpoint-every", std::to_string(kCheckpointEvery),
                "--keep-checkpoints", std::to_string(kKeep), "--steps", std::to_string(steps)});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  }
  bool Finished(const std::string& job) {
    return WaitUntil([&] {
      nlohmann::json j = Get("/v1/functions/" + job + "/job");
      return j.is_object() && j.value("finished", false);
    }, std::chrono::minutes(5));
  }
  // Every step's loss as the job's losses file has it, the last line of a step counting; and how
  // many lines it had.
  std::map<int64_t, std::string> Losses(const std::string& job, size_t* lines = nullptr) {
    std::ifstream in(data_dir() + "/jobs/" + job + "/losses.tsv");
    std::map<int64_t, std::string> losses;
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      int64_t step = 0;
      std::string loss;
      if (fields >> step >> loss) losses[step] = loss;
      ++n;
    }
    if (lines != nullptr) *lines = n;
    return losses;
  }
};

TEST_F(JobTest, ATrainingJobsLossesFollowTheCpuReference) {
  ASSERT_NO_FATAL_FAILURE(DeployJob("train"));
  const double pinned_at_deploy = DramPinnedBytes();
  ASSERT_TRUE(Finished("train")) << PhosdLog();
  // The deploy's snapshot is kept hot in the DRAM tier; the job's checkpoints, read only when it
  // resumes, are not.
  EXPECT_GT(pinned_at_deploy, 0);
  EXPECT_LE(DramPinnedBytes(), pinned_at_deploy);
  std::map<int64_t, std::string> losses = Losses("train");
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  const std::vector<float> expected = ReferenceLosses(train::Shape{}, 7, train::Adam{}, kSteps);
  for (int t = 1; t <= kSteps; ++t) {
    const double got = std::stod(losses[t]);
    EXPECT_NEAR(got, expected[t - 1], 1e-4 * std::max(1.0, std::fabs(static_cast<double>(expected[t - 1]))))
        << "step " << t;
  }
  // It learns: the last steps' loss is well below the first's.
  EXPECT_LT(std::stod(losses[kSteps]), 0.5 * std::stod(losses[1]));
  nlohmann::json job = Get("/v1/functions/train/job");
  ASSERT_TRUE(job.contains("checkpoints")) << job.dump();
  EXPECT_GE(job["checkpoints"].size(), 1u);
  EXPECT_LE(job["checkpoints"].size(), static_cast<size_t>(kKeep));
  // K steps apart at least: the next is asked once the one copying has ended.
  for (size_t i = 1; i < job["checkpoints"].size(); ++i) {
    EXPECT_GE(job["checkpoints"][i].value("step", 0) - job["checkpoints"][i - 1].value("step", 0), kCheckpointEvery)
        << job.dump();
  }
}

// Under ThreadSanitizer (kStableDeviceAddresses false) a restarted phosd's instance ranges are not
// where the checkpoints were taken: a job cannot resume across a phosd restart there, and the test
// kills only instances.

TEST_F(JobTest, AJobKilledAtTwentyRandomPointsAnswersEveryStepAsAnUninterruptedRun) {
  ASSERT_NO_FATAL_FAILURE(DeployJob("uninterrupted"));
  ASSERT_TRUE(Finished("uninterrupted")) << PhosdLog();
  const std::map<int64_t, std::string> expected = Losses("uninterrupted");
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));

  ASSERT_NO_FATAL_FAILURE(DeployJob("killed"));
  std::mt19937 rng(20261129);
  std::vector<int64_t> points;
  for (int i = 0; i < 20; ++i) points.push_back(std::uniform_int_distribution<int64_t>(2, kSteps - 2)(rng));
  std::sort(points.begin(), points.end());
  int killed_phosd = 0;
  int killed_instances = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    SCOPED_TRACE("kill point " + std::to_string(i) + " at step " + std::to_string(points[i]));
    // A step at least this far, or the job finished meanwhile (it ran past the point).
    ASSERT_TRUE(WaitUntil([&] { return Step("killed") >= points[i]; }, std::chrono::minutes(2))) << PhosdLog();
    if (i % 5 == 4 && kStableDeviceAddresses) {
      EXPECT_EQ(RestartPhosd(SIGKILL), 128 + SIGKILL);
      ++killed_phosd;
      continue;
    }
    nlohmann::json listed = Get("/v1/functions/killed/instances");
    ASSERT_TRUE(listed.contains("instances")) << listed.dump();
    for (const auto& inst : listed["instances"]) {
      const int pid = inst.value("pid", -1);
      if (pid > 0 && kill(pid, SIGKILL) == 0) ++killed_instances;
    }
  }
  ASSERT_TRUE(Finished("killed")) << PhosdLog();
  size_t lines = 0;
  const std::map<int64_t, std::string> losses = Losses("killed", &lines);
  EXPECT_EQ(losses, expected);
  EXPECT_EQ(killed_phosd, kStableDeviceAddresses ? 4 : 0);
  // Each restart resumed from a checkpoint it kept, not from the start (the losses alone would not
  // tell: a run started over answers them alike). The last restart may find the job finished
  // before its deploy has logged the resume: waited for.
  auto resumes = [&] {
    const std::string log = PhosdLog();
    size_t n = 0;
    for (size_t at = log.find("'killed' resumes after step"); at != std::string::npos;
         at = log.find("'killed' resumes after step", at + 1)) {
      ++n;
    }
    return n;
  };
  // (A ThreadSanitizer build restarts none: nothing to wait for, and no comparison with 0.)
  const size_t expected_resumes = kStableDeviceAddresses ? 4u : 0u;
  if (kStableDeviceAddresses) {
    EXPECT_TRUE(WaitUntil([&] { return resumes() >= 4u; })) << resumes() << " resumes";
  }
  EXPECT_EQ(resumes(), expected_resumes);
  EXPECT_GT(killed_instances, 0);
  // Steps after the checkpoints the kills fell back to ran again.
  EXPECT_GT(lines, static_cast<size_t>(kSteps));
  nlohmann::json job = Get("/v1/functions/killed/job");
  EXPECT_LE(job["checkpoints"].size(), static_cast<size_t>(kKeep)) << job.dump();
}

// A job moved between the node's two devices three times while it trains (live migration,
// docs/design.md D10): its state on the device travels with it, and it answers every step exactly
// as a job that stayed where it was.
TEST_F(JobTest, AJobMovedBetweenDevicesWhileItTrainsAnswersEveryStepAsOneThatStayed) {
  // Long enough to be moved three times mid-run (at steps 200, 400 and 600); ThreadSanitizer's
  // steps are ten times slower.
  constexpr int kLongSteps = kThreadSanitizer ? 800 : 2000;
  ASSERT_NO_FATAL_FAILURE(DeployJob("stayed", kLongSteps));
  ASSERT_NO_FATAL_FAILURE(DeployJob("moved", kLongSteps));
  int moves = 0;
  for (int to : {1, 0, 1}) {
    SCOPED_TRACE("to device " + std::to_string(to));
    const int64_t after = 200 * (moves + 1);
    ASSERT_TRUE(WaitUntil([&] { return Step("moved") >= after; }, std::chrono::minutes(2))) << PhosdLog();
    // Refused (503) while one of the job's own checkpoints is still copying: asked again.
    HttpResponse moved;
    ASSERT_TRUE(WaitUntil([&] {
      std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data",
                                       "{\"device\": " + std::to_string(to) + "}"};
      for (const std::string& h : AdminHeader()) argv.push_back(h);
      argv.push_back(endpoint() + "/v1/functions/moved/migrate");
      moved = ParseCurl(::phos::testing::Run(argv).out);
      return moved.status != 503 || moved.body.find("still copying") == std::string::npos;
    })) << moved.body;
    ASSERT_EQ(moved.status, 200) << moved.body << PhosdLog();
    ++moves;
    nlohmann::json listed = Get("/v1/functions/moved/instances");
    ASSERT_TRUE(listed.contains("instances") && listed["instances"].size() == 1) << listed.dump();
    EXPECT_EQ(listed["instances"][0].value("device", -1), to);
  }
  EXPECT_LT(Step("moved"), kLongSteps) << "the job finished before its last move: nothing moved mid-run";
  ASSERT_TRUE(Finished("stayed")) << PhosdLog();
  ASSERT_TRUE(Finished("moved")) << PhosdLog();
  const std::map<int64_t, std::string> expected = Losses("stayed");
  ASSERT_EQ(expected.size(), static_cast<size_t>(kLongSteps));
  size_t lines = 0;
  EXPECT_EQ(Losses("moved", &lines), expected);
  EXPECT_EQ(lines, static_cast<size_t>(kLongSteps));  // no step ran twice: nothing was lost in a move
  EXPECT_EQ(moves, 3);
}

// A job's answers are the tenant's: one that is no step's answer (probe_fn echoes "step") is
// refused, said in the log, and counts for nothing; phosd serves on.
TEST_F(JobTest, AnswersThatAreNoStepsAreRefusedAndCountForNothing) {
  CommandResult deployed = PhosFn({"deploy", "echo", PHOS_PROBE_FUNCTION, "--job", "--checkpoint-every", "1"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  EXPECT_TRUE(WaitUntil([&] { return PhosdLog().find("a step's answer must be a JSON object") != std::string::npos; }))
      << PhosdLog();
  EXPECT_EQ(Step("echo"), 0);
  std::map<int64_t, std::string> losses = Losses("echo");
  EXPECT_TRUE(losses.empty());
  // Not a job: its status is refused.
  CommandResult plain = PhosFn({"deploy", "plain", PHOS_PROBE_FUNCTION});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_NE(PhosFn({"job", "plain"}).exit_code, 0);
  nlohmann::json refused = Get("/v1/functions/plain/job");
  EXPECT_NE(refused["error"].value("message", "").find("is not a job"), std::string::npos) << refused.dump();
  // --job and --checkpoint-every go together.
  EXPECT_NE(PhosFn({"deploy", "half", PHOS_PROBE_FUNCTION, "--job"}).exit_code, 0);
}

}  // namespace
}  // namespace phos::testing
