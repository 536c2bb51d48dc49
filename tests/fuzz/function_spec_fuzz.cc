// POST /v1/functions' body (runtime's ParseFunctionSpecJson) and its validation: any bytes give
// a spec or an error naming the field, and a spec that parses survives its own JSON form.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "phos/runtime/instance_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  phos::Result<phos::runtime::FunctionSpec> spec = phos::runtime::ParseFunctionSpecJson(json);
  if (!spec.ok()) return 0;
  (void)phos::runtime::ValidateFunctionSpec(*spec);
  (void)phos::runtime::MaxInstances(*spec);
  const std::string again = phos::runtime::FunctionSpecToJson(*spec);
  phos::Result<phos::runtime::FunctionSpec> round = phos::runtime::ParseFunctionSpecJson(again);
  if (!round.ok() || phos::runtime::FunctionSpecToJson(*round) != again) std::abort();
  return 0;
}
