#!/usr/bin/env python3
"""Offline checks of deploy/: what a cluster and a Docker engine would reject.

- Kubernetes: each overlay of deploy/kubernetes/overlays is rendered with
  `kubectl kustomize` and every object it renders is validated: Kubernetes'
  own kinds against the OpenAPI schemas bundled by kubernetes-validate
  (strict: an unknown field is an error), for the oldest and the newest
  Kubernetes version we support; custom resources (ServiceMonitor, KServe)
  against the JSON Schemas in deploy/schemas. A kind with no schema is an
  error, not a skip. Then what schemas cannot see: probes and ports agree
  with the daemon's flags, the termination grace covers preStop and the
  daemon's drain, the memory budget fits the limit, every model of the
  ConfigMap is mounted with its checkpoint folder, the selectors of the
  Service, PodDisruptionBudget and ServiceMonitor match the pods, and the
  HorizontalPodAutoscaler's metric is one the Prometheus adapter serves;
  every model config of the ConfigMap parses as inference.ModelConfig
  (`protoc --encode`, proto/model_config.proto) and, given the castserve
  binary, every daemon flag in the manifests is one `castserve --help` lists.
- KServe (deploy/kserve): schemas, and the InferenceService asks for what
  the ClusterServingRuntime offers (format, protocol; REST on the port
  named http1 = --http-port, gRPC on a port named h2c = --grpc-port).
- The Prometheus adapter's rules (schema) and Prometheus's configuration
  (`promtool check config`).
- deploy/Dockerfile: hadolint; the builder stage builds with the README's
  scripts; the runtime stage runs as non-root, exposes the ports, has a
  healthcheck, and installs the Debian package of every shared library the
  given binaries load (readelf, ldd, dpkg -S).

Usage (tools/check_deploy.sh fetches the tools and runs this):
  check_deploy.py --kubectl PATH --hadolint PATH [--promtool PATH]
                  [--protoc PATH] [--root DIR] [--binary PATH]...
Prints one `ok:` line per check passed, one `error:` line per problem;
exits 0 when all pass, 1 on problems, 2 when a tool is missing.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema
import yaml

# The oldest Kubernetes these manifests support (gRPC probes are GA in 1.27)
# and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())

# Custom resources: (apiVersion, kind) -> schema file in deploy/schemas.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"):
        "clusterservingruntime.json",
    ("serving.kserve.io/v1beta1", "InferenceService"):
        "inferenceservice.json",
}
ADAPTER_SCHEMA = "prometheus-adapter-config.json"
DEFINITIONS_URI = "/api/_definitions.json"

# Every overlay renders exactly these kinds.
OVERLAY_KINDS = {"ConfigMap", "Deployment", "HorizontalPodAutoscaler",
                 "PersistentVolumeClaim", "PodDisruptionBudget", "Service",
                 "ServiceMonitor"}

# Packages every debian:12 image has: the C library and libgcc, which the
# Essential packages (coreutils, dpkg, ...) depend on.
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1"}


class ToolMissing(Exception):
    pass


class Report:
    """Collects `ok:` and `error:` lines."""

    def __init__(self, out=sys.stdout):
        self.errors = []
        self.out = out

    def ok(self, message):
        print(f"ok: {message}", file=self.out)

    def error(self, message):
        self.errors.append(message)
        print(f"error: {message}", file=self.out)

    def check(self, what, problems):
        """Reports `problems` (strings) or one ok line for `what`."""
        for problem in problems:
            self.error(f"{what}: {problem}")
        if not problems:
            self.ok(what)
        return not problems


def require_tool(path, name):
    resolved = shutil.which(path) if path else None
    if not resolved:
        raise ToolMissing(f"{name} not found at {path!r} "
                          f"(tools/fetch_deploy_tools.sh fetches it)")
    return resolved


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True,
                          timeout=300, **kwargs)


# --- Schemas -----------------------------------------------------------------

def object_name(obj):
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{metadata.get('name', '?')}"


def error_path(error):
    return ".".join(str(part) for part in error.absolute_path) or "(top)"


class SchemaValidator:
    """Validates Kubernetes objects: built-in kinds with kubernetes-validate,
    custom resources with deploy/schemas (embedded core types resolved to
    kubernetes-validate's strict definitions of the oldest version)."""

    def __init__(self, schema_dir, versions=KUBERNETES_VERSIONS):
        self.schema_dir = schema_dir
        self.versions = versions
        definitions = self._strict_definitions(versions[0])
        resource = referencing.jsonschema.DRAFT202012.create_resource(
            definitions)
        self.registry = referencing.Registry().with_resources(
            [(DEFINITIONS_URI, resource), (definitions["$id"], resource)])
        self.crd_validators = {
            key: self._validator(file) for key, file in CRD_SCHEMAS.items()}

    @staticmethod
    def _strict_definitions(version):
        base = os.path.join(os.path.dirname(kubernetes_validate.__file__),
                            "kubernetes-json-schema")
        path = os.path.join(base, f"v{version}-local-strict",
                            "_definitions.json")
        with open(path) as f:
            return json.load(f)

    def _validator(self, file):
        with open(os.path.join(self.schema_dir, file)) as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        return jsonschema.Draft202012Validator(schema, registry=self.registry)

    def validate_document(self, document, file):
        """Errors of a non-Kubernetes document (the adapter's config)."""
        validator = self._validator(file)
        return [f"{error_path(e)}: {e.message}"
                for e in sorted(validator.iter_errors(document),
                                key=lambda e: list(e.absolute_path))]

    def errors(self, obj):
        """Problems of one object, each prefixed with Kind/name."""
        name = object_name(obj)
        if not isinstance(obj, dict) or "apiVersion" not in obj \
                or "kind" not in obj:
            return [f"{name}: not a Kubernetes object (apiVersion and kind)"]
        key = (obj["apiVersion"], obj["kind"])
        if key in self.crd_validators:
            return [f"{name}: {error_path(e)}: {e.message}"
                    for e in sorted(self.crd_validators[key].iter_errors(obj),
                                    key=lambda e: list(e.absolute_path))]
        problems = []
        for version in self.versions:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                return [f"{name}: no schema for {obj['apiVersion']} "
                        f"{obj['kind']} (Kubernetes {version}); add one to "
                        f"deploy/schemas and CRD_SCHEMAS"]
            except kubernetes_validate.ValidationError as e:
                problems.append(f"{name}: {error_path(e)}: {e.message} "
                                f"(Kubernetes {version})")
        return problems


# --- Rendering -----------------------------------------------------------------

def load_documents(text, source):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ValueError(f"{source}: not YAML: {e}") from e


def render_overlay(kubectl, overlay_dir):
    """The objects `kubectl kustomize` renders; ValueError when it fails."""
    result = run([kubectl, "kustomize", overlay_dir])
    if result.returncode != 0:
        raise ValueError(f"kubectl kustomize {overlay_dir} failed: "
                         f"{result.stderr.strip()}")
    return load_documents(result.stdout, overlay_dir)


def load_file_objects(path):
    with open(path) as f:
        return load_documents(f.read(), path)


# --- What the schemas cannot see ------------------------------------------------

def parse_flags(args):
    flags = {}
    for arg in args or []:
        match = re.fullmatch(r"--([a-z0-9-]+)=(.*)", arg)
        if match:
            flags[match.group(1)] = match.group(2)
    return flags


BYTE_UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
              "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
              "k": 10**3, "M": 10**6, "G": 10**9}


