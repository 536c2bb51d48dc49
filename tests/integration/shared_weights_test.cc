// Read-only weights shared on the device (docs/design.md D14), end to end: mlp deployed with a
// sample request (which learns that its weights are read-only), then restored twice while the
// first restored instance stays alive. The second restore maps the weights from the first's
// allocation instead of copying them, and both answer exactly as the reference does. A call whose
// speculated write set names a shared buffer gets a private copy first (indirect_fn's "add"); a
// write to a shared buffer that speculation missed (its "bump", through a pointer in device
// memory) costs that instance only: the shared bytes stay intact, later restores copy privately.
// llama's second instance maps nine tenths of its weights or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "decoder_test_support.h"
#include "mlp_model.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr uint64_t kWeightSeed = 42;  // mlp's default --weight-seed
constexpr int kLayers = 4;
constexpr size_t kSizeMiB = 32;  // 8 MiB weight matrices: whole granules of their own, shareable
const mlp::Shape kShape = mlp::ShapeForSize(kSizeMiB, kLayers, 1);

// POST /v1/functions/FUNCTION/invoke at `endpoint` with curl -i, forcing restore mode `mode`.
HttpResponse InvokeAt(const std::string& endpoint, const std::string& function, const std::string& body,
                      const std::string& mode) {
  CommandResult r = ::phos::testing::Run({"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body,
                                          "-H", "X-Phos-Restore-Mode: " + mode,
                                          endpoint + "/v1/functions/" + function + "/invoke"});
  return ParseCurl(r.out);
}

class SharedWeightsTest : public PhosdTest {
 protected:
  HttpResponse Invoke(const std::string& body, const std::string& mode, const std::string& function = "mlp") {
    return InvokeAt(endpoint(), function, body, mode);
  }

  static void ExpectMatchesReference(const std::string& body, uint64_t seed) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << body;
    const std::vector<float> expected = mlp::Reference(kWeightSeed, kShape, mlp::InputFromSeed(seed, kShape));
    const std::vector<float> output = j["output"].get<std::vector<float>>();
    ASSERT_EQ(output.size(), expected.size());
    for (size_t i = 0; i < output.size(); ++i) ASSERT_NEAR(output[i], expected[i], 1e-4) << "element " << i;
  }
};

TEST_F(SharedWeightsTest, ASecondRestoreMapsTheWeightsOfTheFirstInsteadOfCopyingThem) {
  CommandResult deployed = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "0", "--max-instances",
                                   "3", "--sample", R"({"seed": 1})", "--", "--size-mib",
                                   std::to_string(kSizeMiB), "--layers", std::to_string(kLayers)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const int64_t weight_bytes = static_cast<int64_t>(kShape.weight_elements() * sizeof(float)) * kLayers;

  // The first restore after the deploy copies every byte and keeps its weights for others.
  HttpResponse first = Invoke(R"({"seed": 2, "full": true})", "phos");
  ASSERT_EQ(first.status, 200) << first.body;
  ExpectMatchesReference(first.body, 2);
  EXPECT_EQ(first.Number("x-phos-shared-bytes"), 0);

  // The first instance stays (keep-alive): the second restore maps its weights, read-only.
  HttpResponse second = Invoke(R"({"seed": 3, "full": true})", "phos");
  ASSERT_EQ(second.status, 200) << second.body;
  ExpectMatchesReference(second.body, 3);
  EXPECT_EQ(second.Number("x-phos-shared-bytes"), weight_bytes);
  EXPECT_EQ(second.Number("x-phos-snapshot-bytes"), first.Number("x-phos-snapshot-bytes"));
  // Copied by the second restore at most: what is not the weights (biases, activations).
  EXPECT_LE(second.Number("x-phos-snapshot-bytes") - second.Number("x-phos-shared-bytes"),
            second.Number("x-phos-snapshot-bytes") / 10);

  // Each instance answers again, the first one through the read-only mapping it now has too.
  HttpResponse warm = Invoke(R"({"seed": 4, "full": true})", "warm");
  ASSERT_EQ(warm.status, 200) << warm.body;
  ExpectMatchesReference(warm.body, 4);
}

// indirect_fn's data buffers of 2 MiB (a granule each): the sample reads buffer 0 as a kernel
// parameter, so it is learned read-only and shared by the restores after the first.
constexpr int kElements = 1 << 19;
constexpr int64_t kBufferBytes = int64_t{kElements} * 4;
const char* const kIntact = "sum 6.0 first 0.0 1.0 2.0 3.0";  // buffer 0's first four, untouched
const char* const kAddedOne = "sum 10.0 first 1.0 2.0 3.0 4.0";

