// phos-fn new: a function project to start from, a copy of examples/function-template (compiled
// into phos-fn, so an install needs no source tree) under another name.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "phos/base/status.h"

namespace phos::fn_cli {

// The name the template's function has ("hello"): every whole-word occurrence in its files is
// the name, and becomes the new project's.
inline constexpr std::string_view kTemplateName = "hello";

// `text` with every whole word `from` (not inside a longer identifier) replaced by `to`.
std::string ReplaceWord(std::string_view text, std::string_view from, std::string_view to);

// Writes the template as project `name` into `dir`, which must not exist yet. `name` starts with
// a letter and holds letters, digits, '_' and '-' (a function name, a CMake target and project),
// and is none of the names the project's build has already ("test", "all", "modules", ...).
Status WriteNewProject(std::string_view name, const std::filesystem::path& dir);

}  // namespace phos::fn_cli