def parse_bytes(text):
    match = re.fullmatch(r"([0-9]+)([A-Za-z]*)", str(text))
    if not match or match.group(2) not in BYTE_UNITS:
        raise ValueError(f"not a byte quantity: {text!r}")
    return int(match.group(1)) * BYTE_UNITS[match.group(2)]


def by_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def labels_match(selector, labels):
    wanted = (selector or {}).get("matchLabels", selector or {})
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def checkpoint_path(config_text):
    match = re.search(r'checkpoint\s*\{[^}]*path:\s*"([^"]+)"', config_text)
    return match.group(1) if match else None


def probe_problems(container, grpc_port, metrics_port, grpc_tls):
    """gRPC health probes on the gRPC port; with TLS there (which the
    kubelet's gRPC probes cannot speak), HTTP probes of the metrics port's
    health paths, which never need a token."""
    problems = []
    paths = {"startupProbe": "/v2/health/ready",
             "readinessProbe": "/v2/health/ready",
             "livenessProbe": "/v2/health/live"}
    for probe, path in paths.items():
        spec = container.get(probe)
        if not spec:
            problems.append(f"no {probe}")
        elif grpc_tls:
            get = spec.get("httpGet") or {}
            if get.get("port") not in (metrics_port, "metrics") or \
                    get.get("path") != path:
                problems.append(f"{probe} is not an HTTP probe of {path} on "
                                f"--metrics-port {metrics_port} (the gRPC "
                                f"port has TLS)")
        elif (spec.get("grpc") or {}).get("port") != grpc_port:
            problems.append(f"{probe} is not a gRPC health probe on "
                            f"--grpc-port {grpc_port}")
    return problems


