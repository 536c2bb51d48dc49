// The train function's inputs, defined once for the function's kernels and host code and for the
// tests' CPU reference: the model's shape, its initial parameters and each step's synthetic batch
// (inputs uniform in [-1, 1), targets a fixed teacher matrix applied to them). The training itself
// is written twice, independently: kernels.cuh, and the reference in the tests.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PHOS_TRAIN_HD __host__ __device__
#else
#define PHOS_TRAIN_HD
#endif

namespace phos::train {

struct Shape {
  int inputs = 32;   // D
  int hidden = 64;   // H
  int outputs = 8;   // O
  int batch = 32;    // B
  // The packed parameters, in this order: W1 (H x D, row-major), b1 (H), W2 (O x H), b2 (O).
  PHOS_TRAIN_HD int w1() const { return 0; }
  PHOS_TRAIN_HD int b1() const { return hidden * inputs; }
  PHOS_TRAIN_HD int w2() const { return b1() + hidden; }
  PHOS_TRAIN_HD int b2() const { return w2() + outputs * hidden; }
  PHOS_TRAIN_HD int parameters() const { return b2() + outputs; }
};

// Adam's settings.
struct Adam {
  float lr = 1e-2f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// A 32-bit mix (murmur3's finaliser) of four words: the same on the host and on the device.
PHOS_TRAIN_HD inline uint32_t Mix(uint32_t seed, uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = seed ^ 0x9e3779b9u;
  const uint32_t words[3] = {a, b, c};
  for (uint32_t w : words) {
    h ^= w + 0x7f4a7c15u + (h << 6) + (h >> 2);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
  }
  return h;
}

// Uniform in [-1, 1), exactly representable (24 bits).
PHOS_TRAIN_HD inline float Uniform(uint32_t seed, uint32_t a, uint32_t b, uint32_t c) {
  return static_cast<float>(static_cast<int32_t>(Mix(seed, a, b, c) >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
}

// Parameter `i` before the first step: uniform, scaled by 1/sqrt(fan-in) for the weights; biases 0.
inline float InitialParameter(const Shape& s, uint32_t seed, int i) {
  if (i >= s.b1() && i < s.w2()) return 0.0f;
  if (i >= s.b2()) return 0.0f;
  const int fan_in = i < s.b1() ? s.inputs : s.hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return scale * Uniform(seed, 1, static_cast<uint32_t>(i), 0);
}

// The teacher's entry (k, d): targets are teacher x input.
PHOS_TRAIN_HD inline float Teacher(uint32_t seed, int k, int d) {
  return Uniform(seed, 2, static_cast<uint32_t>(k), static_cast<uint32_t>(d));
}

// Input `d` of sample `b` of the batch of step `step` (1 for the first).
PHOS_TRAIN_HD inline float Input(uint32_t seed, int step, int b, int d) {
  return Uniform(seed, 3 + static_cast<uint32_t>(step) * 2654435761u, static_cast<uint32_t>(b),
                 static_cast<uint32_t>(d));
}

}  // namespace phos::train
