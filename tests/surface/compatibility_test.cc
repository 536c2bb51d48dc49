// docs/compatibility.md: the committed doc is what the build makes of it now, and its counts are
// those nm gives for the built libraries against NVIDIA's committed lists.
#include "phos/surface/compatibility_table.h"
#include "surface_test_support.h"

namespace phos::surface {
namespace {

using testing::Lines;
using testing::NmExports;
using testing::ReadText;
using testing::RunTool;

constexpr const char* kDoc = PHOS_SOURCE_DIR "/docs/compatibility.md";

TEST(CompatibilityTest, TheCommittedDocIsWhatTheBuildMakes) {
  testing::Ran table = RunTool({PHOS_PHOS_FN, "check", "--table"});
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_TRUE(table.out == ReadText(kDoc)) << "docs/compatibility.md is stale (phos's exports, NVIDIA's "
                                              "lists or refused.tsv changed): refresh it with "
                                              "scripts/compatibility.sh";
}

// The doc's summary row of a library: served, refused, lacks, total.
std::vector<size_t> SummaryRow(const std::string& doc, const Library& library) {
  for (const std::string& line : Lines(doc)) {
    if (!line.starts_with("| " + std::string(library.title) + " | `" + std::string(library.soname) + "`"))
      continue;
    std::vector<size_t> numbers;
    size_t end = line.size() - 1;  // the closing '|'
    for (int cell = 0; cell < 4; ++cell) {
      const size_t start = line.rfind('|', end - 1);
      numbers.insert(numbers.begin(), std::stoul(line.substr(start + 1, end - start - 1)));
      end = start;
    }
    return numbers;
  }
  return {};
}

TEST(CompatibilityTest, CountsAreNmsOfTheBuiltLibraries) {
  const std::string doc = ReadText(kDoc);
  for (const Library& library : Libraries()) {
    SCOPED_TRACE(library.soname);
    std::vector<std::string> list = Lines(ReadText(std::string(PHOS_SOURCE_DIR "/frontend/surface/nvidia/") +
                                                   std::string(library.name) + ".txt"));
    ASSERT_FALSE(list.empty());
    const std::set<std::string> nvidia(list.begin() + 1, list.end());
    size_t exported = 0;
    const std::string phos = std::string(PHOS_FRONTEND_LIB_DIR "/") + std::string(library.soname);
    if (std::filesystem::exists(phos)) {
      for (const std::string& name : NmExports(phos)) exported += nvidia.count(name);
    }
    const std::vector<size_t> row = SummaryRow(doc, library);
    ASSERT_EQ(row.size(), 4u) << "no summary row in docs/compatibility.md";
    EXPECT_EQ(row[0] + row[1], exported) << "served + refused";
    EXPECT_EQ(row[2], nvidia.size() - exported) << "lacks";
    EXPECT_EQ(row[3], nvidia.size()) << "total";
  }
}

}  // namespace
}  // namespace phos::surface
