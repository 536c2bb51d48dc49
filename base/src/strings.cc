#include "phos/base/strings.h"

namespace phos {

std::vector<std::string_view> Split(std::string_view text, std::string_view separators, EmptyPieces empty) {
  std::vector<std::string_view> pieces;
  while (true) {
    const size_t end = text.find_first_of(separators);
    std::string_view piece = text.substr(0, end);
    if (!piece.empty() || empty == EmptyPieces::kKeep) pieces.push_back(piece);
    if (end == std::string_view::npos) return pieces;
    text.remove_prefix(end + 1);
  }
}

}  // namespace phos