def termination_problems(pod, container, shutdown_grace):
    problems = []
    pre_stop = (container.get("lifecycle") or {}).get("preStop") or {}
    command = (pre_stop.get("exec") or {}).get("command") or []
    pre_stop_seconds = (int(command[1]) if len(command) == 2
                        and command[0] == "sleep" else 0)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace <= pre_stop_seconds + shutdown_grace:
        problems.append(
            f"terminationGracePeriodSeconds {grace} must exceed preStop "
            f"{pre_stop_seconds} s + --shutdown-grace-seconds "
            f"{shutdown_grace} s, or in-flight calls are killed")
    liveness = container.get("livenessProbe") or {}
    window = (liveness.get("periodSeconds", 10)
              * liveness.get("failureThreshold", 3))
    if window <= shutdown_grace:
        problems.append(f"livenessProbe fails after {window} s, within the "
                        f"{shutdown_grace} s drain")
    return problems


def memory_problems(container, flags):
    resources = container.get("resources") or {}
    request = (resources.get("requests") or {}).get("memory")
    limit = (resources.get("limits") or {}).get("memory")
    if not limit:
        return ["no memory limit"]
    problems = []
    if request != limit:
        problems.append(f"memory request {request} != limit {limit}")
    budget = flags.get("memory-budget-bytes")
    if budget is None:
        return problems + ["no --memory-budget-bytes"]
    try:
        if parse_bytes(budget) >= parse_bytes(limit):
            problems.append(f"--memory-budget-bytes={budget} leaves no room "
                            f"under the {limit} limit for the daemon itself")
    except ValueError as e:
        problems.append(str(e))
    return problems


