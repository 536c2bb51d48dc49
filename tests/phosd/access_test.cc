#include "access.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "phos/http/digest.h"

namespace phos::phosd {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/phosd-access-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

http::Request WithAuthorization(std::string value) {
  http::Request r;
  r.headers.emplace_back("Authorization", std::move(value));
  return r;
}

TEST(AdminTokenTest, MadeOnceWithMode0600AndKeptAcrossStarts) {
  TempDir dir;
  Result<std::string> first = LoadOrCreateAdminToken(dir.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->size(), 64u);  // 32 random bytes, hex
  struct stat st {};
  ASSERT_EQ(stat((dir.path() + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<std::string> second = LoadOrCreateAdminToken(dir.path());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, *first);
  // Another data directory gets another token.
  TempDir other;
  Result<std::string> third = LoadOrCreateAdminToken(other.path());
  ASSERT_TRUE(third.ok());
  EXPECT_NE(*third, *first);
}

TEST(AdminTokenTest, TokenFilesReadableByOthersOrEmptyAreRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/token";
  WriteFile(path, "s3cret\n", 0644);
  Result<std::string> open = ReadTokenFile(path);
  EXPECT_EQ(open.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(open.status().message().find("0644"), std::string::npos) << open.status().message();
  WriteFile(path, "s3cret\n", 0640);
  EXPECT_FALSE(ReadTokenFile(path).ok());
  WriteFile(path, "\n", 0600);
  EXPECT_EQ(ReadTokenFile(path).status().code(), StatusCode::kInvalidArgument);
  WriteFile(path, "two words\n", 0600);
  EXPECT_EQ(ReadTokenFile(path).status().code(), StatusCode::kInvalidArgument);
  WriteFile(path, "  s3cret\n", 0600);
  Result<std::string> good = ReadTokenFile(path);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(*good, "s3cret");
  EXPECT_FALSE(ReadTokenFile(dir.path() + "/missing").ok());
  // A data directory whose admin.token was opened up is refused, not silently used.
  WriteFile(dir.path() + "/admin.token", "abc\n", 0644);
  EXPECT_FALSE(LoadOrCreateAdminToken(dir.path()).ok());
}

TEST(TokensEqualTest, ComparesWholeTokens) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("", "a"));
  EXPECT_EQ(http::Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(LoopbackTest, OnlyThisMachine) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.3.4.5"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("example.com"));
}

TEST(AccessPolicyTest, AdminRoutesNeedTheAdminToken) {
  const AccessPolicy policy("admin-token");
  auto missing = policy.Check(http::Request{}, Access::kAdmin);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(missing->content_type, "application/json");
  EXPECT_TRUE(nlohmann::json::parse(missing->body).contains("error"));
  bool challenged = false;
  for (const auto& [name, value] : missing->headers) challenged = challenged || name == "WWW-Authenticate";
  EXPECT_TRUE(challenged);

  for (const char* malformed : {"admin-token", "Basic YWRtaW4=", "Bearer", "Bearer ", "Bearer a b"}) {
    auto r = policy.Check(WithAuthorization(malformed), Access::kAdmin);
    ASSERT_TRUE(r.has_value()) << malformed;
    EXPECT_EQ(r->status, 401) << malformed;
  }
  auto wrong = policy.Check(WithAuthorization("Bearer admin-tokem"), Access::kAdmin);
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 403);
  EXPECT_FALSE(policy.Check(WithAuthorization("Bearer admin-token"), Access::kAdmin).has_value());
  EXPECT_FALSE(policy.Check(WithAuthorization("bearer   admin-token "), Access::kAdmin).has_value());
  EXPECT_TRUE(policy.IsAdmin(WithAuthorization("Bearer admin-token")));
  EXPECT_FALSE(policy.IsAdmin(WithAuthorization("Bearer nope")));
  EXPECT_FALSE(policy.IsAdmin(http::Request{}));
  // Open routes ask nothing, whatever is sent.
  EXPECT_FALSE(policy.Check(http::Request{}, Access::kOpen).has_value());
  EXPECT_FALSE(policy.Check(WithAuthorization("Basic x"), Access::kOpen).has_value());
}

TEST(AccessPolicyTest, InvokeNeedsTheFunctionsTokenOnlyWhenItHasOne) {
  const AccessPolicy policy("admin-token");
  EXPECT_FALSE(policy.Check(http::Request{}, Access::kInvoke, "").has_value());
  const std::string digest = http::Sha256Hex("fn-token");
  auto missing = policy.Check(http::Request{}, Access::kInvoke, digest);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 401);
  auto wrong = policy.Check(WithAuthorization("Bearer other"), Access::kInvoke, digest);
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 403);
  // The digest itself is not the token.
  EXPECT_TRUE(policy.Check(WithAuthorization("Bearer " + digest), Access::kInvoke, digest).has_value());
  EXPECT_FALSE(policy.Check(WithAuthorization("Bearer fn-token"), Access::kInvoke, digest).has_value());
  EXPECT_FALSE(policy.Check(WithAuthorization("Bearer admin-token"), Access::kInvoke, digest).has_value());
  // A function's token is no admin token.
  EXPECT_TRUE(policy.Check(WithAuthorization("Bearer fn-token"), Access::kAdmin).has_value());
}

}  // namespace
}  // namespace phos::phosd
