// The option and result structs as phos.h's first version (PHOS_API_VERSION 1) lays them out. A
// caller compiled against that header passes struct_size = sizeof of these, padding included; a
// later version adds fields only past these sizes (never into their tail padding, which an old
// caller may leave uninitialized) and still accepts them, reading its new fields only when
// struct_size reaches them. Checked against phos.h below, so the two cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

#include "phos.h"

namespace phos::capi::v1 {

struct DeployOptions {
  size_t struct_size;
  const char* name;
  const char* executable;
  int upload;
  const char* const* args;
  size_t arg_count;
  int instances;
  int max_instances;
  int gpus;
  const char* sample_request;
  uint32_t sample_timeout_ms;
};

struct InvokeOptions {
  size_t struct_size;
  const char* restore_mode;
  uint32_t timeout_ms;
};

struct InvokeInfo {
  size_t struct_size;
  char restore_mode[32];
  int64_t first_byte_us;
};

struct RuntimeOptions {
  size_t struct_size;
  const char* data_dir;
  const char* gpu;
  const char* const* functions_dirs;
  size_t functions_dir_count;
  const char* listen;
  const char* log_level;
  const char* sandbox;
};

static_assert(offsetof(phos_runtime_options, sandbox) == offsetof(RuntimeOptions, sandbox) &&
                  sizeof(phos_runtime_options) >= sizeof(RuntimeOptions),
              "phos_runtime_options keeps its first version's layout");
static_assert(offsetof(phos_deploy_options, sample_timeout_ms) ==
                      offsetof(DeployOptions, sample_timeout_ms) &&
                  sizeof(phos_deploy_options) >= sizeof(DeployOptions),
              "phos_deploy_options keeps its first version's layout");
static_assert(offsetof(phos_invoke_options, timeout_ms) == offsetof(InvokeOptions, timeout_ms) &&
                  sizeof(phos_invoke_options) >= sizeof(InvokeOptions),
              "phos_invoke_options keeps its first version's layout");
static_assert(offsetof(phos_invoke_info, first_byte_us) == offsetof(InvokeInfo, first_byte_us) &&
                  sizeof(phos_invoke_info) >= sizeof(InvokeInfo),
              "phos_invoke_info keeps its first version's layout");

}  // namespace phos::capi::v1
