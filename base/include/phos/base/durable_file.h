// Replacing a small file so that a crash at any point leaves either its old or its new contents
// (functions.json, a job's checkpoints.json).
#pragma once

#include <sys/types.h>

#include <string>

#include "phos/base/status.h"

namespace phos {

// Writes `text` to `path`.tmp with permissions `mode`, syncs it, renames it over `path` and syncs
// the directory.
Status ReplaceFileDurably(const std::string& path, const std::string& text, mode_t mode);

}  // namespace phos