def model_mount_problems(pod, container, repository, config_maps):
    """Every <model>.config.pbtxt of the mounted ConfigMap is mounted at
    <repository>/<model>/config.pbtxt with its checkpoint folder beside."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    problems = []
    for volume in volumes.values():
        if "configMap" not in volume:
            continue
        name = volume["configMap"]["name"]
        if name not in config_maps:
            problems.append(f"volume {volume['name']}: no ConfigMap {name}")
            continue
        for key, text in config_maps[name].get("data", {}).items():
            if not key.endswith(".config.pbtxt"):
                problems.append(f"ConfigMap {name}: key {key!r} is not "
                                f"<model>.config.pbtxt")
                continue
            model = key[:-len(".config.pbtxt")]
            config_at = f"{repository}/{model}/config.pbtxt"
            mount = mounts.get(config_at)
            if not mount or mount.get("subPath") != key \
                    or mount["name"] != volume["name"]:
                problems.append(f"{key} is not mounted at {config_at}")
            checkpoint = checkpoint_path(text)
            if checkpoint is None:
                problems.append(f"{key}: no checkpoint {{ path: ... }}")
            elif f"{repository}/{model}/{checkpoint}" not in mounts:
                problems.append(f"model {model}: nothing mounted at its "
                                f"checkpoint {repository}/{model}/"
                                f"{checkpoint}")
    for path, mount in mounts.items():
        if mount["name"] not in volumes:
            problems.append(f"mount {path}: no volume {mount['name']}")
    return problems


def config_problems(protoc, proto_dir, config_maps):
    """Each <model>.config.pbtxt parses as inference.ModelConfig."""
    problems = []
    for name, config_map in sorted(config_maps.items()):
        for key, text in sorted(config_map.get("data", {}).items()):
            result = subprocess.run(
                [protoc, f"--proto_path={proto_dir}",
                 "--encode=inference.ModelConfig", "model_config.proto"],
                input=text, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True, timeout=60)
            if result.returncode != 0:
                message = " ".join(result.stderr.split("\n")[:1])
                problems.append(f"ConfigMap {name}: {key}: {message}")
    return problems


def daemon_flags(binaries):
    """The flags `castserve --help` lists, or None without the binary."""
    for binary in binaries:
        if os.path.basename(binary) == "castserve":
            result = run([binary, "--help"])
            return set(re.findall(r"^\s+--([a-z0-9-]+)", result.stdout,
                                  re.M))
    return None


def flag_problems(args, known_flags):
    if known_flags is None:
        return []
    return [f"unknown flag {arg.split('=')[0]} (castserve --help)"
            for arg in args or []
            if parse_flags([arg]).keys() - known_flags
            or not parse_flags([arg])]


def deployment_problems(objects):
    deployments = by_kind(objects, "Deployment")
    if len(deployments) != 1:
        return [f"{len(deployments)} Deployments, expected 1"], None
    deployment = deployments[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    flags = parse_flags(container.get("args"))
    problems = []
    # --http-port too: the daemon serves REST on 8000 unless told otherwise.
    for flag in ("model-repository", "grpc-port", "metrics-port",
                 "http-port", "shutdown-grace-seconds"):
        if flag not in flags:
            problems.append(f"no --{flag}")
    if problems:
        return problems, None
    grpc_port, metrics_port = int(flags["grpc-port"]), int(
        flags["metrics-port"])
    expected = {"grpc": grpc_port, "metrics": metrics_port}
    if flags["http-port"] != "off":
        expected["http"] = int(flags["http-port"])
    ports = {p.get("name"): p["containerPort"]
             for p in container.get("ports", [])}
    if ports != expected:
        problems.append(f"container ports {ports} do not name --grpc-port "
                        f"{grpc_port} (grpc), --metrics-port {metrics_port} "
                        f"(metrics) and --http-port {flags['http-port']} "
                        f"(http, unless off)")
    if ":" not in container["image"].rsplit("/", 1)[-1] \
            and "@" not in container["image"]:
        problems.append(f"image {container['image']!r} has no tag")
    problems += probe_problems(container, grpc_port, metrics_port,
                               "grpc-tls-cert-file" in flags)
    problems += termination_problems(pod, container,
                                     int(flags["shutdown-grace-seconds"]))
    problems += memory_problems(container, flags)
    config_maps = {c["metadata"]["name"]: c
                   for c in by_kind(objects, "ConfigMap")}
    problems += model_mount_problems(pod, container,
                                     flags["model-repository"], config_maps)
    if not labels_match(deployment["spec"]["selector"],
                        deployment["spec"]["template"]["metadata"]["labels"]):
        problems.append("selector does not match the pod labels")
    return problems, deployment


def service_problems(objects, deployment):
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port_names = {p.get("name") for p in container.get("ports", [])}
    problems = []
    services = by_kind(objects, "Service")
    for service in services:
        name = service["metadata"]["name"]
        if not labels_match(service["spec"].get("selector"), pod_labels):
            problems.append(f"Service {name} does not select the pods")
        for port in service["spec"]["ports"]:
            if not port.get("name"):
                problems.append(f"Service {name}: unnamed port")
            if port.get("targetPort") not in port_names:
                problems.append(f"Service {name}: targetPort "
                                f"{port.get('targetPort')!r} is not a "
                                f"container port name")
            if port.get("name") == "grpc" \
                    and port.get("appProtocol") != "kubernetes.io/h2c":
                problems.append(f"Service {name}: gRPC port without "
                                f"appProtocol kubernetes.io/h2c")
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        if not labels_match(pdb["spec"].get("selector"), pod_labels):
            problems.append("PodDisruptionBudget does not select the pods")
    for monitor in by_kind(objects, "ServiceMonitor"):
        scraped = [s for s in services
                   if labels_match(monitor["spec"]["selector"],
                                   s["metadata"].get("labels", {}))]
        scraped_ports = {p.get("name") for s in scraped
                         for p in s["spec"]["ports"]}
        for endpoint in monitor["spec"].get("endpoints", []):
            if endpoint.get("port") not in scraped_ports:
                problems.append(f"ServiceMonitor endpoint port "
                                f"{endpoint.get('port')!r} is not a port of "
                                f"the Services it selects")
    return problems


def adapter_metric_names(adapter_config):
    return {(rule.get("name") or {}).get("as") for rule in
            adapter_config.get("rules", [])}


def autoscaler_problems(objects, deployment, adapter_config):
    problems = []
    for hpa in by_kind(objects, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != (
                "Deployment", deployment["metadata"]["name"]):
            problems.append(f"scaleTargetRef {target['kind']}/"
                            f"{target['name']} is not the Deployment")
        for metric in hpa["spec"].get("metrics", []):
            if metric["type"] != "Pods":
                continue
            name = metric["pods"]["metric"]["name"]
            if name not in adapter_metric_names(adapter_config):
                problems.append(f"pods metric {name!r} is not served by the "
                                f"Prometheus adapter's rules")
    return problems


class DaemonChecks:
    """What checks a manifest against the daemon: its config schema (protoc
    and proto/model_config.proto) and its flags (None: not checked)."""

    def __init__(self, protoc, proto_dir, known_flags):
        self.protoc = protoc
        self.proto_dir = proto_dir
        self.known_flags = known_flags


def overlay_problems(objects, adapter_config, daemon):
    kinds = {o.get("kind") for o in objects}
    if kinds != OVERLAY_KINDS:
        return [f"renders kinds {sorted(kinds)}, expected "
                f"{sorted(OVERLAY_KINDS)}"]
    problems, deployment = deployment_problems(objects)
    if deployment is not None:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        problems += flag_problems(container.get("args"), daemon.known_flags)
        problems += service_problems(objects, deployment)
        problems += autoscaler_problems(objects, deployment, adapter_config)
    config_maps = {c["metadata"]["name"]: c
                   for c in by_kind(objects, "ConfigMap")}
    problems += config_problems(daemon.protoc, daemon.proto_dir, config_maps)
    return problems


def kserve_problems(objects, known_flags):
    runtimes = {o["metadata"]["name"]: o
                for o in by_kind(objects, "ClusterServingRuntime")}
    services = by_kind(objects, "InferenceService")
    if not runtimes or not services:
        return ["expected a ClusterServingRuntime and an InferenceService"]
    problems = []
    for runtime in runtimes.values():
        name = runtime["metadata"]["name"]
        container = runtime["spec"]["containers"][0]
        flags = parse_flags(container.get("args"))
        problems += flag_problems(container.get("args"), known_flags)
        ports = {p.get("name"): p["containerPort"]
                 for p in container.get("ports", [])}
        protocols = runtime["spec"].get("protocolVersions", [])
        if "v2" in protocols and str(ports.get("http1")) != flags.get(
                "http-port"):
            problems.append(f"runtime {name}: no port named http1 on "
                            f"--http-port (protocol v2 is REST)")
        if "grpc-v2" in protocols and "grpc-port" not in flags:
            problems.append(f"runtime {name}: grpc-v2 without --grpc-port")
        annotations = runtime["spec"].get("annotations", {})
        if annotations.get("prometheus.kserve.io/port") \
                != flags.get("metrics-port"):
            problems.append("prometheus.kserve.io/port is not --metrics-port")
    for service in services:
        problems += inference_service_problems(service, runtimes)
    return problems


def inference_service_problems(service, runtimes):
    """The InferenceService asks for a runtime, format and protocol the
    runtime offers; gRPC needs a port named h2c on the runtime's
    --grpc-port, declared by the service's predictor or by the runtime."""
    name = service["metadata"]["name"]
    model = service["spec"]["predictor"]["model"]
    runtime = runtimes.get(model.get("runtime"))
    if runtime is None:
        return [f"InferenceService {name}: no runtime "
                f"{model.get('runtime')!r}"]
    problems = []
    formats = {f["name"] for f in
               runtime["spec"].get("supportedModelFormats", [])}
    if model["modelFormat"]["name"] not in formats:
        problems.append(f"model format {model['modelFormat']['name']!r}"
                        f" is not one the runtime supports")
    protocol = model.get("protocolVersion")
    if protocol not in runtime["spec"].get("protocolVersions", []):
        problems.append(f"protocol {protocol!r} is not one the runtime "
                        f"declares")
    if protocol == "grpc-v2":
        container = runtime["spec"]["containers"][0]
        declared = model.get("ports") or container.get("ports", [])
        h2c = {p.get("name"): p["containerPort"] for p in declared}.get("h2c")
        if str(h2c) != parse_flags(container.get("args")).get("grpc-port"):
            problems.append(f"InferenceService {name}: grpc-v2 needs a port "
                            f"named h2c on the runtime's --grpc-port")
    return problems


