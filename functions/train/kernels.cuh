// The train function's kernels, written once for nvcc and simgpu (phos/kernel.h): one step of a
// two-layer perceptron (ReLU hidden layer, mean squared error) trained with Adam, every sum in a
// fixed order so that a step gives the same bits each time it runs. Parameters, gradients and
// Adam's moments are packed (train::Shape); `step` is the device's count of steps taken.
#pragma once

#include "phos/kernel.h"
#include "train_data.h"

using phos::train::Shape;

// The batch of the next step: inputs x (B x D) and targets y = teacher x (B x O). One thread per
// sample.
PHOS_GLOBAL void make_batch(float* x, float* y, const int* step, Shape s, unsigned seed) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= s.batch) return;
  const int next = *step + 1;
  for (int d = 0; d < s.inputs; ++d) x[b * s.inputs + d] = phos::train::Input(seed, next, b, d);
  for (int k = 0; k < s.outputs; ++k) {
    float sum = 0.0f;
    for (int d = 0; d < s.inputs; ++d) sum += phos::train::Teacher(seed, k, d) * x[b * s.inputs + d];
    y[b * s.outputs + k] = sum;
  }
}
PHOS_EXPORT_KERNEL(make_batch);

// h = relu(W1 x + b1), B x H. One thread per element.
PHOS_GLOBAL void forward_hidden(float* h, const float* p, const float* x, Shape s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.hidden) return;
  const int b = i / s.hidden, j = i % s.hidden;
  float sum = p[s.b1() + j];
  for (int d = 0; d < s.inputs; ++d) sum += p[s.w1() + j * s.inputs + d] * x[b * s.inputs + d];
  h[i] = sum > 0.0f ? sum : 0.0f;
}
PHOS_EXPORT_KERNEL(forward_hidden);

// The output W2 h + b2 against the targets: dout = (out - y) / B (the gradient of the loss
// 0.5 / B * sum (out - y)^2) and sq = (out - y)^2. One thread per element of B x O.
PHOS_GLOBAL void forward_output(float* dout, float* sq, const float* p, const float* h, const float* y, Shape s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.outputs) return;
  const int b = i / s.outputs, k = i % s.outputs;
  float sum = p[s.b2() + k];
  for (int j = 0; j < s.hidden; ++j) sum += p[s.w2() + k * s.hidden + j] * h[b * s.hidden + j];
  const float diff = sum - y[i];
  dout[i] = diff / static_cast<float>(s.batch);
  sq[i] = diff * diff;
}
PHOS_EXPORT_KERNEL(forward_output);

// loss = 0.5 / B * sum(sq), summed in order by one thread.
PHOS_GLOBAL void reduce_loss(float* loss, const float* sq, Shape s) {
  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int i = 0; i < s.batch * s.outputs; ++i) sum += sq[i];
  *loss = 0.5f * sum / static_cast<float>(s.batch);
}
PHOS_EXPORT_KERNEL(reduce_loss);

// dh = (W2^T dout) where h > 0, else 0; B x H, one thread per element.
PHOS_GLOBAL void backward_hidden(float* dh, const float* p, const float* dout, const float* h, Shape s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.hidden) return;
  const int b = i / s.hidden, j = i % s.hidden;
  float sum = 0.0f;
  for (int k = 0; k < s.outputs; ++k) sum += p[s.w2() + k * s.hidden + j] * dout[b * s.outputs + k];
  dh[i] = h[i] > 0.0f ? sum : 0.0f;
}
PHOS_EXPORT_KERNEL(backward_hidden);

// The gradient of every parameter, one thread each, summed over the batch in order:
// W1 += dh x^T, b1 += dh, W2 += dout h^T, b2 += dout.
PHOS_GLOBAL void gradients(float* g, const float* dout, const float* dh, const float* h, const float* x, Shape s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.parameters()) return;
  float sum = 0.0f;
  if (i < s.b1()) {
    const int j = i / s.inputs, d = i % s.inputs;
    for (int b = 0; b < s.batch; ++b) sum += dh[b * s.hidden + j] * x[b * s.inputs + d];
  } else if (i < s.w2()) {
    const int j = i - s.b1();
    for (int b = 0; b < s.batch; ++b) sum += dh[b * s.hidden + j];
  } else if (i < s.b2()) {
    const int k = (i - s.w2()) / s.hidden, j = (i - s.w2()) % s.hidden;
    for (int b = 0; b < s.batch; ++b) sum += dout[b * s.outputs + k] * h[b * s.hidden + j];
  } else {
    const int k = i - s.b2();
    for (int b = 0; b < s.batch; ++b) sum += dout[b * s.outputs + k];
  }
  g[i] = sum;
}
PHOS_EXPORT_KERNEL(gradients);

// Adam's update of every parameter for step *step + 1 (bias-corrected moments), one thread each.
PHOS_GLOBAL void adam(float* p, float* m, float* v, const float* g, const int* step, Shape s, float lr, float beta1,
                      float beta2, float eps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= s.parameters()) return;
  const float t = static_cast<float>(*step + 1);
  m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
  v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
  const float m_hat = m[i] / (1.0f - powf(beta1, t));
  const float v_hat = v[i] / (1.0f - powf(beta2, t));
  p[i] -= lr * m_hat / (sqrtf(v_hat) + eps);
}
PHOS_EXPORT_KERNEL(adam);

// The step is taken: counted, after every kernel that reads the count.
PHOS_GLOBAL void advance(int* step) {
  if (blockIdx.x * blockDim.x + threadIdx.x == 0) *step += 1;
}
PHOS_EXPORT_KERNEL(advance);
