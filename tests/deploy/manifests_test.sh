#!/usr/bin/env bash
# deploy/k8s: every manifest parses, `kubectl kustomize` renders both routes, the rendered objects
# agree with each other (probes on the health_listen port, the ConfigMap the pod mounts, Guaranteed QoS
# with whole CPUs, the device plugin's resource, no privileged on the default route), the example
# client's dns:/// target and TLS name are the headless Service's, and the ConfigMap's server
# config passes the server's own check.
#
#   tests/deploy/manifests_test.sh BLOCKREAD_SERVER_BINARY
#
# KUBECTL picks the kubectl (default: kubectl on PATH; Debian's kubernetes-client bundles
# kustomize v2, newer kubectl v5: the manifests are written for both). Exit 77 (ctest
# SKIP_RETURN_CODE) when python3's yaml module or kubectl is missing, saying which.
set -euo pipefail

server=${1:?usage: $0 BLOCKREAD_SERVER_BINARY}
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
k8s=$source_dir/deploy/k8s
kubectl=${KUBECTL:-kubectl}

python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3 has no yaml module (Debian package python3-yaml)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Every manifest parses, and every document in it is a Kubernetes object.
python3 - "$k8s" <<'PY'
import pathlib, sys, yaml
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.yaml"))
assert files, "no manifests under " + sys.argv[1]
for path in files:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path}: no document"
    for doc in docs:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), \
            f"{path}: a document without apiVersion and kind"
    print(f"ok: {path.relative_to(sys.argv[1])} parses ({len(docs)} documents)")
PY

command -v "$kubectl" >/dev/null || { echo "SKIP: no $kubectl to render deploy/k8s (Debian package kubernetes-client)"; exit 77; }
"$kubectl" kustomize "$k8s" >"$tmp/default.yaml" 2>"$tmp/default.err" ||
  fail "$kubectl kustomize deploy/k8s: $(cat "$tmp/default.err")"
echo "ok: $kubectl kustomize deploy/k8s renders ($("$kubectl" version --client 2>/dev/null | head -2 | tr '\n' ' '))"

# The privileged route: the same kustomization with its patch switched on, as README.md says.
cp -r "$k8s" "$tmp/k8s"
sed -i 's/^# patchesStrategicMerge:$/patchesStrategicMerge:/; s/^#   - daemonset-privileged.yaml$/  - daemonset-privileged.yaml/' \
  "$tmp/k8s/kustomization.yaml"
grep -q '^  - daemonset-privileged.yaml$' "$tmp/k8s/kustomization.yaml" ||
  fail "kustomization.yaml has no commented patchesStrategicMerge of daemonset-privileged.yaml to switch on"
"$kubectl" kustomize "$tmp/k8s" >"$tmp/privileged.yaml" 2>"$tmp/privileged.err" ||
  fail "$kubectl kustomize with daemonset-privileged.yaml: $(cat "$tmp/privileged.err")"
echo "ok: the privileged route renders"

python3 - "$tmp" "$k8s/device-plugin/generic-device-plugin.yaml" "$k8s/examples/client-job.yaml" <<'PY'
import pathlib, re, sys, yaml
tmp = pathlib.Path(sys.argv[1])

def objects(path):
    by_kind = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind

def one(by_kind, kind):
    assert len(by_kind.get(kind, [])) == 1, f"expected one {kind}, got {len(by_kind.get(kind, []))}"
    return by_kind[kind][0]

def textproto_field(text, name):
    match = re.search(r'^\s*' + name + r'\s*:\s*"([^"]*)"', text, re.M)
    assert match, f"server config has no {name}"
    return match.group(1)

def check(route, path):
    objs = objects(path)
    ds, svc, cm = one(objs, "DaemonSet"), one(objs, "Service"), one(objs, "ConfigMap")
    pod = ds["spec"]["template"]["spec"]
    [c] = [c for c in pod["containers"] if c["name"] == "blockread-server"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}

    # The ConfigMap the pod mounts is the rendered one, at the path --config names.
    [vol] = [v for v in pod["volumes"] if "configMap" in v]
    assert vol["configMap"]["name"] == cm["metadata"]["name"], "pod mounts another ConfigMap"
    [mount] = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    [config_arg] = [a for a in c["args"] if a.startswith("--config=")]
    key = config_arg[len("--config="):]
    assert key.startswith(mount["mountPath"] + "/"), f"{config_arg} is not under {mount['mountPath']}"
    config = cm["data"][key[len(mount["mountPath"]) + 1:]]

    # Probes, containerPort and the server's listen port are one port; so are metrics.
    listen_port = int(textproto_field(config, "listen").rsplit(":", 1)[1])
    assert ports["grpc"] == listen_port, f"containerPort grpc {ports['grpc']} != listen port {listen_port}"
    assert ports["metrics"] == int(textproto_field(config, "metrics_listen").rsplit(":", 1)[1]), \
        "containerPort metrics is not the metrics_listen port"
    # The serving port is TLS: the probes (plaintext) go to health_listen's port.
    assert textproto_field(config, "tls_cert"), "plaintext serving port"
    health_port = int(textproto_field(config, "health_listen").rsplit(":", 1)[1])
    assert ports["health"] == health_port, "containerPort health is not the health_listen port"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["grpc"]["port"] == health_port, f"{probe} is not on port {health_port}"
    # The headless Service selects these pods and reaches the named ports.
    assert svc["spec"]["clusterIP"] == "None", "the Service is not headless"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), \
        "the Service does not select the pods"
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports), "Service targetPort unknown"

    # Guaranteed QoS with whole CPUs: requests equal limits for cpu and memory.
    res = c["resources"]
    for r in ("cpu", "memory"):
        assert str(res["requests"][r]) == str(res["limits"][r]), f"{r} requests != limits"
    assert re.fullmatch(r"[1-9][0-9]*", str(res["limits"]["cpu"])), "cpu is not a whole number"

    # Files from a read-only hostPath.
    host_paths = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths, "no hostPath for the served files"
    for m in c["volumeMounts"]:
        if m["name"] in host_paths:
            assert m.get("readOnly") is True, f"hostPath {m['name']} is not mounted read-only"
    sec = c["securityContext"]
    assert sec["readOnlyRootFilesystem"] is True, "root filesystem is writable"
    assert sec["capabilities"]["drop"] == ["ALL"], "capabilities are not all dropped"
    assert pod["securityContext"]["runAsNonRoot"] is True, "may run as root"
    pathlib.Path(tmp / f"{route}.textproto").write_text(config)
    return ds, pod, c, res

