"""Writes self-contained Kubernetes JSON schemas for kubeconform.

Usage: standalone-schemas.py SCHEMA_VERSION DEST

Reads the schemas bundled in the installed `kubernetes-validate` package
(kubernetes-json-schema/vX.Y.Z-local[-strict]/), whose resource schemas point at a shared
`/api/_definitions.json`, and writes DEST/vX.Y.Z-standalone[-strict]/<kind>-<group>-<version>.json,
each carrying only the definitions it reaches under its own `$defs`. That is the layout
of kubeconform's default `-schema-location` template, so

    kubeconform -schema-location 'DEST/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json'

validates offline.
"""

import json
import os
import sys

import kubernetes_validate

SHARED_PREFIX = "/api/_definitions.json#/$defs/"
LOCAL_PREFIX = "#/$defs/"


def refs(node):
    """Yields every `$ref` string in a JSON value."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def localize(node):
    """Returns the JSON value with shared-definition references made local."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(SHARED_PREFIX):
                out[key] = LOCAL_PREFIX + value[len(SHARED_PREFIX):]
            else:
                out[key] = localize(value)
        return out
    if isinstance(node, list):
        return [localize(item) for item in node]
    return node


def definition_name(ref):
    for prefix in (SHARED_PREFIX, LOCAL_PREFIX):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    raise SystemExit(f"unexpected $ref {ref!r}: neither {SHARED_PREFIX!r} nor {LOCAL_PREFIX!r}")


def reachable(schema, definitions):
    """The names of the definitions a schema reaches, transitively."""
    seen = set()
    pending = [definition_name(r) for r in refs(schema)]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        if name not in definitions:
            raise SystemExit(f"$ref to unknown definition {name!r}")
        seen.add(name)
        pending.extend(definition_name(r) for r in refs(definitions[name]))
    return seen


def convert(src, dest):
    with open(os.path.join(src, "_definitions.json")) as f:
        definitions = json.load(f)["$defs"]
    os.makedirs(dest, exist_ok=True)
    written = 0
    for name in sorted(os.listdir(src)):
        # all.json is a oneOf over every definition; kubeconform never asks for it.
        if not name.endswith(".json") or name in ("_definitions.json", "all.json"):
            continue
        with open(os.path.join(src, name)) as f:
            schema = json.load(f)
        needed = reachable(schema, definitions)
        out = localize(schema)
        if needed:
            out["$defs"] = {n: localize(definitions[n]) for n in sorted(needed)}
        with open(os.path.join(dest, name), "w") as f:
            json.dump(out, f, separators=(",", ":"))
        written += 1
    return written


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: standalone-schemas.py SCHEMA_VERSION DEST")
    version, dest = sys.argv[1], sys.argv[2]
    bundled = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
    for suffix in ("", "-strict"):
        src = os.path.join(bundled, f"v{version}-local{suffix}")
        if not os.path.isdir(src):
            raise SystemExit(f"kubernetes-validate bundles no schemas for {version} (no {src})")
        count = convert(src, os.path.join(dest, f"v{version}-standalone{suffix}"))
        print(f"  v{version}-standalone{suffix}: {count} schemas", file=sys.stderr)


if __name__ == "__main__":
    main()
