#!/usr/bin/python3
"""Prints the Markdown tables of experiments 2 and 4 (BENCHMARKS.md) from
benchmarks/results/experiment2.json and experiment4.json, as written by
benchmarks/drivers/run_lazy_load.py.

    python3 benchmarks/drivers/lazy_load_report.py [results_dir]
"""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fmt(s, scale=1.0, digits=2):
    """'median (min–max)' of a summary dict."""
    if not s:
        return "–"
    f = "%%.%df" % digits
    return "%s (%s–%s)" % (f % (s["median"] * scale), f % (s["min"] * scale),
                           f % (s["max"] * scale))


def mode_table(summary, labels):
    rows = ["| mode | init from process start, s | load call, s | first forward, s "
            "(weight wait) | second forward, s | peak RssAnon, GB | "
            "tracked peak, GB |",
            "|---|---|---|---|---|---|---|"]
    for label in labels:
        s = summary.get(label)
        if not s:
            continue
        rows.append("| %s | %s | %s | %s (%s) | %s | %s | %s |" % (
            label, fmt(s.get("init_seconds")), fmt(s.get("init_phase_seconds"), digits=3),
            fmt(s.get("forward1_seconds")), fmt(s.get("forward1_wait_seconds")),
            fmt(s.get("forward2_seconds")),
            fmt(s.get("rss_anon_peak_bytes"), 1e-9),
            fmt(s.get("tracked_peak_bytes"), 1e-9)))
    return "\n".join(rows)


def ratio_table(ratios):
    rows = ["| lazy mode | eager init / lazy init | eager load call / lazy load call | "
            "first forward / eager's | second forward / eager's | "
            "(init + first) / eager's |",
            "|---|---|---|---|---|---|"]
    for label, r in ratios.items():
        rows.append("| %s | %s | %s | %s | %s | %s |" % (
            label, fmt(r.get("eager_init_over_lazy_init"), digits=1),
            fmt(r.get("eager_load_call_over_lazy_load_call"), digits=0),
            fmt(r.get("first_forward_over_eager")),
            fmt(r.get("second_forward_over_eager")),
            fmt(r.get("init_plus_first_over_eager"))))
    return "\n".join(rows)


def experiment2(d):
    out = []
    for key in ("1b_warm", "1b_cold"):
        if key not in d["summary"]:
            continue
        labels = list(d["summary"][key].keys())
        labels.sort(key=lambda l: (l != "eager", l))
        out.append("**1B shape, %s page cache** (median (min–max) of %d rounds)\n"
                   % (key[3:], d["summary"][key]["eager"]["forward1_seconds"]["n"]))
        out.append(mode_table(d["summary"][key], labels) + "\n")
        out.append(ratio_table(d["ratios"][key]) + "\n")
    s8 = d["summary"].get("8b_warm_init_only")
    if s8:
        out.append("**8B shape, init only** (warm cache): " + ", ".join(
            "%s %s s (load call %s s)" % (l, fmt(s8[l]["init_seconds"]),
                                          fmt(s8[l]["init_phase_seconds"], digits=3))
            for l in s8) + "; lazy init 8B / 1B: %.2f\n" %
            d["ratios"]["lazy_init_8b_over_1b"])
    dec = d["summary"].get("1b_decode_only", {}).get("decode_only")
    if dec:
        out.append("**Where a lazy first forward's weight wait goes** (1B, warm, "
                   "2.47 GB of bf16, one pass over every tensor):\n")
        out.append("| pass | seconds | GB/s of bf16 |\n|---|---|---|")
        for p in ("read", "decode", "acquire", "fused_new", "fused_reused"):
            if dec.get(p + "_seconds"):
                out.append("| %s | %s | %s |" % (p, fmt(dec[p + "_seconds"]),
                                                 fmt(dec[p + "_gb_per_s"])))
        out.append("")
    return "\n".join(out)


def experiment4(d):
    out = []
    cold = d["summary"].get("cold", {})
    rows = ["| mode | first forward (cold), s | read during it, GB | read rate, GB/s | "
            "/ disk bandwidth | forward 2, s | forward 3, s | peak RssAnon, GB | "
            "tracked peak, GB |", "|---|---|---|---|---|---|---|---|---|"]
    for label, s in cold.items():
        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt(s.get("forward1_seconds")),
            fmt(s.get("forward1_read_bytes"), 1e-9),
            fmt(d["cold_first_forward_read_gb_per_s"][label]),
            fmt(d["read_rate_over_disk_bandwidth"][label]),
            fmt(s.get("forward2_seconds")), fmt(s.get("forward3_seconds")),
            fmt(s.get("rss_anon_peak_bytes"), 1e-9),
            fmt(s.get("tracked_peak_bytes"), 1e-9)))
    out.append("\n".join(rows))
    out.append("\nDisk sequential read (dd O_DIRECT, 16 MiB blocks, same run): " +
               ", ".join("%.2f GB/s" % x["gb_per_s"] for x in d["disk"]))
    return "\n".join(out)


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        REPO, "benchmarks", "results")
    for name, render in (("experiment2", experiment2), ("experiment4", experiment4)):
        path = os.path.join(results, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                print("### %s\n\n%s\n" % (name, render(json.load(f))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
