// The HTTP API's OpenAPI document (docs/openapi.yaml), as JSON, for GET /openapi.json. Generated
// at build time (scripts/openapi_json.py), so the document served is the one in the tree.
#pragma once

namespace phos::phosd {

extern const char kOpenApiJson[];

}  // namespace phos::phosd
