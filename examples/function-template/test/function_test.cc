// The function's test: runs the phos daemon inside this process (phos.h's embedded mode) on the
// simulated GPU, deploys the function built beside this test, invokes it, and checks each answer
// against the same arithmetic done here on the CPU. Exits 0 when every check held.
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phos.h"

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Invokes the function with `request`; the answer's text, or "" with `status` saying why not.
std::string Invoke(phos_client* client, const std::string& request, phos_status* status) {
  void* response = nullptr;
  size_t length = 0;
  *status = phos_invoke(client, FUNCTION_NAME, request.data(), request.size(), nullptr, &response, &length, nullptr);
  std::string text = *status == PHOS_OK ? std::string(static_cast<const char*>(response), length) : "";
  phos_free(response);
  return text;
}

// y = a * x + b on the CPU: the reference the function's kernel is held to.
std::vector<float> Reference(float a, float b, const std::vector<float>& x) {
  std::vector<float> y;
  for (float v : x) y.push_back(a * v + b);
  return y;
}

}  // namespace

int main() {
  char scratch[] = "/tmp/function-test-XXXXXX";
  if (mkdtemp(scratch) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const char* trusted[] = {FUNCTION_MODULES};
  phos_runtime_options options = {};
  options.struct_size = sizeof(options);
  options.data_dir = scratch;
  options.gpu = "sim";
  options.trusted_module_dirs = trusted;
  options.trusted_module_dir_count = 1;
  phos_runtime* runtime = nullptr;
  phos_client* client = nullptr;
  if (phos_runtime_open(&options, &runtime) != PHOS_OK || phos_runtime_connect(runtime, &client) != PHOS_OK) {
    std::fprintf(stderr, "cannot start phos: %s\n", phos_last_error());
    return 1;
  }

  phos_deploy_options deploy = {};
  deploy.struct_size = sizeof(deploy);
  deploy.name = FUNCTION_NAME;
  deploy.executable = FUNCTION_EXECUTABLE;
  deploy.upload = 1;
  deploy.sample_request = R"({"a": 1, "b": 0, "x": [1]})";
  phos_status status = phos_deploy(client, &deploy, nullptr);
  Check(status == PHOS_OK, std::string("deploy: ") + (status == PHOS_OK ? "" : phos_last_error()));

  if (status == PHOS_OK) {
    std::vector<float> x;
    for (int i = 0; i < 1000; ++i) x.push_back(static_cast<float>(i % 97) * 0.25f - 7.0f);
    const float a = 2.5f;
    const float b = -1.0f;
    const std::string answer = Invoke(client, nlohmann::json{{"a", a}, {"b", b}, {"x", x}}.dump(), &status);
    Check(status == PHOS_OK, std::string("invoke: ") + (status == PHOS_OK ? "" : phos_last_error()));
    const nlohmann::json j = nlohmann::json::parse(answer, nullptr, false);
    const std::vector<float> want = Reference(a, b, x);
    bool same = j.is_object() && j.contains("y") && j["y"].is_array() && j["y"].size() == want.size();
    for (size_t i = 0; same && i < want.size(); ++i) {
      same = std::fabs(j["y"][i].get<float>() - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i]));
    }
    Check(same, "the answer is a * x + b for each of 1000 elements");

    Invoke(client, "not json", &status);
    Check(status == PHOS_FUNCTION_ERROR, "a malformed request is the function's refusal");
  }

  phos_close(client);
  phos_runtime_close(runtime);
  std::filesystem::remove_all(scratch);
  return failures == 0 ? 0 : 1;
}
