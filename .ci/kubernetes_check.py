"""Checks deploy/kubernetes without a cluster and without kubectl.

Each overlay is composed the way kustomize does for the features the manifests use (resources,
labels with selectors, images, JSON 6902 patches); where kubectl is installed its `kubectl
kustomize` output must be the same objects. Every object is validated against the Kubernetes
OpenAPI schemas that the kubernetes-validate package ships (offline, strict: an unknown field
is an error); the Prometheus Operator's two kinds, which it has no schema for, are checked by
hand: the PrometheusRule carries exactly deploy/prometheus/alerts.yml's groups, and the
ServiceMonitor scrapes a port the Service has. Then what the objects say of each other: the
Service, PodDisruptionBudget and ServiceMonitor select the pods, the probes name a container
port, every Secret reference is to the Secret `leasehold`.

Usage: python3 .ci/kubernetes_check.py [--write]   (--write regenerates prometheusrule.yaml)
"""

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
OVERLAYS = ["url", "sentinel", "cluster"]
KUBERNETES_VERSION = "1.32.0"
SELECTOR_PATHS = {
    "Deployment": [["spec", "selector", "matchLabels"], ["spec", "template", "metadata", "labels"]],
    "Service": [["spec", "selector"]],
    "PodDisruptionBudget": [["spec", "selector", "matchLabels"]],
}


def load(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def setdefault_path(obj, path):
    for key in path:
        obj = obj.setdefault(key, {})
    return obj


def json_patch(obj, ops):
    for op in ops:
        assert op["op"] == "add", f"only `add` patches are composed here, not {op['op']}"
        *parents, last = op["path"].strip("/").split("/")
        target = obj
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if last == "-":
            target.append(copy.deepcopy(op["value"]))
        else:
            target[last] = copy.deepcopy(op["value"])


def compose(directory):
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        objects += compose(path) if path.is_dir() else load(path)
    for label in kustomization.get("labels", []):
        for obj in objects:
            setdefault_path(obj, ["metadata", "labels"]).update(label["pairs"])
            if label.get("includeSelectors"):
                for path in SELECTOR_PATHS.get(obj["kind"], []):
                    setdefault_path(obj, path).update(label["pairs"])
    for image in kustomization.get("images", []):
        for obj in objects:
            for container in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                if container["image"] == image["name"]:
                    container["image"] = f"{image['name']}:{image['newTag']}"
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        for obj in objects:
            if obj["kind"] == target["kind"] and obj["metadata"]["name"] == target["name"]:
                json_patch(obj, yaml.safe_load(patch["patch"]))
    return objects


def key(obj):
    return (obj["kind"], obj["metadata"]["name"])


def check_prometheus_rule(rule, write):
    alerts_path = ROOT / "deploy" / "prometheus" / "alerts.yml"
    alerts = yaml.safe_load(alerts_path.read_text())
    if write:
        text = alerts_path.read_text()
        body = text[text.index("groups:"):]
        path = K8S / "base" / "prometheusrule.yaml"
        head = path.read_text().split("spec:\n")[0]
        path.write_text(head + "spec:\n" + "".join(
            "  " + line if line.strip() else line for line in body.splitlines(True)))
        return []
    if rule["spec"] != alerts:
        return ["PrometheusRule leasehold: its groups differ from deploy/prometheus/alerts.yml; "
                "regenerate with `target/kubernetes-venv/bin/python .ci/kubernetes_check.py --write` (after .ci/kubernetes installed it)"]
    return []


def check_references(objects):
    problems = []
    by = {key(o): o for o in objects}
    deployment = by[("Deployment", "leasehold")]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"] for p in container["ports"]}
    service = by[("Service", "leasehold")]

    def selects(selector, what):
        if not selector or any(pod_labels.get(k) != v for k, v in selector.items()):
            problems.append(f"{what} does not select the Deployment's pods")

    selects(service["spec"]["selector"], "the Service")
    selects(by[("PodDisruptionBudget", "leasehold")]["spec"]["selector"]["matchLabels"], "the PDB")
    monitor = by[("ServiceMonitor", "leasehold")]
    if any(service["metadata"]["labels"].get(k) != v
           for k, v in monitor["spec"]["selector"]["matchLabels"].items()):
        problems.append("the ServiceMonitor does not select the Service")
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint["port"] not in service_ports:
            problems.append(f"the ServiceMonitor scrapes port {endpoint['port']}, not the Service's")
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        get = container[probe]["httpGet"]
        if get["path"] != path or get["port"] not in ports:
            problems.append(f"{probe} is not {path} on a container port")
    if deployment["spec"]["replicas"] < 2:
        problems.append("fewer than 2 replicas")
    if not pod["spec"]["securityContext"].get("runAsNonRoot"):
        problems.append("the pod may run as root")
    for env in container["env"]:
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] != "leasehold":
            problems.append(f"{env['name']} reads Secret {ref['name']}, not leasehold")
    return problems


def main():
    write = "--write" in sys.argv
    problems = []
    kubectl = shutil.which("kubectl")
    for overlay in OVERLAYS:
        objects = compose(K8S / "overlays" / overlay)
        if kubectl:
            rendered = subprocess.run([kubectl, "kustomize", str(K8S / "overlays" / overlay)],
                                      check=True, capture_output=True, text=True).stdout
            theirs = sorted((d for d in yaml.safe_load_all(rendered) if d), key=key)
            if theirs != sorted(objects, key=key):
                problems.append(f"{overlay}: kubectl kustomize renders other objects than this check")
        for obj in objects:
            if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                continue
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(f"{overlay}: {key(obj)}: {error.message} at {list(error.path)}")
        rules = [o for o in objects if o["kind"] == "PrometheusRule"]
        problems += check_prometheus_rule(rules[0], write)
        problems += [f"{overlay}: {p}" for p in check_references(objects)]
        print(f"{overlay}: {len(objects)} objects ({', '.join(sorted(o['kind'] for o in objects))})"
              f"{' = kubectl kustomize' if kubectl else ''}")
    for problem in problems:
        print("PROBLEM:", problem)
    print(f"kubernetes manifests: {len(OVERLAYS)} overlays, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
