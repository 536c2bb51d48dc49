// Requests signed by the object store's client (libcurl's SigV4) against the published AWS
// Signature Version 4 test vectors: the Authorization header a server receives is the vector's,
// byte for byte. The requests go to a recording server on loopback, addressed by the vectors'
// host names (CURLOPT_CONNECT_TO), with the vectors' time (X-Amz-Date).
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "phos/http/server.h"
#include "phos/objstore/s3.h"

namespace phos::objstore {
namespace {

class SigV4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    http::Router router;
    for (const char* method : {"GET", "POST"}) {
      ASSERT_TRUE(router
                      .Add(method, "/",
                           [this](http::Request req, http::Responder out) {
                             std::lock_guard lock(mu_);
                             const std::string* auth = req.Header("Authorization");
                             authorization_ = auth != nullptr ? *auth : "";
                             out.Send(http::Response::Text(200, "ok"));
                           })
                      .ok());
    }
    ASSERT_TRUE(router
                    .Add("GET", "/test.txt",
                         [this](http::Request req, http::Responder out) {
                           std::lock_guard lock(mu_);
                           const std::string* auth = req.Header("Authorization");
                           authorization_ = auth != nullptr ? *auth : "";
                           out.Send(http::Response::Text(200, "0123456789"));
                         })
                    .ok());
    http::ServerOptions options;
    options.listen = "127.0.0.1:0";
    auto server = http::Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  // The Authorization header the server received for `request`, sent to host `host` on port 80
  // as far as the signature knows.
  std::string Received(SignedRequest request, const std::string& host, const Credentials& credentials) {
    request.connect_to = host + ":80:127.0.0.1:" + std::to_string(server_->port());
    Result<SignedResponse> answer = SignedFetch(request, credentials);
    EXPECT_TRUE(answer.ok()) << answer.status().ToString();
    if (answer.ok()) {
      EXPECT_EQ(answer->status, 200) << answer->body;
    }
    std::lock_guard lock(mu_);
    return authorization_;
  }

  std::unique_ptr<http::Server> server_;
  std::mutex mu_;
  std::string authorization_;
};

// The AWS SigV4 test suite's credentials, and its requests: `method` / at its time, region and
// service.
const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
SignedRequest SuiteRequest(const std::string& method) {
  return SignedRequest{.method = method,
                       .url = "http://example.amazonaws.com/",
                       .headers = {{"X-Amz-Date", "20150830T123600Z"}},
                       .region = "us-east-1",
                       .service = "service"};
}

TEST_F(SigV4Test, GetVanilla) {
  EXPECT_EQ(Received(SuiteRequest("GET"), "example.amazonaws.com", kSuite),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST_F(SigV4Test, PostVanilla) {
  EXPECT_EQ(Received(SuiteRequest("POST"), "example.amazonaws.com", kSuite),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

// S3's own example (GetObject, the first ten bytes of examplebucket/test.txt): the payload's
// SHA-256 signed as X-Amz-Content-Sha256, and a Range header.
TEST_F(SigV4Test, S3GetObjectExample) {
  SignedRequest r{.method = "GET",
                  .url = "http://examplebucket.s3.amazonaws.com/test.txt",
                  .headers = {{"Range", "bytes=0-9"},
                              {"X-Amz-Content-Sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
                              {"X-Amz-Date", "20130524T000000Z"}},
                  .region = "us-east-1",
                  .service = "s3"};
  EXPECT_EQ(Received(r, "examplebucket.s3.amazonaws.com",
                     Credentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""}),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// A different secret signs differently: the check above can fail.
TEST_F(SigV4Test, AnotherSecretIsAnotherSignature) {
  const std::string signed_other =
      Received(SuiteRequest("GET"), "example.amazonaws.com", Credentials{"AKIDEXAMPLE", "another", ""});
  EXPECT_EQ(signed_other.find("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"), std::string::npos);
  EXPECT_NE(signed_other.find("Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request"), std::string::npos);
}

TEST(CredentialsTest, FromTheEnvironmentElseTheProfileOfAFile) {
  const std::string file = ::testing::TempDir() + "phos-credentials-" + std::to_string(getpid());
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s3cret\n\n"
               "[other]\naws_access_key_id=AKIDOTHER\naws_secret_access_key=also\naws_session_token = tok\n"
               "[broken]\naws_access_key_id = only\n",
               f);
    std::fclose(f);
  }
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_PROFILE");
  Result<Credentials> c = FindCredentials(file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(c->secret_access_key, "s3cret");
  setenv("AWS_PROFILE", "other", 1);
  c = FindCredentials(file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDOTHER");
  EXPECT_EQ(c->session_token, "tok");
  setenv("AWS_PROFILE", "broken", 1);
  EXPECT_EQ(FindCredentials(file).status().code(), StatusCode::kInvalidArgument);
  setenv("AWS_PROFILE", "absent", 1);
  EXPECT_EQ(FindCredentials(file).status().code(), StatusCode::kNotFound);
  setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "fromenv", 1);
  c = FindCredentials(file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDENV");
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_PROFILE");
  std::remove(file.c_str());
}

}  // namespace
}  // namespace phos::objstore