default_ds, pod, c, res = check("default", tmp / "default.yaml")
assert not c["securityContext"].get("privileged"), "default route is privileged"
assert c["securityContext"]["allowPrivilegeEscalation"] is False, "privilege escalation allowed"
seccomp = pod["securityContext"]["seccompProfile"]
assert seccomp["type"] == "Localhost" and \
    seccomp["localhostProfile"].endswith("/blockread-io_uring.json"), f"seccomp: {seccomp}"
# The extended resource asked for is the one the device plugin advertises, on the same nodes.
[plugin] = [d for d in yaml.safe_load_all(pathlib.Path(sys.argv[2]).read_text()) if d]
plugin_pod = plugin["spec"]["template"]["spec"]
args = plugin_pod["containers"][0]["args"]
domain = next((a.split("=", 1)[1] for a in args if a.startswith("--domain=")), "squat.ai")
names = [yaml.safe_load(args[i + 1])["name"] for i, a in enumerate(args) if a == "--device"]
extended = [r for r in res["limits"] if "/" in r]
assert extended == [f"{domain}/blockread-nvme"] and "blockread-nvme" in names, (extended, names)
assert plugin_pod["nodeSelector"] == pod["nodeSelector"], "plugin and server select different nodes"
print("ok: default route: probes on the health_listen port, Guaranteed QoS, not privileged, Localhost seccomp, "
      f"{extended[0]} from the device plugin")

# The example client resolves the headless Service itself: its dns:/// target is that Service's
# name in its namespace and its grpc port, only ready pods are published, and under TLS it checks
# each pod's certificate against the Service's name (the SAN README.md's certificate carries).
svc = one(objects(tmp / "default.yaml"), "Service")
[job] = [d for d in yaml.safe_load_all(pathlib.Path(sys.argv[3]).read_text()) if d]
assert job["kind"] == "Job" and job["metadata"]["namespace"] == svc["metadata"]["namespace"], \
    "the client Job is not in the Service's namespace"
[client] = job["spec"]["template"]["spec"]["containers"]
client_args = dict(a.split("=", 1) for a in client["args"] if a.startswith("--"))
service_dns = f'{svc["metadata"]["name"]}.{svc["metadata"]["namespace"]}.svc'
[grpc_port] = [p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"]
assert client_args["--target"] in (f"dns:///{service_dns}:{grpc_port}",
                                   f"dns:///{service_dns}.cluster.local:{grpc_port}"), \
    f'client --target {client_args["--target"]} is not dns:///{service_dns}:{grpc_port}'
assert not svc["spec"].get("publishNotReadyAddresses"), "the Service publishes pods that are not ready"
assert client_args["--tls-server-name"] == service_dns, "the client checks certificates against another name"
readme = (pathlib.Path(sys.argv[3]).parent.parent / "README.md").read_text()
assert f"subjectAltName=DNS:{service_dns}" in readme, "README.md's server certificate does not name the Service"
assert {"--ca", "--cert", "--key"} <= set(client_args), "the client has no certificate for the mTLS port"
print(f"ok: the example client resolves {client_args['--target']} and checks certificates against {service_dns}")

ds, pod, c, res = check("privileged", tmp / "privileged.yaml")
assert c["securityContext"].pop("privileged", None) is True, "privileged route is not privileged"
assert "allowPrivilegeEscalation" not in c["securityContext"], "allowPrivilegeEscalation beside privileged"
assert not [r for r in res["limits"] if "/" in r], "privileged route still asks for the device plugin"
assert pod["securityContext"]["seccompProfile"] == {"type": "Unconfined"}, "seccomp is not Unconfined"
# Undo exactly those changes and the default route's DaemonSet is left.
c["securityContext"]["allowPrivilegeEscalation"] = False
res["limits"][extended[0]] = default_ds["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][extended[0]]
pod["securityContext"]["seccompProfile"] = seccomp
assert ds == default_ds, "the privileged patch changes more than privileged, the device and seccomp"
print("ok: privileged route: privileged, no device plugin resource, everything else as the default")
PY

for route in default privileged; do
  out=$("$server" --check-config="$tmp/$route.textproto" 2>&1) ||
    fail "the $route route's ConfigMap config fails blockread-server --check-config: $out"
  [ "$out" = "blockread-server: $tmp/$route.textproto: OK" ] || fail "unexpected --check-config output: $out"
done
echo "ok: the ConfigMap's server config passes blockread-server --check-config"
