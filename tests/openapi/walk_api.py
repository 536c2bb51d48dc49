#!/usr/bin/env python3
"""Walks every route of docs/openapi.yaml against a real phosd on simgpu.

Checks, failing with every mismatch listed:
  - the document and phosd's routes (frontend/phosd/routes.cc) name the same operations;
  - every documented operation is called at least once, with answers that succeed and answers that
    are refused;
  - each answer's status is one the document lists for its operation, it carries X-Request-Id, and
    a JSON body validates against the schema the document gives for that status;
  - GET /openapi.json is the document itself.

    walk_api.py --phosd PATH --functions-dir DIR --mlp PATH --openapi docs/openapi.yaml --routes routes.cc
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import yaml

FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL:", message, file=sys.stderr)


# ---- the document ----

def resolve(document, node):
    """`node` with a top-level $ref followed (repeatedly)."""
    while isinstance(node, dict) and "$ref" in node:
        path = node["$ref"].lstrip("#/").split("/")
        node = document
        for part in path:
            node = node[part]
    return node


def validate(document, schema, value, where):
    """The ways `value` breaks `schema` (a subset of JSON Schema: what docs/openapi.yaml uses)."""
    schema = resolve(document, schema)
    errors = []
    if "allOf" in schema:
        for part in schema["allOf"]:
            errors += validate(document, part, value, where)
    if "oneOf" in schema:
        matching = [p for p in schema["oneOf"] if not validate(document, p, value, where)]
        if len(matching) != 1:
            errors.append(f"{where}: matches {len(matching)} of oneOf's schemas, not 1")
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool}
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return errors + [f"{where}: {value!r} is not an integer"]
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < minimum {schema['minimum']}")
    elif kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return errors + [f"{where}: {value!r} is not a number"]
    elif kind in types and not isinstance(value, types[kind]):
        return errors + [f"{where}: {type(value).__name__} where the schema says {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not one of {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: required '{key}' missing")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                errors += validate(document, properties[key], item, f"{where}.{key}")
            elif isinstance(extra, dict):
                errors += validate(document, extra, item, f"{where}.{key}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: {len(value)} items > maxItems {schema['maxItems']}")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate(document, schema["items"], item, f"{where}[{i}]")
    return errors


def documented_operations(document):
    methods = {"get", "put", "post", "delete", "patch"}
    return {(m.upper(), path) for path, item in document["paths"].items() for m in item if m in methods}


def routed_operations(routes_cc):
    text = open(routes_cc, encoding="utf-8").read()
    return set(re.findall(r'add\(Access::k\w+,\s*"([A-Z]+)",\s*"([^"]+)"', text))


# ---- phosd ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Phosd:
    def __init__(self, args):
        self.dir = tempfile.mkdtemp(prefix="phosd-openapi-")
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(self.dir, "phosd.log"), "wb")
        self.process = subprocess.Popen(
            [args.phosd, "--gpu", "sim", "--listen", f"127.0.0.1:{port}", "--data-dir", self.dir + "/data",
             "--functions-dir", args.functions_dir], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint + "/healthz", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        else:
            raise RuntimeError("phosd did not become healthy")
        with open(self.dir + "/data/admin.token", encoding="utf-8") as f:
            self.token = f.read().split()[0]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()
        if FAILURES:
            with open(os.path.join(self.dir, "phosd.log"), encoding="utf-8", errors="replace") as f:
                print("phosd's log (tail):\n" + "".join(f.readlines()[-40:]), file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)


def xxh3_128_hex(data):
    """A chunk's id (ChunkId::ToHex: the high half first), through libxxhash."""
    lib = ctypes.CDLL("libxxhash.so.0")

    class Hash(ctypes.Structure):
        _fields_ = [("low", ctypes.c_uint64), ("high", ctypes.c_uint64)]

    lib.XXH3_128bits.restype = Hash
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = lib.XXH3_128bits(data, len(data))
    return f"{h.high:016x}{h.low:016x}"


# ---- the walk ----

