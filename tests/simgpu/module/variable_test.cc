// Module variables: a module lists each PHOS_DEVICE_VARIABLE / PHOS_CONSTANT_VARIABLE under the
// name nvcc gives it, with its size, alignment and memory; its kernels use the storage the
// loader binds, which each load of the image has for itself.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/globals.cuh"
#include "module/module.h"
#include "test_support.h"

namespace phos::sim {
namespace {

using testing::Geometry;
using testing::GetKernel;
using testing::Launch;
using testing::LoadModuleFile;

// Storage standing in for device memory: the kernels run on this thread, as simgpu's would.
struct Storage {
  explicit Storage(size_t bytes) : words((bytes + 7) / 8 + 1, 0) {}
  uint64_t base() const { return reinterpret_cast<uint64_t>(words.data()); }
  template <typename T>
  T* at(const Module& module, const char* name) const {
    const ModuleVariableInfo* v = nullptr;
    EXPECT_EQ(module.GetVariable(name, &v), CUDA_SUCCESS) << name;
    return v == nullptr ? nullptr : reinterpret_cast<T*>(base() + v->offset);
  }
  std::vector<uint64_t> words;
};

TEST(SimModuleVariableTest, VariablesCarryNvccNamesSizesAndMemoryInSourceOrder) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE_GLOBALS);
  ASSERT_NE(module, nullptr);
  const std::vector<ModuleVariableInfo>& vars = module->variables();
  ASSERT_EQ(vars.size(), 5u);
  struct Expected {
    const char* name;
    size_t size;
    bool constant;
  };
  // A namespace-scope variable keeps its plain name; one in a namespace is mangled (as nvcc's).
  const Expected expected[] = {{"scale_table", 32, true},
                               {"window", 8, true},
                               {"hit_count", 8, false},
                               {"last_index", 4, false},
                               {"_ZN7globals6offsetE", 8, false}};
  size_t end = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(vars[i].name, expected[i].name);
    EXPECT_EQ(vars[i].size, expected[i].size) << vars[i].name;
    EXPECT_EQ(vars[i].constant, expected[i].constant) << vars[i].name;
    EXPECT_GE(vars[i].offset, end) << vars[i].name << " overlaps the variable before it";
    end = vars[i].offset + vars[i].size;
  }
  EXPECT_EQ(module->variable_storage_bytes(), end);
  EXPECT_EQ(module->constant_bytes(), 40u);
  EXPECT_EQ(module->variables()[4].offset % alignof(double), 0u);
  const ModuleVariableInfo* v = nullptr;
  EXPECT_EQ(module->GetVariable("offset", &v), CUDA_ERROR_NOT_FOUND);  // the mangled name only
  EXPECT_EQ(module->GetVariable(nullptr, &v), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(module->variable_base(), 0u);  // nothing bound yet
}

TEST(SimModuleVariableTest, KernelsReadAndWriteTheBoundStorage) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE_GLOBALS);
  ASSERT_NE(module, nullptr);
  Storage storage(module->variable_storage_bytes());
  module->BindVariables(storage.base(), nullptr);
  EXPECT_EQ(module->variable_base(), storage.base());
  float* table = storage.at<float>(*module, "scale_table");
  for (int i = 0; i < 8; ++i) table[i] = 0.25f * static_cast<float>(i + 1);
  *storage.at<Window>(*module, "window") = Window{5, 40};
  *storage.at<double>(*module, "_ZN7globals6offsetE") = 1.5;
  *storage.at<int>(*module, "last_index") = -1;

  const int n = 64;
  std::vector<float> in(n), out(n, -7.0f);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(3 * i - 20);
  const float* pin = in.data();
  float* pout = out.data();
  int count = n;
  Launch(*GetKernel(*module, "_Z15scale_in_windowPKfPfi"), Geometry(2, 1, 1, 32, 1, 1),
         {&pin, &pout, &count});
  for (int i = 0; i < n; ++i) {
    const float want = i >= 5 && i < 45 ? in[i] * (0.25f * static_cast<float>(i % 8 + 1)) + 1.5f : -7.0f;
    EXPECT_EQ(out[i], want) << i;
  }
  EXPECT_EQ(*storage.at<unsigned long long>(*module, "hit_count"), 40u);
  EXPECT_EQ(*storage.at<int>(*module, "last_index"), 44);

  double step = 0.25;
  Launch(*GetKernel(*module, "_Z11bump_offsetd"), Geometry(1, 1, 1, 1, 1, 1), {&step});
  EXPECT_EQ(*storage.at<double>(*module, "_ZN7globals6offsetE"), 2.0);
  EXPECT_EQ(*storage.at<int>(*module, "last_index"), 45);
}

TEST(SimModuleVariableTest, EachLoadOfAnImageHasItsOwnVariables) {
  auto first = LoadModuleFile(PHOS_TEST_MODULE_GLOBALS);
  auto second = LoadModuleFile(PHOS_TEST_MODULE_GLOBALS);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  Storage a(first->variable_storage_bytes()), b(second->variable_storage_bytes());
  first->BindVariables(a.base(), nullptr);
  second->BindVariables(b.base(), nullptr);
  double step = 3.0;
  Launch(*GetKernel(*first, "_Z11bump_offsetd"), Geometry(1, 1, 1, 1, 1, 1), {&step});
  EXPECT_EQ(*a.at<double>(*first, "_ZN7globals6offsetE"), 6.0);
  EXPECT_EQ(*b.at<double>(*second, "_ZN7globals6offsetE"), 0.0);
}

TEST(SimModuleVariableTest, AModuleWithoutVariablesNeedsNoStorage) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  EXPECT_TRUE(module->variables().empty());
  EXPECT_EQ(module->variable_storage_bytes(), 0u);
  EXPECT_EQ(module->constant_bytes(), 0u);
}

TEST(SimModuleVariableTest, AVariableTheLoaderCannotBindIsInvalidImage) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(PHOS_TEST_MODULE_BAD_VARIABLE, &module), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(module, nullptr);
}

}  // namespace
}  // namespace phos::sim
