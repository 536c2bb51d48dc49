// Cutting text into pieces: the one splitter of phos (search paths, lists in environment
// variables, lines of a tool's output, URL paths, tab-separated rows).
//
//   Split("/a::/b", ":")                              -> {"/a", "", "/b"}
//   Split("/v1//functions/", "/", EmptyPieces::kSkip)  -> {"v1", "functions"}
#pragma once

#include <string_view>
#include <vector>

namespace phos {

enum class EmptyPieces {
  kKeep,  // "a::b" -> "a", "", "b"; "" -> one empty piece
  kSkip,  // "a::b" -> "a", "b"; "" -> none
};

// `text` cut at each character that `separators` holds; the pieces view `text`.
std::vector<std::string_view> Split(std::string_view text, std::string_view separators,
                                    EmptyPieces empty = EmptyPieces::kKeep);

}  // namespace phos
