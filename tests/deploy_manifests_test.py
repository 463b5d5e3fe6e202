#!/usr/bin/python3
"""deploy/ validated offline, and the validation rejects what a cluster or a
Docker build would.

- tools/check_deploy.py (what tools/check_deploy.sh and deploy/README.md
  run) passes on deploy/ as committed, with the built castserve and
  castserve-client for the runtime-package check;
- each overlay renders the expected objects (the model configs, images and
  GPU resources of its kind);
- broken copies of deploy/ fail with a precise message: misspelled fields in
  a Deployment, ServiceMonitor, ClusterServingRuntime and InferenceService, a
  wrong type, a kind with no schema, a termination grace shorter than the
  drain, a model without its checkpoint mount, a budget over the limit, an
  autoscaling metric the adapter does not serve, a protocol the runtime does
  not declare, a model config that does not parse, an unknown daemon flag,
  a library the image lacks, a misspelled package, a hadolint finding, a
  builder that bypasses the README's build script, a root user, a broken
  Prometheus config;
- deploy/README.md gives the command this test runs and explains each alert;
- a missing tool is an error (exit 2), never a skip.

Run by Bazel as:
  deploy_manifests_test.py CASTSERVE CASTSERVE_CLIENT
with the tools tools/test_all.sh passes (after tools/fetch_deploy_tools.sh):
  DEPLOY_PYTHON  .venv/bin/python (kubernetes-validate, jsonschema, PyYAML)
  KUBECTL        .venv/deploy-tools/usr/bin/kubectl (Debian's kubectl 1.20)
  HADOLINT       .venv/bin/hadolint
and promtool and protoc from Debian (`prometheus`, `protobuf-compiler`).
The test re-runs itself under
DEPLOY_PYTHON.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REQUIRED_ENV = ("DEPLOY_PYTHON", "KUBECTL", "HADOLINT")
SETUP_HINT = ("tools/test_all.sh runs tools/fetch_deploy_tools.sh and passes "
              "--test_env=DEPLOY_PYTHON=... --test_env=KUBECTL=... "
              "--test_env=HADOLINT=...")


def reexec_under_deploy_python():
    """Fails, never skips, when the tools are missing."""
    for name in REQUIRED_ENV:
        value = os.environ.get(name)
        if not value:
            sys.exit(f"deploy_manifests_test: {name} is not set; "
                     f"{SETUP_HINT}")
        if not os.access(value, os.X_OK):
            sys.exit(f"deploy_manifests_test: {name}={value} is not an "
                     f"executable; {SETUP_HINT}")
    if os.environ.get("DEPLOY_MANIFESTS_TEST_REEXEC") != "1":
        os.environ["DEPLOY_MANIFESTS_TEST_REEXEC"] = "1"
        python = os.environ["DEPLOY_PYTHON"]
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROTOC = shutil.which("protoc") or "/usr/bin/protoc"
# Runfiles the checks read, copied (symlinks resolved) into each test tree.
TREE = ("deploy", "proto", "tools")


class DeployManifestsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.binaries = [os.path.abspath(p) for p in sys.argv[1:3]]
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.good = cls.copy_tree(os.getcwd(), "good")
        sys.path.insert(0, os.path.join(cls.good, "tools"))
        global check_deploy
        import check_deploy  # noqa: E402 (the venv's modules it needs)

    @classmethod
    def copy_tree(cls, source_root, name):
        root = os.path.join(cls.tmp, name)
        for part in TREE:
            shutil.copytree(os.path.join(source_root, part),
                            os.path.join(root, part), symlinks=False)
        return root

    def check(self, root, *extra, binaries=()):
        command = [os.environ["DEPLOY_PYTHON"],
                   os.path.join(root, "tools", "check_deploy.py"),
                   f"--root={root}", f"--kubectl={os.environ['KUBECTL']}",
                   f"--hadolint={os.environ['HADOLINT']}",
                   f"--promtool={PROMTOOL}", f"--protoc={PROTOC}",
                   *[f"--binary={b}" for b in binaries], *extra]
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=300)
        return result.returncode, result.stdout + result.stderr

    def broken(self, name, edits, binaries=()):
        """check_deploy.py on a copy of the tree with `edits`:
        [(path under the root, old text, new text)], each `old` present."""
        root = self.copy_tree(self.good, name)
        for path, old, new in edits:
            full = os.path.join(root, path)
            with open(full) as f:
                text = f.read()
            self.assertIn(old, text, f"{path} no longer has {old!r}")
            with open(full, "w") as f:
                f.write(text.replace(old, new, 1))
        returncode, output = self.check(root, binaries=binaries)
        self.assertEqual(returncode, 1, output)
        self.assertIn("check_deploy: FAILED", output)
        return output

    def render(self, overlay):
        return check_deploy.render_overlay(
            os.environ["KUBECTL"],
            os.path.join(self.good, "deploy", "kubernetes", "overlays",
                         overlay))

    # --- deploy/ as committed ------------------------------------------------

    def test_deploy_passes_every_check(self):
        returncode, output = self.check(self.good, binaries=self.binaries)
        self.assertEqual(returncode, 0, output)
        versions = " and ".join(check_deploy.KUBERNETES_VERSIONS)
        for line in (
                "ok: prometheus-adapter config.yaml (schema)",
                f"ok: overlay cpu: 8 objects valid for Kubernetes {versions}",
                f"ok: overlay cuda: 8 objects valid for Kubernetes {versions}",
                "ok: castserve --help lists ",
                "ok: overlay cpu: probes, ports, termination, memory, model "
                "mounts, selectors, autoscaling, model configs, flags agree",
                "ok: overlay cuda: probes, ports, termination, memory, model "
                "mounts, selectors, autoscaling, model configs, flags agree",
                "ok: kserve: 2 objects valid (ClusterServingRuntime/castserve,"
                " InferenceService/minilm)",
                "ok: kserve: the InferenceService asks for what the runtime "
                "offers",
                "ok: promtool check config deploy/prometheus/prometheus.yml",
                "ok: deploy/Dockerfile (hadolint, build scripts, runtime "
                "packages for 2 binaries)",
                "check_deploy: PASSED (0 problems)"):
            self.assertIn(line, output)
        self.assertNotIn("error:", output)

    def test_overlays_render_their_configs_images_and_devices(self):
        repository = os.path.join(self.good, "deploy", "model_repository")
        overlays = os.path.join(self.good, "deploy", "kubernetes", "overlays")
        expected = {
            "cpu": ("castserve:cpu",
                    os.path.join(repository, "minilm", "config.pbtxt")),
            "cuda": ("castserve:cuda",
                     os.path.join(overlays, "cuda", "minilm.config.pbtxt")),
        }
        for overlay, (image, config_path) in expected.items():
            objects = self.render(overlay)
            kinds = sorted(o["kind"] for o in objects)
            self.assertEqual(set(kinds), check_deploy.OVERLAY_KINDS)
            self.assertEqual(kinds.count("Service"), 2)   # + headless
            (config_map,) = check_deploy.by_kind(objects, "ConfigMap")
            with open(config_path) as f:
                self.assertEqual(config_map["data"],
                                 {"minilm.config.pbtxt": f.read()})
            (deployment,) = check_deploy.by_kind(objects, "Deployment")
            pod = deployment["spec"]["template"]["spec"]
            self.assertEqual(pod["containers"][0]["image"], image)
            # The Deployment mounts the hash-suffixed ConfigMap it renders.
            self.assertIn(config_map["metadata"]["name"],
                          [v.get("configMap", {}).get("name")
                           for v in pod["volumes"]])
            limits = pod["containers"][0]["resources"]["limits"]
            self.assertEqual("nvidia.com/gpu" in limits, overlay == "cuda")
        with open(expected["cuda"][1]) as f:
            self.assertIn("kind: KIND_GPU", f.read())

    # --- Schemas reject what the API server would -------------------------

    def test_misspelled_deployment_field_is_rejected(self):
        output = self.broken("deployment_typo", [(
            "deploy/kubernetes/base/deployment.yaml",
            "          readinessProbe:", "          readinesProbe:")])
        self.assertIn("error: overlay cpu: 8 objects valid", output)
        self.assertIn("Deployment/castserve: spec.template.spec.containers.0:"
                      " Additional properties are not allowed "
                      "('readinesProbe' was unexpected) (Kubernetes 1.27.0)",
                      output)

    def test_misspelled_servicemonitor_field_is_rejected(self):
        output = self.broken("servicemonitor_typo", [(
            "deploy/kubernetes/base/servicemonitor.yaml",
            "      scrapeTimeout: 5s", "      scrapeTimout: 5s")])
        self.assertIn("ServiceMonitor/castserve: spec.endpoints.0: Additional"
                      " properties are not allowed ('scrapeTimout' was "
                      "unexpected)", output)

    def test_misspelled_kserve_fields_are_rejected(self):
        output = self.broken("kserve_typos", [
            ("deploy/kserve/cluster-serving-runtime.yaml",
             "  protocolVersions:", "  protocolVersion:"),
            ("deploy/kserve/inference-service.yaml",
             "storageUri:", "storageURI:")])
        self.assertIn("ClusterServingRuntime/castserve: spec: Additional "
                      "properties are not allowed ('protocolVersion' was "
                      "unexpected)", output)
        self.assertIn("InferenceService/minilm: spec.predictor.model: "
                      "Additional properties are not allowed ('storageURI' "
                      "was unexpected)", output)

    def test_container_typo_inside_a_custom_resource_is_rejected(self):
        # Embedded core types resolve to Kubernetes' strict definitions.
        output = self.broken("runtime_container_typo", [(
            "deploy/kserve/cluster-serving-runtime.yaml",
            "      args:", "      argz:")])
        self.assertIn("ClusterServingRuntime/castserve: spec.containers.0: "
                      "Additional properties are not allowed ('argz' was "
                      "unexpected)", output)

    def test_wrong_value_type_is_rejected(self):
        output = self.broken("hpa_type", [(
            "deploy/kubernetes/base/hpa.yaml",
            "  maxReplicas: 8", "  maxReplicas: eight")])
        self.assertIn("HorizontalPodAutoscaler/castserve: spec.maxReplicas: "
                      "'eight' is not of type 'integer'", output)

    def test_kind_without_schema_is_an_error(self):
        output = self.broken("unknown_kind", [(
            "deploy/kubernetes/base/servicemonitor.yaml",
            "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor",
            "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor")])
        self.assertIn("PodMonitor/castserve: no schema for "
                      "monitoring.coreos.com/v1 PodMonitor", output)

    def test_adapter_config_typo_is_rejected(self):
        output = self.broken("adapter_typo", [(
            "deploy/kubernetes/prometheus-adapter/config.yaml",
            "    metricsQuery:", "    metricQuery:")])
        self.assertIn("error: prometheus-adapter config.yaml (schema): "
                      "rules.0: 'metricsQuery' is a required property",
                      output)

    # --- What schemas cannot see ---------------------------------------------

    def test_termination_grace_must_cover_prestop_and_drain(self):
        output = self.broken("short_grace", [(
            "deploy/kubernetes/base/deployment.yaml",
            "terminationGracePeriodSeconds: 45",
            "terminationGracePeriodSeconds: 30")])
        self.assertIn("terminationGracePeriodSeconds 30 must exceed preStop "
                      "5 s + --shutdown-grace-seconds 30 s", output)

    def test_probes_must_reach_the_health_paths(self):
        # The gRPC port has TLS: HTTP probes of the metrics port's health.
        output = self.broken("probe_path", [(
            "deploy/kubernetes/base/deployment.yaml",
            "              path: /v2/health/live",
            "              path: /metrics")])
        self.assertIn("livenessProbe is not an HTTP probe of /v2/health/live "
                      "on --metrics-port 8002", output)
        # Without TLS, gRPC health probes of the gRPC port.
        output = self.broken("probe_grpc", [
            ("deploy/kubernetes/base/deployment.yaml",
             "            - --grpc-tls-cert-file=/etc/castserve/tls/tls.crt\n"
             "            - --grpc-tls-key-file=/etc/castserve/tls/tls.key\n",
             "")])
        self.assertIn("startupProbe is not a gRPC health probe on "
                      "--grpc-port 8001", output)

    def test_every_model_needs_its_checkpoint_mounted(self):
        output = self.broken("no_checkpoint_mount", [(
            "deploy/kubernetes/base/deployment.yaml",
            "            - name: checkpoints\n"
            "              mountPath: /models/minilm/hf\n"
            "              subPath: repository/minilm/hf\n"
            "              readOnly: true\n", "")])
        self.assertIn("model minilm: nothing mounted at its checkpoint "
                      "/models/minilm/hf", output)

    def test_memory_budget_must_fit_under_the_limit(self):
        output = self.broken("budget", [(
            "deploy/kubernetes/overlays/cpu/memory-budget.yaml",
            "--memory-budget-bytes=512MiB", "--memory-budget-bytes=1GiB")])
        self.assertIn("error: overlay cpu: probes", output)
        self.assertIn("--memory-budget-bytes=1GiB leaves no room under the "
                      "1Gi limit", output)
        self.assertNotIn("error: overlay cuda: probes", output)

    def test_autoscaling_metric_must_be_served_by_the_adapter(self):
        output = self.broken("adapter_name", [(
            "deploy/kubernetes/prometheus-adapter/config.yaml",
            'as: "castserve_pending_requests"', 'as: "castserve_backlog"')])
        self.assertIn("pods metric 'castserve_pending_requests' is not "
                      "served by the Prometheus adapter's rules", output)

    def test_model_config_must_parse_as_model_config(self):
        output = self.broken("config_typo", [(
            "deploy/kubernetes/overlays/cuda/minilm.config.pbtxt",
            "kind: KIND_GPU", "kind: KIND_GPUU")])
        self.assertRegex(output, r"error: overlay cuda: .*ConfigMap "
                         r"castserve-model-config-\w+: minilm.config.pbtxt: "
                         r"input:9:\d+: Unknown enumeration value of "
                         r'"KIND_GPUU" for field "kind"')
        self.assertNotIn("error: overlay cpu: probes", output)

    def test_daemon_flags_must_exist(self):
        output = self.broken("flag_typo", [
            ("deploy/kubernetes/base/deployment.yaml",
             "--log-level=info", "--log-levle=info"),
            ("deploy/kserve/cluster-serving-runtime.yaml",
             "--bind-address=0.0.0.0", "--bind-adress=0.0.0.0")],
            binaries=self.binaries)
        self.assertIn("unknown flag --log-levle (castserve --help)", output)
        self.assertIn("unknown flag --bind-adress (castserve --help)", output)

    def test_inference_service_protocol_must_be_declared_by_runtime(self):
        output = self.broken("protocol", [(
            "deploy/kserve/cluster-serving-runtime.yaml",
            "    - v2\n", "")])
        self.assertIn("protocol 'v2' is not one the runtime declares",
                      output)

    def test_kserve_ports_must_match_the_daemon_flags(self):
        # REST on the runtime's http1 port; gRPC needs an h2c port.
        output = self.broken("kserve_ports", [
            ("deploy/kserve/cluster-serving-runtime.yaml",
             "--http-port=8080", "--http-port=8000"),
            ("deploy/kserve/inference-service.yaml",
             "protocolVersion: v2", "protocolVersion: grpc-v2")])
        self.assertIn("runtime castserve: no port named http1 on --http-port",
                      output)
        self.assertIn("InferenceService minilm: grpc-v2 needs a port named "
                      "h2c on the runtime's --grpc-port", output)

    # --- The Dockerfile ------------------------------------------------------

    def test_runtime_image_must_install_every_linked_library(self):
        output = self.broken("no_grpc_package", [(
            "deploy/Dockerfile", "libgrpc++1.51 libgrpc29 ",
            "libgrpc++1.51 ")], binaries=self.binaries)
        self.assertIn("castserve needs libgrpc.so.29 from libgrpc29, which "
                      "the runtime stage does not install", output)
        self.assertIn("castserve-client needs libgpr.so.29 from libgrpc29",
                      output)

    def test_runtime_image_must_install_the_http_server_library(self):
        output = self.broken("no_microhttpd_package", [(
            "deploy/Dockerfile", "libmicrohttpd12 ", "")],
            binaries=self.binaries)
        self.assertIn("castserve needs libmicrohttpd.so.12 from "
                      "libmicrohttpd12, which the runtime stage does not "
                      "install", output)

    def test_runtime_image_must_copy_every_libtorch_library(self):
        output = self.broken("no_libgomp", [(
            "deploy/Dockerfile",
            "     /opt/castserve/libtorch-2.11.0/torch/lib/libgomp.so.1 \\\n",
            "")], binaries=self.binaries)
        self.assertIn("castserve loads torch/lib/libgomp.so.1 of LibTorch, "
                      "which the runtime stage does not copy to "
                      "/opt/castserve/libtorch-2.11.0/torch/lib/libgomp.so.1",
                      output)

    def test_runtime_package_names_must_exist(self):
        output = self.broken("package_typo", [(
            "deploy/Dockerfile", "libprotobuf32 ", "libprotobuf23 ")],
            binaries=self.binaries)
        self.assertIn("the runtime stage installs libprotobuf23, which is not "
                      "an installed Debian package here", output)
        self.assertIn("castserve needs libprotobuf.so.32 from libprotobuf32",
                      output)

    def test_hadolint_findings_fail(self):
        output = self.broken("hadolint", [(
            "deploy/Dockerfile", "USER 10001:10001",
            "WORKDIR models\nUSER 10001:10001")])
        self.assertIn("hadolint:", output)
        self.assertIn("DL3000", output)   # WORKDIR must be absolute

    def test_builder_must_build_with_the_readme_script(self):
        output = self.broken("builder_bypass", [(
            "deploy/Dockerfile",
            "./tools/build_release.sh --compilation_mode=opt "
            "--install-dir=/out/bin",
            "bazel build -c opt //server:castserve "
            "//client:castserve-client")])
        self.assertIn("the builder stage does not run "
                      "./tools/build_release.sh", output)

    def test_runtime_stage_must_not_run_as_root(self):
        output = self.broken("root", [(
            "deploy/Dockerfile", "USER 10001:10001", "USER root")])
        self.assertIn("the runtime stage runs as root", output)

    def test_broken_prometheus_config_fails(self):
        output = self.broken("prometheus", [(
            "deploy/prometheus/prometheus.yml",
            "    scrape_interval: 5s", "    scrape_interval: 5 seconds")])
        self.assertIn("error: promtool check config", output)

    # --- The guide ------------------------------------------------------------

    def test_guide_command_runs_the_tested_checker_with_the_tested_tools(self):
        with open(os.path.join(self.good, "deploy", "README.md")) as f:
            guide = f.read()
        self.assertIn("```sh\n./tools/check_deploy.sh\n```", guide)
        with open(os.path.join(self.good, "tools", "check_deploy.sh")) as f:
            script = f.read()
        with open(os.path.join(self.good, "tools", "test_all.sh")) as f:
            test_all = f.read()
        self.assertIn("./tools/fetch_deploy_tools.sh", script)
        self.assertIn("./tools/fetch_deploy_tools.sh", test_all)
        self.assertIn("exec .venv/bin/python tools/check_deploy.py", script)
        # The script and tools/test_all.sh (this test's environment) name
        # the same tools.
        for variable, option in (("DEPLOY_PYTHON", None),
                                 ("KUBECTL", "--kubectl"),
                                 ("HADOLINT", "--hadolint")):
            match = re.search(variable + r'="\$PWD/([^"]+)"', test_all)
            self.assertIsNotNone(match, f"test_all.sh passes no {variable}")
            if option is None:
                self.assertIn(f"exec {match.group(1)} ", script)
            else:
                self.assertIn(f"{option}={match.group(1)}", script)

    def test_guide_explains_every_alert(self):
        with open(os.path.join(self.good, "deploy", "README.md")) as f:
            alerts_section = f.read().split("## Alerts", 1)[1]
        with open(os.path.join(self.good, "deploy", "prometheus",
                               "castserve_alerts.yml")) as f:
            alerts = re.findall(r"- alert:\s*(\S+)", f.read())
        self.assertGreaterEqual(len(alerts), 7)
        for alert in alerts:
            self.assertRegex(alerts_section, rf"\| `{alert}` \(\w+\) \|",
                             f"deploy/README.md does not explain {alert}")

    # --- Tools ---------------------------------------------------------------

    def test_missing_tool_is_an_error_not_a_skip(self):
        returncode, output = self.check(self.good, "--kubectl=/nonexistent")
        self.assertEqual(returncode, 2, output)
        self.assertIn("error: kubectl not found at '/nonexistent' "
                      "(tools/fetch_deploy_tools.sh fetches it)", output)


if __name__ == "__main__":
    reexec_under_deploy_python()
    unittest.main(argv=sys.argv[:1])
