#include "new_project.h"

#include <cctype>
#include <fstream>
#include <system_error>

#include "template_files.h"

namespace phos::fn_cli {
namespace {

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

}  // namespace

std::string ReplaceWord(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    const bool starts = hit == 0 || !IsWordChar(text[hit - 1]);
    const bool ends = hit + from.size() == text.size() || !IsWordChar(text[hit + from.size()]);
    out.append(text.substr(pos, hit - pos));
    out.append(starts && ends ? to : from);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

Status WriteNewProject(std::string_view name, const std::filesystem::path& dir) {
  bool ok = !name.empty() && name.size() <= 64 && std::isalpha(static_cast<unsigned char>(name[0])) != 0;
  for (char c : name) ok = ok && (IsWordChar(c) || c == '-');
  if (!ok) {
    return Status::InvalidArgument("project name '" + std::string(name) +
                                   "': start with a letter, then letters, digits, '_' or '-' (64 at most)");
  }
  // Names the project's build already has: CMake's own targets and directories, the test's target,
  // and the directory the function's module is written to.
  for (std::string_view taken : {"all", "clean", "help", "install", "package", "package_source", "test", "edit_cache",
                                 "rebuild_cache", "list_install_components", "CMakeFiles", "Testing", "modules",
                                 "function_test"}) {
    if (name == taken) {
      return Status::InvalidArgument("project name '" + std::string(name) + "': taken by the project's build");
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) return Status::AlreadyExists(dir.string() + " exists already");
  for (const TemplateFile& file : TemplateFiles()) {
    const std::filesystem::path path = dir / file.path;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return Status::IoError("create " + path.parent_path().string() + ": " + ec.message());
    std::ofstream out(path, std::ios::binary);
    out << ReplaceWord(file.text, kTemplateName, name);
    out.close();
    if (!out) return Status::IoError("write " + path.string());
  }
  return Status::Ok();
}

}  // namespace phos::fn_cli
