#include "phos/fn/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

namespace phos::fn {

namespace {

// A shard must be a plain file name inside the checkpoint directory: an index that could name
// "../x" or "/etc/x" would let a checkpoint read any file the function can.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint(dir));
  const std::filesystem::path root(dir);
  std::error_code ec;
  const std::string index_path = (root / kShardedCheckpointIndexName).string();
  if (std::filesystem::exists(index_path, ec)) {
    PHOS_RETURN_IF_ERROR(checkpoint->OpenSharded(index_path));
    return checkpoint;
  }
  const std::string single_path = (root / kSingleFileCheckpointName).string();
  if (!std::filesystem::exists(single_path, ec)) {
    return Status::NotFound("checkpoint directory '" + dir + "' has neither " +
                            std::string(kSingleFileCheckpointName) + " nor " +
                            std::string(kShardedCheckpointIndexName));
  }
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single_path));
  for (const std::string& name : file->TensorNames()) checkpoint->file_of_.emplace(name, file.get());
  checkpoint->files_.push_back(std::move(file));
  return checkpoint;
}

Status Checkpoint::OpenSharded(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) return Status::IoError("cannot read checkpoint index '" + index_path + "'");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json index = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return Status::Corruption("checkpoint index '" + index_path + "' is not JSON");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Status::Corruption("checkpoint index '" + index_path + "' has no \"weight_map\" object");
  }
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      return Status::Corruption("checkpoint index '" + index_path + "': tensor '" + tensor +
                                "' maps to something other than a file name");
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (!IsPlainFileName(shard_name)) {
      return Status::InvalidArgument("checkpoint index '" + index_path + "': shard '" + shard_name +
                                     "' of tensor '" + tensor + "' is not a file name inside the directory");
    }
    auto it = shards.find(shard_name);
    if (it == shards.end()) {
      const std::string shard_path = (std::filesystem::path(dir_) / shard_name).string();
      std::error_code ec;
      if (!std::filesystem::exists(shard_path, ec)) {
        return Status::NotFound("checkpoint index '" + index_path + "' names shard '" + shard_name +
                                "', which is missing");
      }
      PHOS_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(shard_path));
      it = shards.emplace(shard_name, file.get()).first;
      files_.push_back(std::move(file));
    }
    if (!it->second->Contains(tensor)) {
      return Status::Corruption("checkpoint index '" + index_path + "' puts tensor '" + tensor +
                                "' in shard '" + shard_name + "', which has no such tensor");
    }
    file_of_.emplace(tensor, it->second);
  }
  return Status::Ok();
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(file_of_.size());
  for (const auto& [name, file] : file_of_) names.push_back(name);
  return names;
}

bool Checkpoint::Contains(std::string_view name) const {
  return file_of_.find(name) != file_of_.end();
}

Result<const SafetensorsFile*> Checkpoint::FileOf(std::string_view name) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) {
    return Status::NotFound("checkpoint '" + dir_ + "' has no tensor '" + std::string(name) + "'");
  }
  return it->second;
}

Result<const TensorInfo*> Checkpoint::Tensor(std::string_view name) const {
  PHOS_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->Tensor(name);
}

Result<std::span<const std::byte>> Checkpoint::Bytes(std::string_view name) const {
  PHOS_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->Bytes(name);
}

Result<std::vector<float>> Checkpoint::ReadAsFloat32(std::string_view name) const {
  PHOS_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->ReadAsFloat32(name);
}

}  // namespace phos::fn
