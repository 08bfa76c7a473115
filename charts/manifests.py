"""Checks of rendered chart manifests that no schema expresses, for charts/check.

Usage:
    manifests.py policy RENDERED.yaml...
        Fails (exit 1, naming the object and the rule) unless every pod runs non-root
        with the RuntimeDefault seccomp profile, every container has a read-only root
        filesystem, no privilege escalation, all capabilities dropped, requests and
        limits, a liveness probe, and (but for the operator, which serves no
        traffic) a readiness probe; the
        workers mount no API token and are bound to no role; no RBAC rule uses a
        wildcard or reaches Secrets; and the workers' NetworkPolicy, where there is
        one, limits their egress so that no cloud metadata address nor the cluster's
        API server is reached.
    manifests.py egress RENDERED.yaml ADDRESS PORT
        Prints whether the workers' NetworkPolicy lets them connect to ADDRESS:PORT
        over TCP ("allowed" or "denied").
    manifests.py crd-schema CRD.yaml OUT_DIR
        Writes, for each version of the CRD, OUT_DIR/<kind>_<version>.json: the
        version's openAPIV3Schema as a strict JSON schema kubeconform validates the
        custom resources with (schema location '{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json').
    manifests.py documented VALUES.yaml VALUES.schema.json
        Fails unless every value in VALUES.yaml is described in the schema.
"""

import ipaddress
import json
import os
import sys

import yaml


def load(paths):
    for path in paths:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    yield path, doc


def name_of(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


# Where a guest's outbound request must not land even if the worker's own check had a
# hole: the cloud metadata services (169.254.169.254; AWS's IPv6 one) and the
# Kubernetes API server at the usual first address of the service range.
FORBIDDEN_EGRESS = [("169.254.169.254", 80), ("fd00:ec2::254", 80), ("10.96.0.1", 443)]


def is_worker_policy(doc):
    if doc.get("kind") != "NetworkPolicy":
        return False
    labels = doc["spec"].get("podSelector", {}).get("matchLabels", {})
    return labels.get("app.kubernetes.io/component") == "worker"


def port_matches(entry, port):
    if entry.get("protocol", "TCP") != "TCP":
        return False
    number = entry.get("port")
    if number is None or isinstance(number, str):
        # All ports, or a port named on the peer pods: taken as a match, which errs
        # towards finding a path open.
        return True
    return number <= port <= entry.get("endPort", number)


def egress_allows(doc, address, port):
    """Whether the NetworkPolicy lets its pods connect to address:port over TCP.
    Peers chosen by pod or namespace labels never match an address outside the
    cluster's pods, so only ipBlocks and rules without peers can."""
    spec = doc["spec"]
    if "Egress" not in spec.get("policyTypes", []):
        return True
    ip = ipaddress.ip_address(address)
    for rule in spec.get("egress", []):
        ports = rule.get("ports")
        if ports and not any(port_matches(entry, port) for entry in ports):
            continue
        peers = rule.get("to")
        if not peers:
            return True
        for peer in peers:
            block = peer.get("ipBlock")
            if (
                block
                and ip in ipaddress.ip_network(block["cidr"])
                and not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
            ):
                return True
    return False


def egress(path, address, port):
    policies = [doc for _, doc in load([path]) if is_worker_policy(doc)]
    if not policies:
        print("no NetworkPolicy for the workers", file=sys.stderr)
        return 1
    print("allowed" if all(egress_allows(doc, address, int(port)) for doc in policies) else "denied")
    return 0


def policy(paths):
    problems = []
    bound = {}  # ServiceAccount name -> role bindings naming it
    worker_accounts = set()
    for path, doc in load(paths):
        kind = doc.get("kind")
        where = f"{path}: {name_of(doc)}"
        if kind in ("Role", "ClusterRole"):
            for rule in doc.get("rules", []):
                for field in ("verbs", "resources", "apiGroups"):
                    if "*" in rule.get(field, []):
                        problems.append(f"{where}: a wildcard in {field}")
                if "secrets" in rule.get("resources", []):
                    problems.append(f"{where}: a rule reaches Secrets")
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in doc.get("subjects", []):
                bound.setdefault(subject.get("name"), []).append(where)
        if kind == "NetworkPolicy" and is_worker_policy(doc):
            if "Egress" not in doc["spec"].get("policyTypes", []):
                problems.append(f"{where}: the workers' egress is not limited")
            for address, port in FORBIDDEN_EGRESS:
                if egress_allows(doc, address, port):
                    problems.append(f"{where}: the workers may connect to {address}:{port}")
        if kind != "Deployment":
            continue
        spec = doc["spec"]
        selector = spec["selector"]["matchLabels"]
        template = spec["template"]
        labels = template["metadata"].get("labels", {})
        if any(labels.get(k) != v for k, v in selector.items()):
            problems.append(f"{where}: the selector does not match the pod labels")
        pod = template["spec"]
        component = labels.get("app.kubernetes.io/component")
        security = pod.get("securityContext", {})
        if security.get("runAsNonRoot") is not True:
            problems.append(f"{where}: the pod may run as root")
        if security.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            problems.append(f"{where}: the pod's seccomp profile is not RuntimeDefault")
        if component == "worker":
            if pod.get("automountServiceAccountToken") is not False:
                problems.append(f"{where}: the workers mount an API token")
            worker_accounts.add(pod.get("serviceAccountName"))
            env = {e["name"]: e for c in pod["containers"] for e in c.get("env", [])}
            source = env.get("FAAS_WORKER_ID", {}).get("valueFrom", {}).get("fieldRef", {})
            if source.get("fieldPath") != "metadata.name":
                problems.append(f"{where}: FAAS_WORKER_ID is not the pod's name")
        for container in pod["containers"] + pod.get("initContainers", []):
            at = f"{where} container {container['name']}"
            sc = container.get("securityContext", {})
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{at}: the root filesystem is writable")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{at}: privilege escalation is allowed")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                problems.append(f"{at}: capabilities are not all dropped")
            resources = container.get("resources", {})
            if not resources.get("requests") or not resources.get("limits"):
                problems.append(f"{at}: no resource requests or limits")
            probes = ["livenessProbe"]
            if component != "operator":
                probes.append("readinessProbe")
            for probe in probes:
                if probe not in container:
                    problems.append(f"{at}: no {probe}")
    for account in sorted(worker_accounts & set(bound)):
        problems.append(f"the workers' ServiceAccount {account} is bound: {bound[account]}")
    for problem in problems:
        print(f"policy: {problem}", file=sys.stderr)
    return 1 if problems else 0