# --- Dockerfile ------------------------------------------------------------------

def dockerfile_stages(text):
    """{stage name: [instruction lines]} with continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages, current = {}, None
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
        if match:
            current = match.group(1) or f"stage{len(stages)}"
            stages[current] = []
        elif current is not None:
            stages[current].append(line)
    return stages


def runtime_packages(instructions):
    packages = set()
    for line in instructions:
        for body in re.findall(r"packages\+?=\(([^)]*)\)", line):
            packages.update(body.split())
    return packages


# The folder tools/fetch_libtorch.sh unpacks LibTorch into, under
# CASTSERVE_CACHE; libraries below it come from the builder stage, not Debian.
LIBTORCH_FOLDER = "libtorch-2.11.0"


def needed_libraries(binary):
    """({library soname: Debian package} for the ELF NEEDED entries,
    {path inside LIBTORCH_FOLDER} of every library loaded from there,
    directly or through another library)."""
    readelf = run(["readelf", "-d", binary])
    if readelf.returncode != 0:
        raise ValueError(f"readelf -d {binary}: {readelf.stderr.strip()}")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        readelf.stdout)
    ldd = run(["ldd", binary]).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
    # The dynamic loader has no "=>": /lib64/ld-linux-x86-64.so.2 (0x...).
    paths.update((os.path.basename(path), path) for path in
                 re.findall(r"^\s*(/\S+) \(0x", ldd, re.M))
    missing = [soname for soname in needed if soname not in paths]
    if missing:
        raise ValueError(f"{binary}: ldd finds no {', '.join(missing)}")
    marker = f"/{LIBTORCH_FOLDER}/"
    libtorch = {os.path.normpath(path).split(marker, 1)[1]
                for path in paths.values() if marker in path}
    # dpkg knows usrmerge'd libraries by their /lib path, others by /usr/lib.
    real = {soname: os.path.realpath(paths[soname]) for soname in needed
            if marker not in paths[soname]}
    candidates = set(real.values()) | {
        path.replace("/usr/lib/", "/lib/", 1) for path in real.values()}
    owners = {}
    output = run(["dpkg", "-S", *sorted(candidates)]).stdout
    for line in output.splitlines():
        package, _, path = line.partition(": ")
        owners[path.replace("/lib/", "/usr/lib/", 1)
               if path.startswith("/lib/") else path] = package.split(":")[0]
    result = {}
    for soname, path in real.items():
        if path not in owners:
            raise ValueError(f"{binary}: no Debian package owns {path} "
                             f"({soname})")
        result[soname] = owners[path]
    return result, libtorch


def builder_cache(instructions):
    """The builder stage's CASTSERVE_CACHE (ENV), or None."""
    for line in instructions:
        match = re.match(r"ENV\s+CASTSERVE_CACHE[= ](\S+)", line)
        if match:
            return match.group(1)
    return None


