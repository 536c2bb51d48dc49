// The files of examples/function-template, compiled in (template_files.cc is generated from them
// by frontend/phos-fn/CMakeLists.txt).
#pragma once

#include <span>
#include <string_view>

namespace phos::fn_cli {

struct TemplateFile {
  std::string_view path;  // relative to the project's directory
  std::string_view text;
};

std::span<const TemplateFile> TemplateFiles();

}  // namespace phos::fn_cli