class Walker:
    def __init__(self, document, phosd):
        self.document = document
        self.phosd = phosd
        self.called = set()

    def call(self, method, template, status, params=None, body=None, auth="admin", headers=None, content=None,
             query=None):
        """Calls operation (method, template) and checks the answer; returns its parsed JSON (or
        bytes when it is not JSON)."""
        path = template
        for key, value in (params or {}).items():
            path = path.replace("{" + key + "}", str(value))
        if query:
            path += "?" + query
        data = body
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
        elif isinstance(body, str):
            data = body.encode()
        request = urllib.request.Request(self.phosd.endpoint + path, data=data, method=method)
        if auth == "admin":
            request.add_header("Authorization", "Bearer " + self.phosd.token)
        elif auth is not None:
            request.add_header("Authorization", "Bearer " + auth)
        if content:
            request.add_header("Content-Type", content)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        # A 503 saying the instance is still busy with a checkpoint's copies is phosd's "later": asked
        # again until it passes (a minute at most), as a client would.
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(request, timeout=300) as r:
                    got, answer, content_type = r.status, r.read(), r.headers.get("Content-Type", "")
                    request_id = r.headers.get("X-Request-Id")
            except urllib.error.HTTPError as e:
                got, answer, content_type = e.code, e.read(), e.headers.get("Content-Type", "")
                request_id = e.headers.get("X-Request-Id")
            if got != 503 or status == 503 or b"still copying" not in answer or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        where = f"{method} {path} ({got})"
        self.called.add((method, template, got // 100 == 2))
        if got != status:
            fail(f"{where}: expected {status}: {answer[:300]!r}")
        if not request_id:
            fail(f"{where}: no X-Request-Id")
        operation = self.document["paths"].get(template, {}).get(method.lower())
        if operation is None:
            fail(f"{where}: not in the document")
            return None
        response = operation["responses"].get(str(got))
        if response is None:
            fail(f"{where}: status {got} is not one the document lists ({sorted(operation['responses'])})")
            return None
        response = resolve(self.document, response)
        if not content_type.startswith("application/json"):
            return answer
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        try:
            value = json.loads(answer)
        except ValueError:
            fail(f"{where}: a JSON answer that does not parse: {answer[:200]!r}")
            return None
        if schema is None:
            fail(f"{where}: answered JSON where the document gives no JSON schema")
        else:
            for error in validate(self.document, schema, value, "body"):
                fail(f"{where}: {error}")
        return value


    def stream(self, template, status, lines):
        """GETs a streamed answer of JSON lines and checks its first `lines` against the schema its
        200 lists for application/x-ndjson; returns them."""
        request = urllib.request.Request(self.phosd.endpoint + template)
        request.add_header("Authorization", "Bearer " + self.phosd.token)
        self.called.add(("GET", template, True))
        where = f"GET {template}"
        with urllib.request.urlopen(request, timeout=60) as r:
            if r.status != status:
                fail(f"{where}: expected {status}, got {r.status}")
            schema = self.document["paths"][template]["get"]["responses"][str(status)]["content"][
                "application/x-ndjson"]["schema"]
            got = []
            for _ in range(lines):
                value = json.loads(r.readline())
                for error in validate(self.document, schema, value, "line"):
                    fail(f"{where}: {error}")
                got.append(value)
            return got


def walk(args):
    with open(args.openapi, encoding="utf-8") as f:
        document = yaml.safe_load(f)
    documented = documented_operations(document)
    routed = routed_operations(args.routes)
    for op in sorted(routed - documented):
        fail(f"{op[0]} {op[1]}: phosd serves it, the document does not list it")
    for op in sorted(documented - routed):
        fail(f"{op[0]} {op[1]}: listed in the document, phosd does not serve it")

    phosd = Phosd(args)
    try:
        w = Walker(document, phosd)
        w.call("GET", "/healthz", 200, auth=None)
        w.call("GET", "/metrics", 200, auth=None)
        served = w.call("GET", "/openapi.json", 200, auth=None)
        if served != json.loads(json.dumps(document)):
            fail("GET /openapi.json is not docs/openapi.yaml")

        with open(args.mlp, "rb") as f:
            executable = f.read()
        w.call("POST", "/v1/artifacts", 401, body=b"x", auth=None, content="application/octet-stream")
        w.call("POST", "/v1/artifacts", 403, body=b"x", auth="wrong", content="application/octet-stream")
        w.call("POST", "/v1/artifacts", 400, body=b"x", headers={"X-Phos-Artifact-Hash": "0" * 64},
               content="application/octet-stream")
        stored = w.call("POST", "/v1/artifacts", 201, body=executable, content="application/octet-stream")
        if not isinstance(stored, dict) or "artifact" not in stored:
            fail("POST /v1/artifacts: no artifact in its answer")
            stored = {"artifact": ""}
        # Deployed from the uploaded artifact: phosd keeps it in its data directory, here under a
        # private (0700) directory, which a sandboxed function still starts from.
        spec = {"name": "mlp", "artifact": stored["artifact"], "args": ["--size-mib", "16", "--layers", "4"],
                "instances": 1}
        w.call("POST", "/v1/functions", 400, body="not json", content="application/json")
        w.call("POST", "/v1/functions", 404, body=dict(spec, name="other", artifact="0" * 64))
        w.call("POST", "/v1/functions", 201, body=dict(spec, sample_request='{"seed": 1}'))
        w.call("POST", "/v1/functions", 409, body=spec)
        w.call("GET", "/v1/functions", 200, auth=None)
        w.call("GET", "/v1/functions", 200)
        w.call("GET", "/v1/events", 401, auth=None)
        w.call("GET", "/v1/events", 403, auth="wrong")
        w.call("GET", "/v1/cluster/nodes", 503)  # a node of no cluster (tests/integration/cluster_test.cc: of one)
        w.call("GET", "/v1/cluster/nodes", 401, auth=None)
        w.call("GET", "/v1/cluster/nodes", 403, auth="wrong")

        w.call("POST", "/v1/functions/{name}/invoke", 200, {"name": "mlp"}, body='{"seed": 3}')
        w.call("POST", "/v1/functions/{name}/invoke", 400, {"name": "mlp"}, body='{"input": [1]}')
        w.call("POST", "/v1/functions/{name}/invoke", 404, {"name": "absent"}, body="{}")
        w.call("POST", "/v1/functions/{name}/invoke", 400, {"name": "mlp"}, body="{}",
               headers={"X-Phos-Restore-Mode": "sideways"})

        listed = w.call("GET", "/v1/functions/{name}/instances", 200, {"name": "mlp"})
        w.call("GET", "/v1/functions/{name}/instances", 404, {"name": "absent"})
        w.call("GET", "/v1/functions/{name}/instances", 401, {"name": "mlp"}, auth=None)
        w.call("GET", "/v1/functions/{name}/logs", 200, {"name": "mlp"})
        w.call("GET", "/v1/functions/{name}/logs", 400, {"name": "mlp"}, query="tail=lots")
        w.call("GET", "/v1/functions/{name}/logs", 404, {"name": "absent"})
        w.call("GET", "/v1/functions/{name}/job", 503, {"name": "mlp"})
        w.call("GET", "/v1/functions/{name}/job", 404, {"name": "absent"})

        w.call("POST", "/v1/functions/{name}/checkpoint", 201, {"name": "mlp"}, body={"mode": "soft-cow"})
        w.call("POST", "/v1/functions/{name}/checkpoint", 400, {"name": "mlp"}, body={"mode": "sideways"})
        w.call("POST", "/v1/functions/{name}/checkpoint", 404, {"name": "absent"}, body={})
        instance = listed["instances"][0]["id"] if listed and listed.get("instances") else 1
        w.call("POST", "/v1/functions/{name}/instances/{id}/checkpoint", 404, {"name": "mlp", "id": 9999}, body={})
        # The instance the function runs now (the checkpoint above kept it).
        listed = w.call("GET", "/v1/functions/{name}/instances", 200, {"name": "mlp"})
        instance = listed["instances"][0]["id"] if listed and listed.get("instances") else instance
        w.call("POST", "/v1/functions/{name}/instances/{id}/checkpoint", 201, {"name": "mlp", "id": instance},
               body={"mode": "stop-the-world"})

        w.call("POST", "/v1/functions/{name}/migrate", 400, {"name": "mlp"}, body={"bogus": 1})
        w.call("POST", "/v1/functions/{name}/migrate", 200, {"name": "mlp"}, body={"device": 1})
        w.call("POST", "/v1/functions/{name}/instances/{id}/migrate", 404, {"name": "mlp", "id": 9999},
               body={"device": 0})
        w.call("POST", "/v1/functions/{name}/instances/{id}/migrate", 200, {"name": "mlp", "id": instance},
               body={"device": 0})

        w.call("POST", "/v1/chunks/missing", 200, body={"chunks": ["0" * 32]})
        w.call("POST", "/v1/chunks/missing", 400, body={"chunks": ["zz"]})
        chunk = b"phos" * 1024
        w.call("PUT", "/v1/chunks/{id}", 201, {"id": xxh3_128_hex(chunk)}, body=chunk,
               content="application/octet-stream")
        w.call("PUT", "/v1/chunks/{id}", 400, {"id": "0" * 32}, body=chunk, content="application/octet-stream")
        w.call("POST", "/v1/functions/{name}/ranges/{range}/snapshot", 400, {"name": "mlp", "range": 0},
               body=b"not a manifest", content="application/octet-stream")
        w.call("POST", "/v1/functions/{name}/ranges/{range}/snapshot", 404, {"name": "absent", "range": 0},
               body=b"", content="application/octet-stream")

        # The events of an instance restored for a request: subscribed first, then restored.
        events = []
        listener = threading.Thread(target=lambda: events.extend(w.stream("/v1/events", 200, 2)))
        listener.start()
        deadline = time.monotonic() + 60
        while not events and listener.is_alive() and time.monotonic() < deadline:
            w.call("POST", "/v1/functions/{name}/invoke", 200, {"name": "mlp"}, body='{"seed": 4}',
                   headers={"X-Phos-Restore-Mode": "phos"})
        listener.join(60)
        if [e.get("event") for e in events][:1] != ["subscribed"] or not any(
                e.get("function") == "mlp" for e in events[1:]):
            fail(f"GET /v1/events: {events}")

        # Versions: a second deploy of mlp (other arguments), and back to the first.
        w.call("POST", "/v1/functions/{name}/versions", 400, {"name": "mlp"}, body=dict(spec, name="other"))
        w.call("POST", "/v1/functions/{name}/versions", 404, {"name": "absent"}, body=dict(spec, name="absent"))
        second = dict(spec, args=["--size-mib", "16", "--layers", "2"])
        deployed = w.call("POST", "/v1/functions/{name}/versions", 201, {"name": "mlp"}, body=second)
        if not isinstance(deployed, dict) or deployed.get("version") != 2:
            fail(f"POST /v1/functions/mlp/versions: not version 2: {deployed}")
        versions = w.call("GET", "/v1/functions/{name}/versions", 200, {"name": "mlp"})
        states = [(v["version"], v["state"]) for v in (versions or {}).get("versions", [])]
        if states != [(1, "kept"), (2, "serving")]:
            fail(f"GET /v1/functions/mlp/versions: {states}")
        w.call("GET", "/v1/functions/{name}/versions", 404, {"name": "absent"})
        w.call("POST", "/v1/functions/{name}/rollback", 400, {"name": "mlp"}, body={"version": "one"})
        w.call("POST", "/v1/functions/{name}/rollback", 404, {"name": "mlp"}, body={"version": 7})
        back = w.call("POST", "/v1/functions/{name}/rollback", 200, {"name": "mlp"})
        if not isinstance(back, dict) or back.get("version") != 1 or back.get("args") != spec["args"]:
            fail(f"POST /v1/functions/mlp/rollback: not version 1: {back}")
        w.call("POST", "/v1/functions/{name}/rollback", 409, {"name": "mlp"}, body={"version": 1})
        w.call("POST", "/v1/functions/{name}/invoke", 200, {"name": "mlp"}, body='{"seed": 3}')
        w.call("DELETE", "/v1/functions/{name}/versions/{version}", 409, {"name": "mlp", "version": 1})
        w.call("DELETE", "/v1/functions/{name}/versions/{version}", 400, {"name": "mlp", "version": "x"})
        w.call("DELETE", "/v1/functions/{name}/versions/{version}", 200, {"name": "mlp", "version": 2})
        w.call("DELETE", "/v1/functions/{name}/versions/{version}", 404, {"name": "mlp", "version": 2})

        w.call("POST", "/v1/sessions", 201, body={"gpus": 1})
        w.call("POST", "/v1/sessions", 400, body={"gpus": 99})

        w.call("DELETE", "/v1/functions/{name}", 200, {"name": "mlp"})
        w.call("DELETE", "/v1/functions/{name}", 404, {"name": "mlp"})

        for method, path in sorted(documented):
            if not any((method, path, ok) in w.called for ok in (True, False)):
                fail(f"{method} {path}: documented but never walked")
    finally:
        phosd.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phosd", required=True)
    parser.add_argument("--functions-dir", required=True)
    parser.add_argument("--mlp", required=True)
    parser.add_argument("--openapi", required=True)
    parser.add_argument("--routes", required=True)
    walk(parser.parse_args())
    if FAILURES:
        print(f"walk_api: {len(FAILURES)} failures", file=sys.stderr)
        return 1
    print("walk_api: every documented route answered as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
