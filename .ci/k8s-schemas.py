#!/usr/bin/env python3
"""Builds the JSON schemas kubeconform validates deploy/k8s against, offline.

Kubernetes' own kinds come from the `kubernetes-validate` wheel (PyPI), which
ships the API's JSON schemas per Kubernetes version; its files point into a
shared `_definitions.json`, so each kind used here is written standalone with
the definitions it reaches. ServiceMonitor and PrometheusRule come from the
CustomResourceDefinitions in the prometheus-operator Go module, converted the
way kubeconform's openapi2jsonschema does (strict: unknown fields rejected).

usage: k8s-schemas.py OUT_DIR KUBERNETES_WHEEL CRD_FILE... (needs PyYAML)
Writes OUT_DIR/<version>-standalone-strict/<kind>-<group>-<version>.json for
every Kubernetes version in the wheel that VERSIONS lists, and
OUT_DIR/crds/<group>/<kind>_<version>.json.
"""

import json
import os
import re
import sys
import zipfile

import yaml

# Kinds deploy/k8s and the Helm chart use, as kubeconform names their schema files.
KINDS = [
    "configmap-v1",
    "deployment-apps-v1",
    "networkpolicy-networking-v1",
    "poddisruptionbudget-policy-v1",
    "secret-v1",
    "service-v1",
    "statefulset-apps-v1",
]
# Oldest and newest Kubernetes validated against.
VERSIONS = ["v1.30.0", "v1.37.0"]
ROOT = "kubernetes_validate/kubernetes-json-schema"
REF = re.compile(r"^/api/_definitions\.json#/\$defs/(.+)$")


def standalone(schema, defs):
    """The schema with every definition it reaches inlined under $defs."""
    needed, todo = {}, []

    def rewrite(node):
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    m = REF.match(value) or re.match(r"^#/\$defs/(.+)$", value)
                    if not m:
                        raise SystemExit(f"unexpected $ref {value}")
                    todo.append(m.group(1))
                    out[key] = "#/$defs/" + m.group(1)
                else:
                    out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    top = rewrite(schema)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed[name] = None
            needed[name] = rewrite(defs[name])
    top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    top["$defs"] = needed
    return top


def strict(node):
    """openapi2jsonschema's strict mode, and int-or-string as JSON Schema."""
    if isinstance(node, dict):
        node = {k: strict(v) for k, v in node.items()}
        if node.pop("x-kubernetes-int-or-string", False):
            node.pop("type", None)
            node["oneOf"] = [{"type": "string"}, {"type": "integer"}]
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out, wheel, crds = sys.argv[1], sys.argv[2], sys.argv[3:]
    with zipfile.ZipFile(wheel) as z:
        for version in VERSIONS:
            src = f"{ROOT}/{version}-local-strict"
            defs = json.loads(z.read(f"{src}/_definitions.json"))["$defs"]
            dst = os.path.join(out, f"{version}-standalone-strict")
            os.makedirs(dst, exist_ok=True)
            for kind in KINDS:
                schema = json.loads(z.read(f"{src}/{kind}.json"))
                with open(os.path.join(dst, f"{kind}.json"), "w") as f:
                    json.dump(standalone(schema, defs), f)
    for path in crds:
        with open(path) as f:
            crd = yaml.safe_load(f)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"].lower()
        for v in crd["spec"]["versions"]:
            schema = strict(v["schema"]["openAPIV3Schema"])
            dst = os.path.join(out, "crds", group)
            os.makedirs(dst, exist_ok=True)
            with open(os.path.join(dst, f"{kind}_{v['name']}.json"), "w") as f:
                json.dump(schema, f)


if __name__ == "__main__":
    main()
