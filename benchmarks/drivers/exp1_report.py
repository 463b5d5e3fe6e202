#!/usr/bin/env python3
"""Merges layerwise_casting_benchmark JSON runs into experiment1.json, prints
the Markdown tables of BENCHMARKS.md's Experiment 1 and draws its chart.

Usage:
  python3 benchmarks/drivers/exp1_report.py RUN.json [RUN.json ...]
      [--out benchmarks/results/experiment1.json]
      [--png benchmarks/results/experiment1_peak.png]

Each run's ratios come from that run alone (the benchmark computes them); a
batch measured in several runs is taken from the last run that has it.
The PNG needs matplotlib; without it the chart is skipped.
"""

import argparse
import json

PUBLISHED = {  # diffusers, SigLIP so400m vision, fp32 vs fp8 e5m2 / bf16.
    "footprint_mb": (1633.56, 428.23),
    "peak_mb": {1: (2475.92, 1635.86), 4: (2539.73, 1639.11),
                16: (2848.93, 1649.02)},
}
CAST = "cast/F8_E5M2/BF16"


def by_config_batch(runs):
    """{config: {batch: batch result}} and {config: config result}."""
    batches, configs = {}, {}
    for run in runs:
        for result in run["results"]:
            configs.setdefault(result["config"], result)
            for b in result["batches"]:
                batches.setdefault(result["config"], {})[b["batch"]] = b
    return batches, configs


def fmt_latency(b):
    if b is None:
        return "–"
    return (f"{b['latency_median_s']:.2f} ({b['latency_min_s']:.2f}–"
            f"{b['latency_max_s']:.2f}, n={b['runs']})")


def published_table(batches, configs):
    f32, cast = configs["resident/F32"], configs.get(CAST)
    rows = ["| quantity | published fp32 | published fp8 e5m2/bf16 | "
            "castserve fp32 | castserve fp8 e5m2/bf16 | castserve ratio |",
            "|---|---:|---:|---:|---:|---:|"]
    pf, pc = PUBLISHED["footprint_mb"]
    rows.append(f"| footprint MB | {pf:.2f} | {pc:.2f} | "
                f"{f32['footprint_mb']:.2f} | {cast['footprint_mb']:.2f} | "
                f"{cast['footprint_mb'] / f32['footprint_mb']:.3f} |")
    for batch, (pf, pc) in PUBLISHED["peak_mb"].items():
        a = batches["resident/F32"].get(batch)
        c = batches[CAST].get(batch)
        if a is None or c is None:
            continue
        rows.append(f"| peak MB, batch {batch} | {pf:.2f} | {pc:.2f} | "
                    f"{a['peak_mb']:.2f} | {c['peak_mb']:.2f} | "
                    f"{c['peak_mb'] / a['peak_mb']:.3f} |")
    return "\n".join(rows)


def config_table(batches, configs):
    all_batches = sorted({b for c in batches.values() for b in c})
    head = ("| config | footprint MB | ideal MB | held MB | "
            + " | ".join(f"peak MB b{b}" for b in all_batches) + " | "
            + " | ".join(f"latency s b{b}" for b in all_batches)
            + " | pooler rel. err b1 |")
    rows = [head, "|" + "---|" * (5 + 2 * len(all_batches))]
    for name, c in configs.items():
        peaks = [f"{batches[name][b]['peak_mb']:.1f}" if b in batches[name]
                 else "–" for b in all_batches]
        lats = [fmt_latency(batches[name].get(b)) for b in all_batches]
        err = batches[name].get(1, {}).get("pooler_rel_error_vs_f32")
        rows.append(f"| {name} | {c['footprint_mb']:.2f} | {c['ideal_mb']:.2f}"
                    f" | {c['held_mb']:.2f} | " + " | ".join(peaks) + " | "
                    + " | ".join(lats) + " | "
                    + ("–" if err is None else f"{err:.2e}") + " |")
    return "\n".join(rows)


def targets_table(runs):
    """One row per configuration: each target's measured ratio, met or not."""
    kinds = [("footprint", "footprint vs ideal (abs. rel. error, <= 0.01)"),
             ("peak b1", "peak b1 / resident/F32's (<= 0.6)"),
             ("latency b16", "latency b16 / same dtype resident (<= 1.10)")]
    cells = {}
    for run in runs:  # Later runs win.
        for t in run["targets"]:
            kind = next(k for k, _ in kinds if t["target"].replace(
                "|footprint/ideal - 1|", "footprint").startswith(k))
            cells.setdefault(t["config"], {})[kind] = (
                f"{t['value']:.3f} {'met' if t['met'] else '**not met**'}")
    rows = ["| config | " + " | ".join(title for _, title in kinds) + " |",
            "|---|" + "---|" * len(kinds)]
    for config, by_kind in cells.items():
        rows.append(f"| {config} | " + " | ".join(
            by_kind.get(k, "–") for k, _ in kinds) + " |")
    return "\n".join(rows)


def draw(batches, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart")
        return
    names = ["resident/F32", "resident/BF16", CAST, "cast/F8_E4M3FN:per_row/F32"]
    names = [n for n in names if n in batches]
    sizes = sorted(PUBLISHED["peak_mb"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in names:
        xs = [b for b in sizes if b in batches[name]]
        ax.plot(xs, [batches[name][b]["peak_mb"] for b in xs], marker="o",
                label=f"castserve {name}")
    ax.plot(sizes, [PUBLISHED["peak_mb"][b][0] for b in sizes], "k--",
            marker="x", label="published fp32")
    ax.plot(sizes, [PUBLISHED["peak_mb"][b][1] for b in sizes], "k:",
            marker="x", label="published fp8 e5m2/bf16")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(b) for b in sizes])
    ax.set_xlabel("batch")
    ax.set_ylabel("peak inference memory, MB (2^20 B)")
    ax.set_title("SigLIP-so400m-shaped vision tower, CPU")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--out", default="benchmarks/results/experiment1.json")
    parser.add_argument("--build", default="",
                        help="what the measured binary was built from")
    parser.add_argument("--png",
                        default="benchmarks/results/experiment1_peak.png")
    args = parser.parse_args()
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    with open(args.out, "w") as f:
        json.dump({"experiment": 1, "build": args.build, "published": {
            "footprint_mb": PUBLISHED["footprint_mb"],
            "peak_mb": {str(k): v for k, v in PUBLISHED["peak_mb"].items()}},
            "runs": runs}, f, indent=1)
        f.write("\n")
    batches, configs = by_config_batch(runs)
    print(published_table(batches, configs), end="\n\n")
    print(config_table(batches, configs), end="\n\n")
    print(targets_table(runs))
    if args.png:
        draw(batches, args.png)


if __name__ == "__main__":
    main()
