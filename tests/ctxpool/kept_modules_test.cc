// Modules kept loaded in pooled contexts for a function's next instance (docs/design.md D7, D11):
// its next lease gets them back without a load, a lease for anyone else never sees them (they are
// unloaded before it is handed out), and nothing stays loaded once nobody keeps it.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "counting_driver.h"
#include "phos/ctxpool/context_pool.h"

namespace phos::ctxpool {
namespace {

using namespace std::chrono_literals;

constexpr const char* kKernel = "_Z7add_onePKiPii";  // a kernel of the test module

class KeptModulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = testing::OpenCountingDriver(&counters_);
    ASSERT_NE(driver_, nullptr);
    std::ifstream in(PHOS_CTXPOOL_TEST_MODULE, std::ios::binary);
    image_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(image_.empty()) << PHOS_CTXPOOL_TEST_MODULE;
    modules_before_ = counters_->modules.load();
  }

  // Loads the test module in the lease's context.
  CUmodule Load(const ContextLease& lease) {
    CUmodule module = nullptr;
    EXPECT_EQ(driver_->cuCtxPushCurrent(lease.context()), CUDA_SUCCESS);
    EXPECT_EQ(driver_->cuModuleLoadData(&module, image_.data()), CUDA_SUCCESS);
    driver_->cuCtxPopCurrent(nullptr);
    return module;
  }

  // Whether `module` still names a loaded module (looked up in the lease's context).
  bool Loaded(const ContextLease& lease, CUmodule module) {
    EXPECT_EQ(driver_->cuCtxPushCurrent(lease.context()), CUDA_SUCCESS);
    CUfunction f = nullptr;
    CUresult r = driver_->cuModuleGetFunction(&f, module, kKernel);
    driver_->cuCtxPopCurrent(nullptr);
    return r == CUDA_SUCCESS;
  }

  int LiveModules() const { return counters_->modules.load() - modules_before_; }

  std::shared_ptr<driver::DriverTable> driver_;
  testing::DriverCounters* counters_ = nullptr;
  std::string image_;
  int modules_before_ = 0;
};

TEST_F(KeptModulesTest, TheOwnersNextLeaseGetsThemBackWithoutALoad) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  CUmodule module = nullptr;
  uint64_t context = 0;
  {
    Result<ContextLease> a = (*pool)->Lease(nullptr, "fn-a");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->modules_owner(), "fn-a");
    EXPECT_TRUE(a->TakeKeptModules().empty()) << "a new context keeps nothing";
    context = a->context_id();
    module = Load(*a);
    a->KeepModules("fn-a", {{"image-hash", module}});
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(LiveModules(), 1) << "the scrub unloaded a kept module";
  Result<ContextLease> again = (*pool)->Lease(nullptr, "fn-a");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->context_id(), context);
  ModulesByHash kept = again->TakeKeptModules();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept["image-hash"], module);
  EXPECT_TRUE(Loaded(*again, module));
  EXPECT_EQ((*pool)->Stats().scrub_failures, 0u);
  // Handed to the scrub this time: nothing is kept or loaded after the return.
  again->tenant().modules.push_back(module);
  again->Return();
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(LiveModules(), 0);
}

TEST_F(KeptModulesTest, AnotherOwnersLeaseNeverSeesThemAndTheyAreUnloadedFirst) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  CUmodule module = nullptr;
  {
    Result<ContextLease> a = (*pool)->Lease(nullptr, "fn-a");
    ASSERT_TRUE(a.ok());
    module = Load(*a);
    a->KeepModules("fn-a", {{"image-hash", module}});
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  for (const std::string owner : {"fn-b", ""}) {
    SCOPED_TRACE("lease for '" + owner + "'");
    Result<ContextLease> b = (*pool)->Lease(nullptr, owner);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b->TakeKeptModules().empty());
    EXPECT_EQ(LiveModules(), 0) << "another function's module is loaded in the context leased";
    EXPECT_FALSE(Loaded(*b, module));
    b->Return();
    ASSERT_TRUE((*pool)->WaitIdle(10s));
  }
  Result<ContextLease> a = (*pool)->Lease(nullptr, "fn-a");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->TakeKeptModules().empty()) << "unloaded modules came back";
}

TEST_F(KeptModulesTest, ALeasePrefersItsOwnersContextThenOneKeepingNothing) {
  auto pool = ContextPool::Open({.min_ready = 2, .max_contexts = 2}, driver_);
  ASSERT_TRUE(pool.ok());
  uint64_t keeping = 0, empty = 0;
  {
    Result<ContextLease> x = (*pool)->Lease(nullptr, "fn-a");
    Result<ContextLease> y = (*pool)->Lease(nullptr, "fn-a");
    ASSERT_TRUE(x.ok() && y.ok());
    // The one returned first is the longest ready: the ranking, not the order, must pick.
    keeping = y->context_id();
    empty = x->context_id();
    y->KeepModules("fn-a", {{"image-hash", Load(*y)}});
    x->Return();
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  {
    Result<ContextLease> b = (*pool)->Lease(nullptr, "fn-b");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->context_id(), empty) << "another function evicted fn-a's modules with a clean context ready";
    EXPECT_EQ(LiveModules(), 1);
    Result<ContextLease> a = (*pool)->Lease(nullptr, "fn-a");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->context_id(), keeping);
    ModulesByHash kept = a->TakeKeptModules();
    EXPECT_EQ(kept.size(), 1u);
    for (const auto& [hash, module] : kept) a->tenant().modules.push_back(module);
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(LiveModules(), 0);
}

TEST_F(KeptModulesTest, ModulesWithoutAnOwnerOrTwiceKeptGoToTheScrub) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  {
    Result<ContextLease> lease = (*pool)->Lease();
    ASSERT_TRUE(lease.ok());
    lease->KeepModules("", {{"image-hash", Load(*lease)}});
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(LiveModules(), 0);
  {
    Result<ContextLease> lease = (*pool)->Lease(nullptr, "fn-a");
    ASSERT_TRUE(lease.ok());
    lease->KeepModules("fn-a", {{"image-hash", Load(*lease)}});
    lease->KeepModules("fn-a", {{"image-hash", Load(*lease)}});  // the same image again
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(LiveModules(), 1);
  pool->reset();  // destroying the context unloads what it kept
  EXPECT_EQ(LiveModules(), 0);
}

}  // namespace
}  // namespace phos::ctxpool
