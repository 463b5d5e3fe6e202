#!/usr/bin/python3
"""Checks of deploy/'s Prometheus and Grafana assets.

- `promtool check config` accepts deploy/prometheus/prometheus.yml (which
  loads the alerting rules), `promtool check rules` the rules, and
  `promtool test rules` passes the rules' unit tests;
- the Grafana dashboard parses, its panels are well formed, and every
  expression (panel queries and template variables) and every alert rule
  names only the castserve_* metric families of METRIC_FAMILIES below (and
  Prometheus's own `up` for the rules), each of which the dashboard shows.

METRIC_FAMILIES is the list the Prometheus integration test compares with the
daemon's live /metrics (prometheus_integration_test.py imports this module).

Run by Bazel as:
  deploy_assets_test.py PROMETHEUS_YML ALERTS_YML ALERTS_TEST_YML \
      DASHBOARD_JSON
(Debian's python3; promtool from Debian's `prometheus` package).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

# Every castserve_* family the deploy assets use, with its Prometheus type.
METRIC_FAMILIES = {
    # Memory, per model.
    "castserve_model_weight_bytes": "gauge",
    "castserve_model_peak_allocated_bytes": "gauge",
    "castserve_model_allocated_bytes": "gauge",
    "castserve_model_batch_peak_bytes": "histogram",
    # Memory, per device and process.
    "castserve_device_allocated_bytes": "gauge",
    "castserve_device_peak_allocated_bytes": "gauge",
    "castserve_mapped_checkpoint_bytes": "gauge",
    "castserve_memory_budget_bytes": "gauge",
    "castserve_process_resident_memory_bytes": "gauge",
    "castserve_process_resident_memory_peak_bytes": "gauge",
    "castserve_process_cpu_seconds_total": "counter",
    "castserve_uptime_seconds": "gauge",
    "castserve_build_info": "gauge",
    # Serving.
    "castserve_request_success_total": "counter",
    "castserve_request_failure_total": "counter",
    "castserve_inference_count_total": "counter",
    "castserve_execution_count_total": "counter",
    "castserve_pending_requests": "gauge",
    "castserve_queue_duration_seconds": "histogram",
    "castserve_compute_duration_seconds": "histogram",
    "castserve_request_duration_seconds": "histogram",
    "castserve_batch_size": "histogram",
    # Lifecycle.
    "castserve_model_state": "gauge",
    "castserve_model_load_duration_seconds": "gauge",
    "castserve_model_evictions_total": "counter",
    # Memory tiers.
    "castserve_model_tier": "gauge",
    "castserve_tier_moves_total": "counter",
    "castserve_wake_seconds": "histogram",
    "castserve_wake_rate_bytes_per_second": "gauge",
    # Lazy work.
    "castserve_model_materializations_total": "counter",
    "castserve_model_materialized_bytes_total": "counter",
    "castserve_model_materialization_seconds_total": "counter",
    "castserve_model_transient_copy_bytes_total": "counter",
    "castserve_model_prefetch_hits_total": "counter",
    "castserve_model_prefetch_misses_total": "counter",
}

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# PromQL words that are not metric names.
PROMQL_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "bool", "offset", "inf", "nan"}


def family_of(series_name):
    """The metric family a sample name belongs to (histogram suffixes off)."""
    if series_name in METRIC_FAMILIES:
        return series_name
    for suffix in HISTOGRAM_SUFFIXES:
        base = series_name[:-len(suffix)]
        if (series_name.endswith(suffix)
                and METRIC_FAMILIES.get(base) == "histogram"):
            return base
    return None


def metric_names(expr):
    """Metric names in a PromQL (or Grafana label_values) expression."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)      # string literals
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)
    text = re.sub(r"\{[^}]*\}", "", text)                # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)               # range selectors
    # Label lists: by (...), without (...), on (...), group_left (...).
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*"
                  r"\([^)]*\)", r"\1", text)
    # label_values(metric, label): the label is not a metric.
    text = re.sub(r",\s*[A-Za-z_]\w*\s*\)", ")", text)
    text = re.sub(r"\$\w+", "", text)                    # Grafana variables
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", text):
        word = match.group(0)
        following = text[match.end():].lstrip()
        if (following.startswith("(")                   # a function
                or re.match(r"(by|without)\b", following)):  # sum by (...)
            continue
        if word.lower() in PROMQL_KEYWORDS:
            continue
        if re.fullmatch(r"\d+[smhdwy]", word):           # durations
            continue
        names.add(word)
    return names


def dashboard_exprs(dashboard):
    """(where, expr) of every panel query and template variable query."""
    exprs = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                exprs.append((f"panel {panel.get('title')!r}", target["expr"]))
            walk(panel.get("panels", []))
    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            if isinstance(query, dict):
                query = query["query"]
            exprs.append((f"variable {variable['name']}", query))
    return exprs


def all_panels(dashboard):
    result = []

    def walk(panels):
        for panel in panels:
            result.append(panel)
            walk(panel.get("panels", []))
    walk(dashboard["panels"])
    return result


def read(path):
    with open(path) as f:
        return f.read()


