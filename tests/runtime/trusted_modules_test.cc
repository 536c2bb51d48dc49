// Only simgpu module images phosd trusts are loaded in a session: the bytes the build made, by
// SHA-256. Any other image a function process sends is refused before it reaches the driver (its
// constructors never run in phosd), and its bytes do not stay with the session.
#include "phos/runtime/trusted_modules.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "phos/ipc/control.h"
#include "phos/runtime/api_server.h"

namespace phos::runtime {
namespace {

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TrustedModulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = ReadBytes(PHOS_TEST_MODULE);
    ASSERT_GT(image_.size(), 4096u);
    dir_ = ::testing::TempDir() + "/phos-trusted-modules-" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(PHOS_TEST_MODULE, dir_ + "/kernels.simgpu.so",
                               std::filesystem::copy_options::overwrite_existing);
    // Not a module's name: not read.
    std::ofstream(dir_ + "/notes.txt") << "not an image";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<uint8_t> image_;
  std::string dir_;
};

TEST_F(TrustedModulesTest, TrustsTheImagesOfItsDirectoriesByContent) {
  auto trusted = TrustedModules::FromDirectories({dir_});
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  EXPECT_EQ((*trusted)->size(), 1u);
  EXPECT_TRUE((*trusted)->Contains(image_.data(), image_.size()));
  std::vector<uint8_t> changed = image_;
  changed[changed.size() / 2] ^= 1;
  EXPECT_FALSE((*trusted)->Contains(changed.data(), changed.size()));
  EXPECT_FALSE((*trusted)->Contains(image_.data(), image_.size() - 1));
  EXPECT_FALSE(TrustedModules::FromDirectories({dir_ + "/missing"}).ok());
}

// An image put into a trusted directory after phosd looked is trusted at its first load; one
// taken away is trusted no more; one rewritten in place is its new bytes.
TEST_F(TrustedModulesTest, TheDirectoriesAreLookedAtAgainWhenAnImageIsNotFound) {
  std::vector<uint8_t> other = image_;
  other[other.size() / 2] ^= 1;
  auto trusted = TrustedModules::FromDirectories({dir_}, std::chrono::milliseconds(0));
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  EXPECT_FALSE((*trusted)->Contains(other.data(), other.size()));

  std::ofstream(dir_ + "/added.simgpu.so", std::ios::binary)
      .write(reinterpret_cast<const char*>(other.data()), static_cast<std::streamsize>(other.size()));
  EXPECT_TRUE((*trusted)->Contains(other.data(), other.size()));
  EXPECT_EQ((*trusted)->size(), 2u);

  std::filesystem::remove(dir_ + "/kernels.simgpu.so");
  std::vector<uint8_t> unknown = image_;
  unknown[0] ^= 1;
  EXPECT_FALSE((*trusted)->Contains(unknown.data(), unknown.size()));  // a miss: the directory is looked at
  EXPECT_FALSE((*trusted)->Contains(image_.data(), image_.size()));
  EXPECT_EQ((*trusted)->size(), 1u);

  // Rewritten in place (the directory itself unchanged), one byte longer: its new bytes count.
  std::vector<uint8_t> longer = other;
  longer.push_back(0);
  std::ofstream(dir_ + "/added.simgpu.so", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(longer.data()), static_cast<std::streamsize>(longer.size()));
  EXPECT_TRUE((*trusted)->Contains(longer.data(), longer.size()));
  EXPECT_FALSE((*trusted)->Contains(other.data(), other.size()));
}

// Misses look at the directories at most once per interval: an image added right after a look is
// found once the interval has passed, not before (the hour here never passes).
TEST_F(TrustedModulesTest, MissesLookAtTheDirectoriesAtMostOncePerInterval) {
  std::vector<uint8_t> other = image_;
  other[other.size() / 2] ^= 1;
  auto trusted = TrustedModules::FromDirectories({dir_}, std::chrono::hours(1));
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  std::ofstream(dir_ + "/added.simgpu.so", std::ios::binary)
      .write(reinterpret_cast<const char*>(other.data()), static_cast<std::streamsize>(other.size()));
  EXPECT_FALSE((*trusted)->Contains(other.data(), other.size()));
  EXPECT_EQ((*trusted)->size(), 1u);
  EXPECT_TRUE((*trusted)->Contains(image_.data(), image_.size()));
}

// A session of a server that trusts the test module: the module loads and its kernel is found;
// the same image with one byte changed is refused, and its kernels fail to register.
TEST_F(TrustedModulesTest, ASessionLoadsOnlyTrustedImages) {
  auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto trusted = TrustedModules::FromDirectories({dir_});
  ASSERT_TRUE(trusted.ok());
  const std::string path = "/tmp/phos-trusted-modules-test-" + std::to_string(getpid()) + ".sock";
  auto server = ApiServer::Start({.socket_path = path, .trusted_modules = *trusted, .ring_bytes = 1u << 20,
                                  .reply_bytes = 256u << 10},
                                 *table);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string token = (*server)->IssueToken();
  auto sock = ipc::ConnectSeqpacket(path);
  ASSERT_TRUE(sock.ok());
  ipc::Hello hello = ipc::MakeHello(token, getpid());
  ASSERT_TRUE(ipc::SendDatagram(*sock, &hello, sizeof(hello)).ok());
  ipc::Answer answer;
  int ring_fd = -1;
  auto n = ipc::ReceiveDatagram(*sock, &answer, sizeof(answer), &ring_fd);
  ASSERT_TRUE(n.ok() && ipc::CheckAnswer(&answer, *n).ok());
  auto ring = ipc::Ring::Attach(ring_fd);
  ASSERT_TRUE(ring.ok());
  uint64_t seq = 0;
  auto alive = [] { return true; };
  auto call = [&](ipc::Op op, const void* args, size_t args_bytes, const void* tail, size_t tail_bytes) {
    const uint64_t s = ++seq;
    EXPECT_TRUE((*ring)->Write(op, ipc::kFlagReply, s, args, args_bytes, tail, tail_bytes, alive).ok());
    EXPECT_TRUE((*ring)->WaitCompleted(s, alive).ok());
    return (*ring)->reply_header().result;
  };
  auto send_module = [&](uint64_t id, const std::vector<uint8_t>& bytes) {
    // In chunks that fit a record, as the frontend sends them.
    const size_t chunk = (*ring)->max_payload() - sizeof(ipc::ModuleChunkArgs);
    for (size_t offset = 0; offset < bytes.size(); offset += chunk) {
      const size_t len = std::min(chunk, bytes.size() - offset);
      ipc::ModuleChunkArgs a{.module_id = id, .total_bytes = bytes.size(), .offset = offset, .is_fatbin = 0, .pad = 0};
      if (call(ipc::Op::kModuleChunk, &a, sizeof(a), bytes.data() + offset, len) != CUDA_SUCCESS) return false;
    }
    return true;
  };
  auto find_kernel = [&](uint64_t module_id) {
    const std::string name = "_Z7vec_addPKfS0_Pfi";  // vec_add, as the frontend registers it
    ipc::FunctionGetArgs a{.module_id = module_id, .name_bytes = static_cast<uint32_t>(name.size()), .pad = 0};
    return call(ipc::Op::kFunctionGet, &a, sizeof(a), name.data(), name.size());
  };
  std::vector<uint8_t> changed = image_;
  changed[changed.size() / 2] ^= 1;
  ASSERT_TRUE(send_module(1, changed));
  EXPECT_EQ(find_kernel(1), CUDA_ERROR_NO_BINARY_FOR_GPU);
  ASSERT_TRUE(send_module(2, image_));
  EXPECT_EQ(find_kernel(2), CUDA_SUCCESS);
  ring->reset();
  (*server)->EndSession(token);
  close(*sock);
}

}  // namespace
}  // namespace phos::runtime
