#!/usr/bin/env python3
"""Writes docs/openapi.yaml as JSON into a C++ source file: phosd serves it at /openapi.json.

    openapi_json.py IN.yaml OUT.cc
"""
import json
import sys

import yaml


def main() -> int:
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        document = yaml.safe_load(f)
    text = json.dumps(document, separators=(",", ":"), sort_keys=False)
    delimiter = "phosapi"
    if f'){delimiter}"' in text:
        print(f"openapi_json: the document contains the raw-string delimiter ){delimiter}\"", file=sys.stderr)
        return 1
    with open(target, "w", encoding="utf-8") as f:
        f.write("// Generated from docs/openapi.yaml by scripts/openapi_json.py; do not edit.\n")
        f.write('#include "openapi.h"\n\n')
        f.write("namespace phos::phosd {\n\n")
        f.write(f'const char kOpenApiJson[] = R"{delimiter}({text}){delimiter}";\n\n')
        f.write("}  // namespace phos::phosd\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
