#!/usr/bin/env python3
"""Checks deploy/k8s/ without a cluster: every document parses and is a kind this directory uses,
names are DNS labels in one namespace, and what one object names another holds — the DaemonSet's
volumes, mounts, ports and probes, the Service's selector and target port, the ConfigMap and
Secret keys it reads as files and as environment variables, the downward-API fields and the $(VAR)
its args expand — and phosd accepts its arguments with the ConfigMap's settings, and the settings
the ConfigMap leaves commented out (phosd --print-config); the paths they name lie on the volumes
mounted, and the address it advertises is the port it listens on."""
import argparse
import copy
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

FAILURES = []
QUIET = False  # the self-test's breakages fail quietly
KINDS = {"Namespace": "v1", "ConfigMap": "v1", "Secret": "v1", "Service": "v1", "DaemonSet": "apps/v1"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The pod fields an environment variable may take (the downward API), each with a value like the
# kubelet's for phosd --print-config; labels and annotations are metadata.labels['KEY'].
FIELDS = {"metadata.name": "phosd-x7k2p", "metadata.namespace": "phos-system", "metadata.uid": "0",
          "spec.nodeName": "gpu-node-1", "spec.serviceAccountName": "default", "status.hostIP": "10.0.0.11",
          "status.hostIPs": "10.0.0.11", "status.podIP": "10.244.1.7", "status.podIPs": "10.244.1.7"}
META_FIELD = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")
# Kubernetes' expansion in args and command: $(NAME) of a variable of the container's, $$ for '$'.
VAR_REF = re.compile(r"\$(\$|\(([^)]*)\))")


def fail(message):
    FAILURES.append(message)
    if not QUIET:
        print("FAIL: " + message, file=sys.stderr)


def load(directory):
    objects = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                kind, name = doc.get("kind"), doc.get("metadata", {}).get("name", "")
                where = f"{os.path.basename(path)}: {kind} {name}"
                if KINDS.get(kind) != doc.get("apiVersion"):
                    fail(f"{where}: apiVersion {doc.get('apiVersion')} for kind {kind} (expected {KINDS.get(kind)})")
                if not DNS_LABEL.match(name or ""):
                    fail(f"{where}: name '{name}' is not a DNS label")
                if (kind, name) in objects:
                    fail(f"{where}: defined twice")
                objects[(kind, name)] = doc
    return objects


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def keys_of(obj):
    """A ConfigMap's or Secret's keys, wherever the manifest puts them."""
    return {**(obj.get("data") or {}), **(obj.get("binaryData") or {}), **(obj.get("stringData") or {})}


def environment(container, objects):
    """The container's variables, each with the value the kubelet would give it (a stand-in for a
    Secret's), checking what each takes its value from."""
    values = {}
    for source in container.get("envFrom", []):
        for ref_kind, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if ref_kind in source:
                obj = objects.get((kind, source[ref_kind].get("name")))
                if obj is None:
                    fail(f"envFrom: no {kind} {source[ref_kind].get('name')}")
                    continue
                for key, value in keys_of(obj).items():
                    values[source.get("prefix", "") + key] = str(value) if kind == "ConfigMap" else "x"
    for e in container.get("env", []):
        name, source = e["name"], e.get("valueFrom")
        if source is None:
            values[name] = str(e.get("value", ""))
            continue
        values[name] = "x"
        for ref_kind, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = source.get(ref_kind)
            if ref is None:
                continue
            # Checked even when optional: the manifests ship the object, so a miss here is a typo.
            obj = objects.get((kind, ref.get("name")))
            if obj is None:
                fail(f"env {name}: no {kind} {ref.get('name')}")
            elif ref.get("key") not in keys_of(obj):
                fail(f"env {name}: {kind} {ref.get('name')} has no key {ref.get('key')}")
            elif kind == "ConfigMap":
                values[name] = str(keys_of(obj)[ref["key"]])
        if "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            if path not in FIELDS and not META_FIELD.match(path):
                fail(f"env {name}: the downward API has no field {path}")
            values[name] = FIELDS.get(path, "x")
    return values


def expand(text, values, where):
    """`text` as the kubelet passes it: a $(NAME) of no variable of the container's stays as it is,
    which phosd would take literally, so it fails here."""
    def one(match):
        if match.group(1) == "$":
            return "$"
        if match.group(2) not in values:
            fail(f"{where} '{text}': $({match.group(2)}) is no variable of the container's (env)")
            return match.group(0)
        return values[match.group(2)]
    return VAR_REF.sub(one, text)


def check(objects, phosd):
    namespaces = [name for kind, name in objects if kind == "Namespace"]
    if len(namespaces) != 1:
        fail(f"one Namespace expected, found {namespaces}")
        return
    namespace = namespaces[0]
    for (kind, name), doc in objects.items():
        if kind != "Namespace" and doc["metadata"].get("namespace") != namespace:
            fail(f"{kind} {name}: namespace {doc['metadata'].get('namespace')}, not {namespace}")

    daemonsets = [doc for (kind, _), doc in objects.items() if kind == "DaemonSet"]
    if len(daemonsets) != 1:
        fail(f"one DaemonSet expected, found {len(daemonsets)}")
        return
    ds = daemonsets[0]
    template = ds["spec"]["template"]
    labels = template["metadata"].get("labels", {})
    if not ds["spec"]["selector"].get("matchLabels") or not subset(ds["spec"]["selector"]["matchLabels"], labels):
        fail("DaemonSet: its selector does not match its pods' labels")
    pod = template["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for v in volumes.values():
        if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in objects:
            fail(f"volume {v['name']}: no ConfigMap {v['configMap']['name']}")
        if "secret" in v and ("Secret", v["secret"]["secretName"]) not in objects:
            fail(f"volume {v['name']}: no Secret {v['secret']['secretName']}")
        if "hostPath" in v and not v["hostPath"].get("path", "").startswith("/"):
            fail(f"volume {v['name']}: hostPath is not absolute")
    containers = pod.get("containers", [])
    phosd_container = next((c for c in containers if c["name"] == "phosd"), None)
    if phosd_container is None:
        fail("DaemonSet: no container named phosd")
        return
    mounts = {}  # mountPath -> (volume, subPath)
    for m in phosd_container.get("volumeMounts", []):
        if m["name"] not in volumes:
            fail(f"volumeMount {m['mountPath']}: no volume {m['name']}")
            continue
        mounts[m["mountPath"]] = (volumes[m["name"]], m.get("subPath"))
        source = volumes[m["name"]]
        if m.get("subPath") and "configMap" in source:
            data = objects.get(("ConfigMap", source["configMap"]["name"]), {}).get("data", {})
            if m["subPath"] not in data:
                fail(f"volumeMount {m['mountPath']}: ConfigMap {source['configMap']['name']} has no key {m['subPath']}")
    ports = {p["name"]: p["containerPort"] for p in phosd_container.get("ports", [])}
    for probe in ("readinessProbe", "livenessProbe"):
        port = phosd_container.get(probe, {}).get("httpGet", {}).get("port")
        if port not in ports and port not in ports.values():
            fail(f"{probe}: port {port} is not one of the container's ({ports})")

    for (kind, name), svc in objects.items():
        if kind != "Service":
            continue
        if not subset(svc["spec"]["selector"], labels):
            fail(f"Service {name}: its selector matches no phosd pod")
        for p in svc["spec"]["ports"]:
            if p["targetPort"] not in ports and p["targetPort"] not in ports.values():
                fail(f"Service {name}: targetPort {p['targetPort']} is not one of the container's")

    # phosd: its arguments are flags it has, with its variables expanded, and the file it is told
    # to read is mounted.
    values = environment(phosd_container, objects)
    for a in phosd_container.get("command", []):
        expand(a, values, "command")
    args = [expand(a, values, "args") for a in phosd_container.get("args", [])]
    help_text = subprocess.run([phosd, "--help"], capture_output=True, text=True).stdout
    flags = set(re.findall(r"^\s+(--[a-z0-9-]+)", help_text, re.MULTILINE))
    for a in args:
        if a.startswith("--") and a.split("=")[0] not in flags:
            fail(f"phosd has no flag {a}")
    if "--config" not in args:
        fail("phosd is not given its config file (--config)")
        return
    config_path = args[args.index("--config") + 1]
    if config_path not in mounts:
        fail(f"--config {config_path} is not a mounted file")
        return
    volume, key = mounts[config_path]
    config_map = objects.get(("ConfigMap", volume.get("configMap", {}).get("name")), {})
    toml = config_map.get("data", {}).get(key)
    if toml is None:
        fail(f"--config {config_path}: its ConfigMap holds no {key}")
        return
    # phosd reads PHOS_* variables too: the container's, not this process's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHOS_")}
    env.update({k: v for k, v in values.items() if k.startswith("PHOS_")})

    def print_config(text):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        config_at = args.index("--config") + 1
        try:
            return subprocess.run([phosd] + args[:config_at] + [f.name] + args[config_at + 1:] + ["--print-config"],
                                  capture_output=True, text=True, env=env)
        finally:
            os.unlink(f.name)

    printed = print_config(toml)
    if printed.returncode != 0:
        fail(f"phosd refuses its args with the ConfigMap's {key}: {printed.stderr.strip()}")
        return
    # The settings a cluster turns on are left commented out: they must still be phosd's, as given.
    commented = re.compile(r"^#\s*([a-z0-9-]+\s*=.*)$")
    uncommented = "\n".join(commented.sub(r"\1", l) for l in toml.splitlines()) + "\n"
    if uncommented != toml:
        refused = print_config(uncommented)
        if refused.returncode != 0:
            fail(f"phosd refuses the ConfigMap's {key} with its commented-out settings: {refused.stderr.strip()}")
    settings = {}
    for line in printed.stdout.splitlines():
        match = re.match(r'^([a-z0-9-]+)=(.*)$', line)
        if match:
            settings[match.group(1)] = match.group(2).strip('"')

    def mounted(path, what):
        if not any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts):
            fail(f"{what} {path} lies on no mounted volume")

    for key_name in ("data-dir", "listen-unix", "admin-token-file"):
        if settings.get(key_name):
            mounted(settings[key_name], key_name)
    for key_name in ("functions-dir", "trusted-modules-dir"):
        for path in shlex.split(settings.get(key_name, "").strip("[]").replace(",", " ")):
            mounted(path, key_name)
    # The admin token is the Secret's key, at the path phosd reads.
    token = settings.get("admin-token-file", "")
    for mount_path, (source, _) in mounts.items():
        if "secret" in source and token.startswith(mount_path.rstrip("/") + "/"):
            secret = objects[("Secret", source["secret"]["secretName"])]
            key_in_secret = token[len(mount_path.rstrip("/")) + 1:]
            if key_in_secret not in keys_of(secret):
                fail(f"admin-token-file {token}: Secret {secret['metadata']['name']} has no key {key_in_secret}")
    if settings.get("listen", "").startswith("127.") and ports:
        fail("phosd listens on loopback only: the Service and the probes cannot reach it")
    port = settings.get("listen", ":").rsplit(":", 1)[-1]
    if port.isdigit() and int(port) not in ports.values():
        fail(f"phosd listens on port {port}, the container declares {sorted(ports.values())}")
    # The other nodes of a cluster reach phosd where it advertises: its own listener's port.
    advertise = settings.get("advertise", "")
    if advertise:
        match = re.match(r"^http://[^/]+:(\d+)/?$", advertise)
        if not match:
            fail(f"--advertise {advertise} is not http://HOST:PORT")
        elif match.group(1) != port:
            fail(f"--advertise {advertise}: phosd listens on port {port}")


def ds_of(objects):
    return next(doc for (kind, _), doc in objects.items() if kind == "DaemonSet")


def phosd_of(objects):
    return ds_of(objects)["spec"]["template"]["spec"]["containers"][0]


def env_of(objects, name):
    return next(e for e in phosd_of(objects)["env"] if e["name"] == name)


def arg_set(objects, flag, value):
    args = phosd_of(objects)["args"]
    args[args.index(flag) + 1] = value


def toml_set(objects, key, value):
    cm = next(doc for (kind, _), doc in objects.items() if kind == "ConfigMap")
    lines = [l for l in cm["data"]["phosd.toml"].splitlines() if not l.startswith(key + " ")]
    cm["data"]["phosd.toml"] = "\n".join(lines + [f"{key} = {value}"]) + "\n"


# Breakages the check must catch: each applied to a copy of the manifests.
MUTATIONS = {
    "a ConfigMap that is not there": lambda o: ds_of(o)["spec"]["template"]["spec"]["volumes"][0].update(
        {"configMap": {"name": "absent"}}),
    "a Service port the container lacks": lambda o: o[("Service", "phosd")]["spec"]["ports"][0].update(
        {"targetPort": "nope"}),
    "a flag phosd does not have": lambda o: phosd_of(o)["args"].append("--no-such-flag"),
    "phosd on loopback only": lambda o: toml_set(o, "listen", '"127.0.0.1:7070"'),
    "a data directory on no volume": lambda o: toml_set(o, "data-dir", '"/srv/phos"'),
    "a selector matching no pod": lambda o: ds_of(o)["spec"]["selector"]["matchLabels"].update({"x": "y"}),
    "a Secret key that is not there": lambda o: toml_set(o, "admin-token-file", '"/etc/phos/admin-token/other"'),
    "a secretKeyRef to a key the Secret lacks": lambda o: env_of(o, "AWS_SECRET_ACCESS_KEY")["valueFrom"][
        "secretKeyRef"].update({"key": "absent"}),
    "a secretKeyRef to a Secret that is not there": lambda o: env_of(o, "AWS_ACCESS_KEY_ID")["valueFrom"][
        "secretKeyRef"].update({"name": "absent"}),
    "a configMapKeyRef to a key the ConfigMap lacks": lambda o: phosd_of(o)["env"].append(
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "phosd-config", "key": "absent"}}}),
    "a field the downward API lacks": lambda o: env_of(o, "POD_IP")["valueFrom"]["fieldRef"].update(
        {"fieldPath": "status.podIp"}),
    "an args $(VAR) with no env": lambda o: phosd_of(o)["env"].remove(env_of(o, "POD_IP")),
    "an advertised port phosd does not listen on": lambda o: arg_set(o, "--advertise", "http://$(POD_IP):7071"),
    "a commented-out setting phosd does not have": lambda o: toml_set(o, "# no-such-setting", "1"),
}


def self_test(objects, phosd):
    """Each mutation must make the check fail; the manifests as they are must not."""
    global FAILURES, QUIET
    QUIET = True
    ok = True
    for what, mutate in MUTATIONS.items():
        broken = copy.deepcopy(objects)
        mutate(broken)
        FAILURES = []
        check(broken, phosd)
        if not FAILURES:
            print(f"SELF-TEST FAIL: {what} went unnoticed", file=sys.stderr)
            ok = False
    FAILURES = []
    QUIET = False
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifests", required=True)
    parser.add_argument("--phosd", required=True)
    parser.add_argument("--self-test", action="store_true", help="check that breakages of the manifests are caught")
    args = parser.parse_args()
    objects = load(args.manifests)
    if not objects:
        fail(f"no manifests in {args.manifests}")
    if args.self_test and not self_test(objects, args.phosd):
        return 1
    check(objects, args.phosd)
    if FAILURES:
        print(f"k8s_check: {len(FAILURES)} failures", file=sys.stderr)
        return 1
    print(f"k8s_check: {len(objects)} objects hold together")
    return 0


if __name__ == "__main__":
    sys.exit(main())
