#include "phos/base/strings.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace phos {
namespace {

using Pieces = std::vector<std::string_view>;

TEST(SplitTest, EmptyPiecesKeptWhereSeparatorsMeet) {
  EXPECT_EQ(Split("/a::/b", ":"), (Pieces{"/a", "", "/b"}));
  EXPECT_EQ(Split(":a:", ":"), (Pieces{"", "a", ""}));
  EXPECT_EQ(Split("", ":"), (Pieces{""}));
  EXPECT_EQ(Split("no separator", ":"), (Pieces{"no separator"}));
}

TEST(SplitTest, EmptyPiecesSkippedWhenAsked) {
  EXPECT_EQ(Split("/v1//functions/", "/", EmptyPieces::kSkip), (Pieces{"v1", "functions"}));
  EXPECT_EQ(Split("", ",", EmptyPieces::kSkip), Pieces{});
  EXPECT_EQ(Split(",,", ",", EmptyPieces::kSkip), Pieces{});
}

TEST(SplitTest, AnyOfSeveralSeparators) {
  // LD_LIBRARY_PATH's separators.
  EXPECT_EQ(Split("/a;/b:/c", ":;"), (Pieces{"/a", "/b", "/c"}));
}

TEST(SplitTest, PiecesViewTheText) {
  const std::string_view text = "a\tbc";
  Pieces pieces = Split(text, "\t");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].data(), text.data() + 2);
}

}  // namespace
}  // namespace phos
