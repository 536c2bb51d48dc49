// What an mlp invocation must answer: the CPU reference's output for the request's input seed,
// with the weights of mlp's default --weight-seed, at the shape the integration tests deploy
// (--size-mib 16 --layers 4).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlp_model.h"

namespace phos::testing {

inline constexpr uint64_t kMlpWeightSeed = 42;  // mlp's default --weight-seed
inline const mlp::Shape kMlpShape = mlp::ShapeForSize(16, 4, 1);

// Checks a response against the reference for input seed `seed`; `full`: the whole output too.
inline void ExpectMlpMatchesReference(const std::string& body, uint64_t seed, bool full) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  std::vector<float> expected = mlp::Reference(kMlpWeightSeed, kMlpShape, mlp::InputFromSeed(seed, kMlpShape));
  double expected_sum = 0;
  for (float v : expected) expected_sum += v;
  int expected_argmax = static_cast<int>(std::max_element(expected.begin(), expected.end()) - expected.begin());
  ASSERT_TRUE(j.contains("checksum") && j.contains("argmax")) << body;
  EXPECT_NEAR(j["checksum"].get<double>(), expected_sum, 1e-3 * (1 + std::abs(expected_sum)));
  EXPECT_EQ(j["argmax"][0].get<int>(), expected_argmax);
  if (full) {
    ASSERT_TRUE(j.contains("output")) << body;
    std::vector<float> output = j["output"].get<std::vector<float>>();
    ASSERT_EQ(output.size(), expected.size());
    for (size_t i = 0; i < output.size(); ++i) ASSERT_NEAR(output[i], expected[i], 1e-4) << "element " << i;
  }
}

}  // namespace phos::testing