def copied_from_builder(instructions):
    """The absolute paths the runtime stage copies from the builder stage, as
    they land in the image (a source copied into a folder ending in /)."""
    copied = set()
    for line in instructions:
        words = line.split()
        if len(words) < 4 or words[0] != "COPY" or \
                words[1] != "--from=builder":
            continue
        *sources, destination = words[2:]
        for source in sources:
            if destination.endswith("/"):
                copied.add(destination + os.path.basename(source))
            else:
                copied.add(destination)
    return copied


def dockerfile_problems(root, hadolint, binaries):
    dockerfile = os.path.join(root, "deploy", "Dockerfile")
    problems = []
    lint = run([hadolint, "--config",
                os.path.join(root, "deploy", ".hadolint.yaml"), dockerfile])
    if lint.returncode != 0:
        problems.append(f"hadolint:\n{lint.stdout}{lint.stderr}".rstrip())
    with open(dockerfile) as f:
        stages = dockerfile_stages(f.read())
    if set(stages) != {"builder", "runtime"} or list(stages)[-1] != "runtime":
        return problems + [f"stages {list(stages)}, expected builder then "
                           f"runtime"]
    builder = " ".join(stages["builder"])
    for script in ("./tools/install_deps.sh", "./tools/build_release.sh"):
        if not re.search(r"RUN\b.*" + re.escape(script), builder):
            problems.append(f"the builder stage does not run {script}")
    with open(os.path.join(root, "tools", "run_server.sh")) as f:
        if "./tools/build_release.sh" not in f.read():
            problems.append("tools/run_server.sh does not build with "
                            "tools/build_release.sh")
    runtime = stages["runtime"]
    users = [line.split()[1] for line in runtime if line.startswith("USER")]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("the runtime stage runs as root")
    exposed = {p for line in runtime if line.startswith("EXPOSE")
               for p in line.split()[1:]}
    if not {"8000", "8001", "8002"} <= exposed:
        problems.append(f"EXPOSE {sorted(exposed)} lacks 8000, 8001 and "
                        f"8002")
    if not any(line.startswith("HEALTHCHECK CMD") or
               line.startswith("HEALTHCHECK --") for line in runtime):
        problems.append("no HEALTHCHECK")
    if not any(line.startswith("VOLUME") and "/models" in line
               for line in runtime):
        problems.append("no VOLUME for /models")
    installed = runtime_packages(runtime)
    # The builder is this machine's Debian 12 with tools/install_deps.sh's
    # packages, whose libraries are exactly the runtime's: a runtime package
    # unknown here is a misspelled or renamed one.
    known = run(["dpkg-query", "-W", "-f=${Package} ${Status}\n",
                 *sorted(installed)])
    present = {line.split()[0] for line in known.stdout.splitlines()
               if line.endswith(" installed")}
    for package in sorted(installed - present):
        problems.append(f"the runtime stage installs {package}, which is not "
                        f"an installed Debian package here")
    cache = builder_cache(stages["builder"])
    copied = copied_from_builder(runtime)
    for binary in binaries:
        try:
            needed, libtorch = needed_libraries(binary)
        except ValueError as e:
            problems.append(str(e))
            continue
        for library in sorted(libtorch):
            path = f"{cache}/{LIBTORCH_FOLDER}/{library}"
            if cache is None or path not in copied:
                problems.append(f"{os.path.basename(binary)} loads "
                                f"{library} of LibTorch, which the runtime "
                                f"stage does not copy to {path}")
        for soname, package in sorted(needed.items()):
            if package not in installed | BASE_IMAGE_PACKAGES:
                problems.append(f"{os.path.basename(binary)} needs {soname} "
                                f"from {package}, which the runtime stage "
                                f"does not install")
    return problems