def strict(schema):
    """The schema with unknown fields refused wherever the API server would prune them."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schema(crd_path, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for _, crd in load([crd_path]):
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        kind = crd["spec"]["names"]["kind"].lower()
        for version in crd["spec"]["versions"]:
            schema = strict(version["schema"]["openAPIV3Schema"])
            # apiVersion, kind and metadata are implicit in a structural schema.
            properties = schema.setdefault("properties", {})
            properties.setdefault("apiVersion", {"type": "string"})
            properties.setdefault("kind", {"type": "string"})
            properties.setdefault("metadata", {"type": "object"})
            path = os.path.join(out_dir, f"{kind}_{version['name']}.json")
            with open(path, "w") as f:
                json.dump(schema, f, indent=1)
    return 0


def documented(values_path, schema_path):
    with open(values_path) as f:
        values = yaml.safe_load(f)
    with open(schema_path) as f:
        schema = json.load(f)
    missing = []

    def walk(value, node, path):
        if path and "description" not in node:
            missing.append(path)
        if isinstance(value, dict) and "properties" in node:
            for key, item in value.items():
                child = node["properties"].get(key)
                if child is None:
                    missing.append(f"{path}.{key}".lstrip("."))
                else:
                    walk(item, child, f"{path}.{key}".lstrip("."))

    walk(values, schema, "")
    for path in missing:
        print(f"values.schema.json does not describe {path}", file=sys.stderr)
    return 1 if missing else 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "policy":
        return policy(argv[1:])
    if len(argv) == 4 and argv[0] == "egress":
        return egress(argv[1], argv[2], argv[3])
    if len(argv) == 3 and argv[0] == "documented":
        return documented(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "crd-schema":
        return crd_schema(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
