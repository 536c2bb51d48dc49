// The C example (examples/capi/gateway.c) under valgrind's memcheck against a real phosd: every
// call of libphos.so it makes, the failing ones' messages included, leaks nothing and touches no
// memory it should not (label 'long': memcheck runs the example many times slower).
#include <gtest/gtest.h>

#include <string>

#include "mlp_expect.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

class CapiValgrindTest : public PhosdTest {};

TEST_F(CapiValgrindTest, TheCExampleLeaksNothing) {
  Result<CommandOutput> run = RunCommand({.argv = {PHOS_VALGRIND, "--leak-check=full", "--error-exitcode=1",
                                                   PHOS_CAPI_GATEWAY, endpoint(), PHOS_MLP_FUNCTION, "5"},
                                          .env = {{"PHOS_TOKEN", admin_token()}}},
                                         std::chrono::minutes(10));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // valgrind's report is on standard error, in the test's log.
  ASSERT_TRUE(run->status.success()) << run->status.ToString() << "\n" << run->output;
  EXPECT_NE(run->output.find("removed mlp\n"), std::string::npos) << run->output;
  const size_t streamed = run->output.find("streamed: ");
  ASSERT_NE(streamed, std::string::npos) << run->output;
  const size_t end = run->output.find('\n', streamed);
  ExpectMlpMatchesReference(run->output.substr(streamed + 10, end - streamed - 10), 5, /*full=*/false);

  // A failing run: the error path's messages are freed too.
  Result<CommandOutput> refused =
      RunCommand({.argv = {PHOS_VALGRIND, "--leak-check=full", "--error-exitcode=3", PHOS_CAPI_GATEWAY,
                           endpoint(), PHOS_MLP_FUNCTION, "5"},
                  .env = {{"PHOS_TOKEN", "wrong"}}},
                 std::chrono::minutes(10));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->status.ShellCode(), 1) << "1: the example's failure; 3: valgrind's";
}

}  // namespace
}  // namespace phos::testing
