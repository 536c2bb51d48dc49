// Checkpoint: a Hugging Face checkpoint directory's tensors, looked up by name across its files.
// The directory holds either one `model.safetensors`, or `model.safetensors.index.json`
// ({"weight_map": {tensor name: shard file name}}) and the shards it names, each a plain file
// name inside the directory. Every shard is opened and every indexed tensor found in its shard
// when the checkpoint opens, so lookups afterwards cannot fail on a broken directory.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/fn/safetensors.h"

namespace phos::fn {

inline constexpr std::string_view kSingleFileCheckpointName = "model.safetensors";
inline constexpr std::string_view kShardedCheckpointIndexName = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Opens the checkpoint in `dir`: the index and its shards when the index exists, otherwise
  // model.safetensors.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Every tensor's name, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view name) const;
  // The tensor and the file holding it, or NotFound naming the directory.
  Result<const TensorInfo*> Tensor(std::string_view name) const;
  Result<const SafetensorsFile*> FileOf(std::string_view name) const;
  Result<std::span<const std::byte>> Bytes(std::string_view name) const;
  Result<std::vector<float>> ReadAsFloat32(std::string_view name) const;

 private:
  explicit Checkpoint(std::string dir) : dir_(std::move(dir)) {}
  Status OpenSharded(const std::string& index_path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // Tensor name -> its file in files_.
  std::map<std::string, const SafetensorsFile*, std::less<>> file_of_;
};

}  // namespace phos::fn
