// The snapshot manifest's envelope and protobuf payload (snapshot-store/src/manifest.cc): any
// bytes decode to a manifest or an error, and a manifest that decodes encodes back to an
// envelope that decodes to the same manifest.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "phos/store/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // A small cap as well as the default, so the cap's own check is reached by short inputs.
  (void)phos::store::DecodeManifest(bytes, 64);
  phos::Result<phos::store::Manifest> manifest = phos::store::DecodeManifest(bytes);
  if (!manifest.ok()) return 0;
  std::string again = phos::store::EncodeManifest(*manifest);
  phos::Result<phos::store::Manifest> round = phos::store::DecodeManifest(again);
  if (!round.ok() || phos::store::EncodeManifest(*round) != again) std::abort();
  return 0;
}