TEST_F(SharedWeightsTest, ACallThatWritesASharedBufferGetsAPrivateCopyFirst) {
  CommandResult deployed =
      PhosFn({"deploy", "indirect", PHOS_INDIRECT_FUNCTION, "--instances", "0", "--max-instances", "4",
              "--sample", "direct 0 4", "--", "--buffers", "2", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  // The first restore publishes buffer 0; the second maps it and then writes it: a private copy.
  ASSERT_EQ(Invoke("direct 0 4", "phos", "indirect").body, kIntact);
  HttpResponse writer = Invoke("add 0 4", "phos", "indirect");
  ASSERT_EQ(writer.status, 200) << writer.body;
  EXPECT_EQ(writer.Number("x-phos-shared-bytes"), kBufferBytes);
  EXPECT_EQ(writer.body, kAddedOne);
  // What the others map is intact, and sharing goes on.
  HttpResponse reader = Invoke("direct 0 4", "phos", "indirect");
  ASSERT_EQ(reader.status, 200) << reader.body;
  EXPECT_EQ(reader.Number("x-phos-shared-bytes"), kBufferBytes);
  EXPECT_EQ(reader.body, kIntact);
}

// A shared buffer the function frees is gone from the session's shared buffers: the buffer it
// allocates next at the same address is its own, written without a copy-on-write.
TEST_F(SharedWeightsTest, ABufferAllocatedWhereASharedOneWasFreedIsTheFunctionsOwn) {
  CommandResult deployed =
      PhosFn({"deploy", "indirect", PHOS_INDIRECT_FUNCTION, "--instances", "0", "--max-instances", "4",
              "--sample", "direct 0 4", "--", "--buffers", "2", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_EQ(Invoke("direct 0 4", "phos", "indirect").body, kIntact);
  HttpResponse renewed = Invoke("renew 0 4", "phos", "indirect");
  ASSERT_EQ(renewed.status, 200) << renewed.body;
  EXPECT_EQ(renewed.Number("x-phos-shared-bytes"), kBufferBytes);
  EXPECT_EQ(renewed.body, "sum 0.0 first 0.0 0.0 0.0 0.0");
  // The first instance's allocation was untouched by the free.
  HttpResponse reader = Invoke("direct 0 4", "phos", "indirect");
  ASSERT_EQ(reader.status, 200) << reader.body;
  EXPECT_EQ(reader.body, kIntact);
}

TEST_F(SharedWeightsTest, AWriteSpeculationMissedCostsThatInstanceAndEndsSharing) {
  CommandResult deployed =
      PhosFn({"deploy", "indirect", PHOS_INDIRECT_FUNCTION, "--instances", "0", "--max-instances", "4",
              "--sample", "direct 0 4", "--", "--buffers", "2", "--elements", std::to_string(kElements)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;

  HttpResponse first = Invoke("direct 0 4", "phos", "indirect");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.body, kIntact);
  HttpResponse second = Invoke("direct 0 4", "phos", "indirect");
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.body, kIntact);
  EXPECT_EQ(second.Number("x-phos-shared-bytes"), kBufferBytes);

  // A third instance maps buffer 0 shared too; its bump writes it through the table: the write
  // faults on the read-only mapping, the instance is lost and its invocation fails.
  HttpResponse bumped = Invoke("bump 0 4", "phos", "indirect");
  EXPECT_GE(bumped.status, 500) << bumped.body;

  // The instances still mapping it read what they read before.
  HttpResponse warm = Invoke("direct 0 4", "warm", "indirect");
  ASSERT_EQ(warm.status, 200) << warm.body;
  EXPECT_EQ(warm.body, kIntact);
  // Restores from now on copy their own, which the function may write.
  HttpResponse privately = Invoke("bump 0 4", "phos", "indirect");
  ASSERT_EQ(privately.status, 200) << privately.body;
  EXPECT_EQ(privately.Number("x-phos-shared-bytes"), 0);
  EXPECT_EQ(privately.body, kAddedOne);
}

// phosd --share-weights false: every restore copies its own, as before.
class UnsharedWeightsTest : public SharedWeightsTest {
 protected:
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--share-weights", "false"}; }
};

TEST_F(UnsharedWeightsTest, EveryRestoreCopiesItsOwnWhenSharingIsOff) {
  CommandResult deployed = PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "0", "--max-instances",
                                   "3", "--sample", R"({"seed": 1})", "--", "--size-mib",
                                   std::to_string(kSizeMiB), "--layers", std::to_string(kLayers)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  for (uint64_t seed : {2, 3}) {
    HttpResponse a = Invoke("{\"seed\": " + std::to_string(seed) + ", \"full\": true}", "phos");
    ASSERT_EQ(a.status, 200) << a.body;
    ExpectMatchesReference(a.body, seed);
    EXPECT_EQ(a.Number("x-phos-shared-bytes"), 0);
  }
}

// llama with matrices of whole granules (hidden 768): a second instance maps the weights of the
// first, so it adds at most a tenth of them to device memory (what it copies: the small norms and
// key/value projections packed into shared granules, and its activations), and answers the same.
class SharedLlamaTest : public DecoderFunctionTest {};

TEST_F(SharedLlamaTest, ASecondInstanceCopiesAtMostATenthOfItsWeights) {
  const ModelShape shape{"llama-shared",
                         {"--hidden", "768", "--layers", "2", "--vocab", "4000", "--dtype", "f32"}};
  const std::string dir = MakeCheckpoint(shape);
  ASSERT_FALSE(HasFailure());
  CommandResult deployed =
      PhosFn({"deploy", shape.name, PHOS_LLAMA_FUNCTION, "--instances", "0", "--max-instances", "3",
              "--sample", R"({"tokens": [1, 2, 3], "max_new_tokens": 2})", "--", "--model", dir});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const std::string request = R"({"tokens": [5, 6, 7], "max_new_tokens": 4})";
  HttpResponse first = InvokeAt(endpoint(), shape.name, request, "phos");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.Number("x-phos-shared-bytes"), 0);
  HttpResponse second = InvokeAt(endpoint(), shape.name, request, "phos");
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(GeneratedTokens(second.body), GeneratedTokens(first.body));
  // The checkpoint's weights: every tensor, fp32.
  uint64_t weight_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") weight_bytes += entry.file_size();
  }
  ASSERT_GT(weight_bytes, 0u);
  EXPECT_GE(second.Number("x-phos-shared-bytes"), static_cast<int64_t>(weight_bytes * 9 / 10))
      << "of " << weight_bytes << " weight bytes";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phos::testing