# --- Main ---------------------------------------------------------------------------

def check_all(root, tools, binaries, report):
    """tools: {"kubectl", "hadolint", "promtool", "protoc": path}."""
    kubectl, hadolint, promtool = (tools["kubectl"], tools["hadolint"],
                                   tools["promtool"])
    deploy = os.path.join(root, "deploy")
    validator = SchemaValidator(os.path.join(deploy, "schemas"))
    daemon = DaemonChecks(tools["protoc"], os.path.join(root, "proto"),
                          daemon_flags(binaries))
    if daemon.known_flags is not None:
        report.ok(f"castserve --help lists {len(daemon.known_flags)} flags")

    adapter_path = os.path.join(deploy, "kubernetes", "prometheus-adapter",
                                "config.yaml")
    adapter_config = load_file_objects(adapter_path)[0]
    report.check("prometheus-adapter config.yaml (schema)",
                 validator.validate_document(adapter_config, ADAPTER_SCHEMA))

    overlays_dir = os.path.join(deploy, "kubernetes", "overlays")
    overlays = sorted(os.listdir(overlays_dir))
    if not overlays:
        report.error(f"no overlays in {overlays_dir}")
    for overlay in overlays:
        where = f"overlay {overlay}"
        try:
            objects = render_overlay(kubectl,
                                     os.path.join(overlays_dir, overlay))
        except ValueError as e:
            report.error(f"{where}: {e}")
            continue
        problems = [p for o in objects for p in validator.errors(o)]
        report.check(f"{where}: {len(objects)} objects valid for Kubernetes "
                     f"{' and '.join(KUBERNETES_VERSIONS)} "
                     f"({', '.join(sorted(object_name(o) for o in objects))})",
                     problems)
        if not problems:
            report.check(f"{where}: probes, ports, termination, memory, "
                         f"model mounts, selectors, autoscaling, model "
                         f"configs, flags agree",
                         overlay_problems(objects, adapter_config, daemon))

    kserve_dir = os.path.join(deploy, "kserve")
    objects = [o for name in sorted(os.listdir(kserve_dir))
               if name.endswith(".yaml")
               for o in load_file_objects(os.path.join(kserve_dir, name))]
    problems = [p for o in objects for p in validator.errors(o)]
    report.check(f"kserve: {len(objects)} objects valid "
                 f"({', '.join(object_name(o) for o in objects)})", problems)
    if not problems:
        report.check("kserve: the InferenceService asks for what the "
                     "runtime offers", kserve_problems(objects,
                                                      daemon.known_flags))

    result = run([promtool, "check", "config",
                  os.path.join(deploy, "prometheus", "prometheus.yml")])
    report.check("promtool check config deploy/prometheus/prometheus.yml",
                 [] if result.returncode == 0 else
                 [(result.stdout + result.stderr).strip()])

    report.check(f"deploy/Dockerfile (hadolint, build scripts, runtime "
                 f"packages for {len(binaries)} binaries)",
                 dockerfile_problems(root, hadolint, binaries))
    return not report.errors


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."),
        help="repository root (default: this script's)")
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--hadolint", required=True)
    parser.add_argument("--promtool", default="promtool")
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--binary", action="append", default=[],
                        help="castserve or castserve-client, for the runtime "
                             "stage's package check (repeatable)")
    args = parser.parse_args(argv)
    report = Report()
    try:
        tools = {name: require_tool(getattr(args, name), name)
                 for name in ("kubectl", "hadolint", "promtool", "protoc")}
        for binary in args.binary:
            if not os.path.isfile(binary):
                raise ToolMissing(f"binary {binary} does not exist")
    except ToolMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        passed = check_all(os.path.abspath(args.root), tools, args.binary,
                           report)
    except (OSError, ValueError) as e:   # unreadable or unparsable files
        report.error(str(e))
        passed = False
    print(f"check_deploy: {'PASSED' if passed else 'FAILED'} "
          f"({len(report.errors)} problems)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
