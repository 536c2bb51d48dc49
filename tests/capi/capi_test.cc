// The C API without a phosd: version, status names, the calling thread's last error, endpoints and
// arguments refused before anything is sent, and libphos.so's exports (only phos_*, under PHOS_1,
// exactly the functions phos.h declares).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "phos.h"
#include "phos/base/subprocess.h"

namespace {

TEST(CapiTest, TheLibraryIsTheHeadersVersion) {
  EXPECT_EQ(phos_api_version(), PHOS_API_VERSION);
}

TEST(CapiTest, TheLibrarySaysThePhosVersionItIs) {
  ASSERT_NE(phos_version(), nullptr);
  EXPECT_STREQ(phos_version(), PHOS_PROJECT_VERSION);
}

// The embedded daemon's array options are checked before anything starts: a count with no array,
// or a NULL entry, is refused by name; a caller of the first version (struct_size without the
// trusted module directories) is not read past its struct.
TEST(CapiTest, EmbeddedOptionsArraysAreChecked) {
  phos_runtime* runtime = nullptr;
  phos_runtime_options o = {};
  o.struct_size = sizeof(o);
  o.data_dir = "/dev/null/phos-capi-test";  // never made, whoever runs the test
  o.trusted_module_dir_count = 1;
  EXPECT_EQ(phos_runtime_open(&o, &runtime), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("trusted_module_dirs is NULL"), std::string::npos) << phos_last_error();
  const char* dirs[] = {nullptr};
  o.trusted_module_dirs = dirs;
  EXPECT_EQ(phos_runtime_open(&o, &runtime), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("trusted_module_dirs[0] is NULL"), std::string::npos) << phos_last_error();
  o.functions_dir_count = 2;
  EXPECT_EQ(phos_runtime_open(&o, &runtime), PHOS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(phos_last_error()).find("functions_dirs is NULL"), std::string::npos) << phos_last_error();
  // The first version's caller: the fields past its struct_size (garbage here) are not read; what
  // fails is the data directory, which cannot be made.
  o.functions_dir_count = 0;
  o.trusted_module_dirs = nullptr;
  o.struct_size = offsetof(phos_runtime_options, trusted_module_dirs);
  EXPECT_NE(phos_runtime_open(&o, &runtime), PHOS_OK);
  EXPECT_EQ(std::string(phos_last_error()).find("trusted_module_dirs"), std::string::npos) << phos_last_error();
  EXPECT_EQ(runtime, nullptr);
}

TEST(CapiTest, EveryStatusHasItsName) {
  EXPECT_STREQ(phos_status_name(PHOS_OK), "PHOS_OK");
  EXPECT_STREQ(phos_status_name(PHOS_FUNCTION_ERROR), "PHOS_FUNCTION_ERROR");
  EXPECT_STREQ(phos_status_name(PHOS_INTERNAL), "PHOS_INTERNAL");
  EXPECT_STREQ(phos_status_name(static_cast<phos_status>(PHOS_INTERNAL + 1)), "PHOS_UNKNOWN_STATUS");
  EXPECT_STREQ(phos_status_name(static_cast<phos_status>(-1)), "PHOS_UNKNOWN_STATUS");
}

TEST(CapiTest, EndpointsOtherThanHttpHostPortOrUnixPathAreRefused) {
  phos_client* client = reinterpret_cast<phos_client*>(1);
  // Well formed, but nobody listens there.
  EXPECT_EQ(phos_connect("unix:///nonexistent/phos.sock", nullptr, &client), PHOS_UNAVAILABLE);
  EXPECT_EQ(client, nullptr);
  for (const char* endpoint : {"127.0.0.1:7070", "https://127.0.0.1:7070", "http://", "http://:7070",
                               "http://127.0.0.1:0", "http://127.0.0.1:70000", "http://127.0.0.1:x",
                               "http://127.0.0.1:7070/v1", "http://user@127.0.0.1:7070", "", "unix://",
                               "unix://relative.sock", "unix:///tab\tin"}) {
    SCOPED_TRACE(endpoint);
    EXPECT_EQ(phos_connect(endpoint, nullptr, &client), PHOS_INVALID_ARGUMENT);
    EXPECT_EQ(client, nullptr);
    EXPECT_NE(std::string(phos_last_error()).find("http://HOST:PORT or unix:///PATH"), std::string::npos)
        << phos_last_error();
  }
  EXPECT_EQ(phos_connect(nullptr, nullptr, &client), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(phos_connect("http://127.0.0.1:7070", nullptr, nullptr), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(phos_connect("http://127.0.0.1:7070", "two words", &client), PHOS_INVALID_ARGUMENT);
}

// A port bound and not listening: connections to it are refused for as long as the socket is held.
TEST(CapiTest, APortNobodyListensOnIsUnavailable) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  phos_client* client = nullptr;
  EXPECT_EQ(phos_connect(endpoint.c_str(), "token", &client), PHOS_UNAVAILABLE);
  EXPECT_EQ(client, nullptr);
  EXPECT_NE(std::string(phos_last_error()).find(endpoint), std::string::npos) << phos_last_error();
  close(fd);
}

TEST(CapiTest, TheLastErrorIsTheCallingThreads) {
  phos_client* client = nullptr;
  ASSERT_EQ(phos_connect("unix://x", nullptr, &client), PHOS_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] {
    other = phos_last_error();
    phos_client* c = nullptr;
    EXPECT_EQ(phos_connect("ftp://x", nullptr, &c), PHOS_INVALID_ARGUMENT);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(phos_last_error()).find("unix://"), std::string::npos) << phos_last_error();
}

TEST(CapiTest, CallsWithoutAClientAreInvalidArguments) {
  void* response = nullptr;
  size_t len = 0;
  char* json = nullptr;
  EXPECT_EQ(phos_invoke(nullptr, "mlp", "{}", 2, nullptr, &response, &len, nullptr), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(phos_list(nullptr, &json), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(phos_remove(nullptr, "mlp"), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(phos_stats(nullptr, &json), PHOS_INVALID_ARGUMENT);
  EXPECT_EQ(json, nullptr);
  EXPECT_EQ(phos_close(nullptr), PHOS_OK);
  phos_free(nullptr);
}

// The exported functions: what `nm -D --defined-only` lists of libphos.so, each with its version.
std::map<std::string, std::string> Exports() {
  phos::Result<phos::CommandOutput> nm =
      phos::RunCommand({.argv = {"nm", "-D", "--defined-only", "--with-symbol-versions", PHOS_CAPI_LIBRARY}},
                       std::chrono::seconds(60));
  EXPECT_TRUE(nm.ok() && nm->status.success()) << (nm.ok() ? nm->status.ToString() : nm.status().ToString());
  std::map<std::string, std::string> exports;
  if (!nm.ok()) return exports;
  std::istringstream lines(nm->output);
  for (std::string line; std::getline(lines, line);) {
    // "0000000000012345 T phos_connect@@PHOS_1", or the version node itself, "0000000000000000 A PHOS_1".
    std::istringstream words(line);
    std::string address, type, symbol;
    words >> address >> type >> symbol;
    if (symbol.empty()) continue;
    const size_t at = symbol.find('@');
    exports[symbol.substr(0, at)] =
        at == std::string::npos ? "" : symbol.substr(symbol.find_first_not_of('@', at));
  }
  return exports;
}

// The functions phos.h declares.
std::set<std::string> Declared() {
  std::ifstream in(PHOS_CAPI_HEADER);
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  // Each declaration: "PHOS_EXPORT <type> phos_<name>(" (the macro's own definition has no "phos_").
  std::set<std::string> names;
  for (size_t at = header.find("PHOS_EXPORT "); at != std::string::npos;
       at = header.find("PHOS_EXPORT ", at + 1)) {
    const size_t paren = header.find('(', at);
    const size_t name = header.rfind("phos_", paren);
    if (paren == std::string::npos || name == std::string::npos || name < at) continue;
    names.insert(header.substr(name, paren - name));
  }
  return names;
}

TEST(CapiTest, TheLibraryExportsExactlyTheHeadersFunctionsUnderPhos1) {
  const std::map<std::string, std::string> exports = Exports();
  const std::set<std::string> declared = Declared();
  ASSERT_TRUE(declared.contains("phos_connect") && declared.contains("phos_invoke_stream"))
      << "phos.h's declarations were not found";
  std::set<std::string> exported;
  for (const auto& [symbol, version] : exports) {
    if (symbol == "PHOS_1") continue;  // the version node
    EXPECT_EQ(symbol.rfind("phos_", 0), 0u) << symbol << " is exported";
    EXPECT_EQ(version, "PHOS_1") << symbol;
    exported.insert(symbol);
  }
  EXPECT_EQ(exported, declared);
}

}  // namespace
