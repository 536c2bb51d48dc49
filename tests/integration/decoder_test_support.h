// What the tests of the decoder functions (llama, moe) share: a random checkpoint made with
// scripts/make-checkpoint.py and deployed on phosd over simgpu, the fields of a generate
// response, and the check of generated tokens against the CPU reference (llama_reference.h).
#pragma once

#include <string>
#include <vector>

#include "llama_reference.h"
#include "phosd_fixture.h"

namespace phos::testing {

// make-checkpoint.py options of one small model, deployed as a function named `name`.
struct ModelShape {
  std::string name;
  std::vector<std::string> options;
};

class DecoderFunctionTest : public PhosdTest {
 protected:
  // Runs make-checkpoint.py with shape.options plus `extra`, writing through `out_option` (--out
  // for a checkpoint, --adapter-out for a LoRA adapter of that shape) into a temporary directory
  // named `name` (shape.name when empty); returns the directory. Failures are test failures.
  std::string MakeCheckpoint(const ModelShape& shape, const std::string& out_option = "--out",
                             const std::string& name = "", const std::vector<std::string>& extra = {});

  // Writes the checkpoint and deploys `function` (an executable) over it as shape.name; returns
  // the checkpoint's directory. Failures are test failures (check HasFailure).
  std::string MakeAndDeploy(const ModelShape& shape, const std::string& function);

  // The HTTP status code of an invocation.
  std::string StatusOf(const std::string& function, const std::string& body);
};

// The response's "tokens" and "scores"; a test failure and nothing when they are missing.
std::vector<int> GeneratedTokens(const std::string& body);
std::vector<float> Scores(const std::string& body);

// Requests every decoder function must answer with 400, for the test shapes (vocab 61,
// max_position_embeddings 24).
std::vector<std::string> BadDecoderRequests();

// A streamed answer: the `count` lines {"token": id} first, then the whole answer's line.
struct StreamedAnswer {
  std::vector<int> tokens;
  std::string last_line;
};
StreamedAnswer ParseStreamed(const std::string& out, size_t count);

// Each generated token must be the reference's greedy choice given the same prefix, up to fp32
// rounding: its reference logit is within a small tolerance of the reference's largest. The
// reference follows the function's tokens, so a near-tie resolved the other way cannot make
// every later step differ. The random checkpoints' small weights leave the residual stream close
// to the embeddings, so the tokens alone say little about the layers: the chosen tokens' logits
// (`scores`, when not empty) must match the reference's too.
void ExpectGreedyUnderReference(const LlamaReference& reference, std::vector<int> prefix,
                                const std::vector<int>& generated, const std::vector<float>& scores);

}  // namespace phos::testing