def rule_exprs(alerts_path):
    """(alert, expr) of every rule of an alerting rules file (no YAML module
    needed: expressions are `expr: |` blocks or one-line `expr:` values)."""
    exprs, alert, lines = [], None, read(alerts_path).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = re.match(r"\s*- alert:\s*(\S+)", line)
        if match:
            alert = match.group(1)
        match = re.match(r"(\s*)expr:\s*(.*)$", line)
        if match:
            indent, value = len(match.group(1)), match.group(2).strip()
            if value in ("|", ">", "|-", ">-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(
                                              lines[i].lstrip()) > indent):
                    block.append(lines[i])
                    i += 1
                exprs.append((alert, "\n".join(block)))
                continue
            exprs.append((alert, value))
        i += 1
    return exprs


PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


class DeployAssetsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        (cls.prometheus_yml, cls.alerts_yml, cls.alerts_test_yml,
         cls.dashboard_json) = (os.path.abspath(p) for p in sys.argv[1:5])

    def promtool(self, *args):
        result = subprocess.run([PROMTOOL, *args], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(result.returncode, 0,
                         f"promtool {' '.join(args)}:\n{result.stdout}"
                         f"{result.stderr}")
        return result.stdout + result.stderr

    def test_promtool_check_config(self):
        output = self.promtool("check", "config", self.prometheus_yml)
        self.assertIn("1 rule files found", output)

    def test_promtool_check_rules(self):
        output = self.promtool("check", "rules", self.alerts_yml)
        self.assertIn("SUCCESS", output)

    def test_promtool_test_rules(self):
        output = self.promtool("test", "rules", self.alerts_test_yml)
        self.assertIn("SUCCESS", output)

    def test_rules_cover_memory_failures_and_availability(self):
        alerts = {alert for alert, _ in rule_exprs(self.alerts_yml)}
        for alert in ("CastserveMemoryNearBudget",
                      "CastserveRequestFailuresRising",
                      "CastserveModelUnavailable"):
            self.assertIn(alert, alerts)
        # Every rule is unit-tested.
        tests = read(self.alerts_test_yml)
        for alert in alerts:
            self.assertIn(f"alertname: {alert}", tests)

    def test_rules_use_only_listed_metrics(self):
        exprs = rule_exprs(self.alerts_yml)
        self.assertGreaterEqual(len(exprs), 3)
        for alert, expr in exprs:
            for name in metric_names(expr) - {"up"}:
                self.assertIsNotNone(family_of(name),
                                     f"{alert}: {name} is not listed")

    def test_metric_names_parser(self):
        self.assertEqual(metric_names(
            'histogram_quantile(0.99, sum by (model, le) (rate('
            'castserve_batch_size_bucket{model=~"$model",job="a b"}'
            '[$__rate_interval]))) / on (job) group_left (instance) '
            'max without (device) (castserve_memory_budget_bytes > 0)'),
            {"castserve_batch_size_bucket", "castserve_memory_budget_bytes"})
        self.assertEqual(metric_names(
            'label_values(castserve_build_info{job=~"$job"}, instance)'),
            {"castserve_build_info"})
        self.assertEqual(metric_names("up == 0"), {"up"})
        self.assertIsNone(family_of("castserve_uptime_seconds_count"))
        self.assertEqual(family_of("castserve_batch_size_sum"),
                         "castserve_batch_size")

    def test_dashboard_parses_and_panels_are_well_formed(self):
        with open(self.dashboard_json) as f:
            dashboard = json.load(f)
        self.assertEqual(dashboard["uid"], "castserve")
        panels = all_panels(dashboard)
        ids = [panel["id"] for panel in panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for panel in panels:
            self.assertIn("gridPos", panel)
            if panel["type"] == "row":
                continue
            self.assertTrue(panel.get("targets"), panel["title"])
            self.assertIn("datasource", panel)
            ref_ids = [t["refId"] for t in panel["targets"]]
            self.assertEqual(len(ref_ids), len(set(ref_ids)), panel["title"])
        titles = " | ".join(p["title"].lower() for p in panels)
        for topic in ("by model and state", "peak vs budget", "latency",
                      "throughput", "batch size", "evictions", "loads",
                      "materializ", "prefetch"):
            self.assertIn(topic, titles)

    def test_dashboard_uses_only_listed_metrics_and_shows_them_all(self):
        with open(self.dashboard_json) as f:
            dashboard = json.load(f)
        used = set()
        for where, expr in dashboard_exprs(dashboard):
            names = metric_names(expr)
            self.assertTrue(names, f"{where}: no metric in {expr!r}")
            for name in names:
                family = family_of(name)
                self.assertIsNotNone(
                    family, f"{where}: {name} is not a listed castserve_* "
                            f"family ({expr!r})")
                if METRIC_FAMILIES[family] == "histogram":
                    self.assertNotEqual(name, family,
                                        f"{where}: a histogram without "
                                        f"_bucket/_sum/_count")
                used.add(family)
        self.assertEqual(set(METRIC_FAMILIES) - used, set(),
                         "listed families the dashboard does not show")
        # Latency percentiles come from the histograms.
        exprs = " ".join(expr for _, expr in dashboard_exprs(dashboard))
        for histogram in ("castserve_request_duration_seconds",
                          "castserve_queue_duration_seconds",
                          "castserve_compute_duration_seconds",
                          "castserve_batch_size",
                          "castserve_model_batch_peak_bytes"):
            self.assertRegex(
                exprs, r"histogram_quantile\(0\.99, sum by \([^)]*le\) "
                       r"\(rate\(" + histogram + r"_bucket")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
