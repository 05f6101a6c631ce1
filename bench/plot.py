#!/usr/bin/env python3
"""Charts of the fio benchmarks' results: grouped bar charts, SVG and PNG (matplotlib, Agg).

  bench/plot.py RESULTS.json [--out DIR] [--formats svg,png]

RESULTS.json is what `bench/fio-compare.py --json` or `bench/choices.py --json` writes (or a run
transcribed from docs/PERFORMANCE.md, bench/results/); both scripts also plot directly with
`--plot DIR`. The charts are named after the results file (STEM.svg, STEM.png; choices: one
STEM-TABLE.svg per table) and written to DIR (default: beside the results file).

- fio-compare: one panel per job (MB/s or IOPS), a group of bars per configuration, one bar per
  server (raidkit, nbdkit, qemu-nbd, baseline); the number over a reference server's bar is
  raidkit's figure divided by that server's.
- choices: one chart per table, a group of bars per array (level, chunk, cache, journal), one
  bar per job, its length the array's figure over a single member's ("x single"); the label at
  its end is the figure itself.

The title names the run's date and commit. Colours are the Okabe-Ito palette (colour-blind
safe). Needs python3-matplotlib (scripts/install-deps.sh).
"""

import argparse
import json
import sys
import textwrap
from pathlib import Path

FORMAT = "raidkit-bench-results/1"

# Okabe & Ito, "Color Universal Design": distinguishable with every common colour vision
# deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
SERVER_COLOURS = {"raidkit": "#0072B2", "nbdkit": "#E69F00", "qemu-nbd": "#009E73",
                  "baseline": "#999999"}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), or a clear error."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("bench/plot.py: matplotlib is missing: install python3-matplotlib "
                 "(scripts/install-deps.sh installs it)")
    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "font.family": "DejaVu Sans",
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titleweight": "bold",
        "svg.hashsalt": "raidkit",  # stable element ids: a re-plot changes no byte
    })
    import matplotlib.pyplot as plt
    return plt


def check(data, path):
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a raidkit bench results file (format is "
                         f"{data.get('format')!r}, expected {FORMAT!r})")
    if data.get("bench") not in PLOTTERS:
        raise ValueError(f"{path}: unknown bench {data.get('bench')!r}; "
                         f"known: {', '.join(PLOTTERS)}")


def run_label(data):
    """'2026-11-24 08:39 UTC, commit bc159d4' (+ ', recorded run' for a transcribed one)."""
    text = f"{data['date']}, commit {data['commit']}"
    return text + (", recorded run" if data.get("recorded") else "")


def thousands(value, _pos=None):
    if value >= 1000 and value % 1000 == 0:
        return f"{value / 1000:,.0f}k"
    if value >= 1000:
        return f"{value / 1000:,.1f}k"
    return f"{value:,.0f}"


def figure_text(value, unit):
    number = f"{value:,.0f}" if unit == "IOPS" or value >= 100 else f"{value:,.1f}"
    return f"{number} {unit}"


def save(plt, fig, out_dir, stem, formats):
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        path = out_dir / f"{stem}.{ext}"
        # No creation date or software version in the file: a re-plot of the same results is
        # the same file.
        metadata = {"Date": None} if ext == "svg" else {"Software": None}
        fig.savefig(path, format=ext, dpi=110, metadata=metadata, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def plot_fio_compare(data, out_dir, stem, formats):
    """One panel per job; groups = configurations; bars = servers; ratios over the references."""
    plt = pyplot()
    servers = data["servers"]
    refs = [s for s in servers if s != "raidkit"]
    jobs, configs = [], []
    for row in data["results"]:
        if row["job"] not in [j for j, _ in jobs]:
            jobs.append((row["job"], row["unit"]))
        if row["config"] not in configs:
            configs.append(row["config"])
    by_key = {(r["config"], r["job"]): r for r in data["results"]}
    columns = 2 if len(jobs) > 1 else 1
    rows = (len(jobs) + columns - 1) // columns
    width = max(6.2, 1.05 * len(configs) * (len(servers) + 1) * 0.42)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, 3.5 * rows + 1.0),
                             squeeze=False)
    bar = 0.8 / len(servers)
    for index, (job, unit) in enumerate(jobs):
        ax = axes[index // columns][index % columns]
        top = 0
        for s_index, server in enumerate(servers):
            xs, heights = [], []
            for c_index, config in enumerate(configs):
                figure = by_key.get((config, job), {}).get("figures", {}).get(server)
                if figure is None:
                    continue
                xs.append(c_index - 0.4 + bar * (s_index + 0.5))
                heights.append(figure)
            top = max([top, *heights])
            colour = SERVER_COLOURS.get(server, PALETTE[s_index % len(PALETTE)])
            ax.bar(xs, heights, bar * 0.92, label=server, color=colour, zorder=2)
        for c_index, config in enumerate(configs):
            figures = by_key.get((config, job), {}).get("figures", {})
            ours = figures.get("raidkit")
            for s_index, server in enumerate(servers):
                theirs = figures.get(server)
                if server == "raidkit" or ours is None or not theirs:
                    continue
                ratio = ours / theirs
                ax.annotate(f"{ratio:.2f}×", (c_index - 0.4 + bar * (s_index + 0.5), theirs),
                            xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7.5,
                            fontweight="bold" if ratio < 1 else "normal",
                            color="#B00000" if ratio < 1 else "#333333")
        what = data.get("job_descriptions", {}).get(job)
        ax.set_title(f"{job}" + (f": {what}" if what else ""), loc="left", fontsize=10.5)
        ax.set_ylabel(unit)
        ax.set_ylim(0, top * 1.14)
        ax.yaxis.set_major_formatter(thousands)
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs)
        ax.grid(axis="y", color="#DDDDDD", zorder=0)
        ax.tick_params(axis="x", length=0)
    for index in range(len(jobs), rows * columns):
        axes[index // columns][index % columns].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(servers), frameon=False,
               bbox_to_anchor=(1.0, 0.995))
    ratios = " and ".join(refs)
    fig.suptitle(f"{data.get('title', 'raidkit against ' + ratios)}\n"
                 f"{run_label(data)}", x=0.01, y=1.0, ha="left", va="top", fontsize=12,
                 fontweight="bold")
    note = data.get("setup", "")
    if refs:
        note += (" " if note else "") + ("Number over a bar: raidkit's figure ÷ that server's "
                                         "(red: raidkit lower). Higher is better.")
    fig.text(0.01, 0.0, textwrap.fill(note, 170), ha="left", va="top", fontsize=8,
             color="#444444")
    fig.tight_layout()
    return save(plt, fig, out_dir, stem, formats)


def plot_choices(data, out_dir, stem, formats):
    """One chart per table: groups = arrays (rows), bars = jobs, length = x single member."""
    plt = pyplot()
    jobs = data["jobs"]
    baseline = data["baseline"]
    paths = []
    for table in data["tables"]:
        rows = table["rows"]
        bar = 0.84 / len(jobs)
        fig, ax = plt.subplots(figsize=(9.5, max(3.4, 0.13 * len(jobs) * len(rows) + 1.9)))
        right = 0
        for j_index, job in enumerate(jobs):
            ys, lengths, texts = [], [], []
            for r_index, row in enumerate(rows):
                figure = row["figures"].get(job["name"])
                base = baseline.get(job["name"])
                if figure is None or not base:
                    continue
                ys.append(r_index - 0.4 + bar * (j_index + 0.5))
                lengths.append(figure / base)
                texts.append(figure_text(figure, job["unit"]))
            right = max([right, *lengths])
            ax.barh(ys, lengths, bar * 0.88, color=PALETTE[j_index % len(PALETTE)],
                    label=f"{job['name']} ({job['unit']})", zorder=2)
            for y, length, text in zip(ys, lengths, texts):
                ax.annotate(text, (length, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=6, color="#333333")
        ax.axvline(1.0, color="#666666", linewidth=0.8, linestyle=":", zorder=3)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([row["label"] for row in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, right * 1.2)
        ax.set_xlabel("× one member alone (linear x1): the array's figure ÷ the single member's")
        ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:g}×")
        ax.grid(axis="x", color="#DDDDDD", zorder=0)
        ax.tick_params(axis="y", length=0)
        for r_index in range(1, len(rows)):
            ax.axhline(r_index - 0.5, color="#EEEEEE", linewidth=0.8, zorder=1)
        ax.tick_params(axis="x", labeltop=len(rows) > 6)
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.55 / (fig.get_figheight() - 1.6)),
                  ncol=len(jobs), fontsize=8, frameon=False, handlelength=1.2,
                  columnspacing=1.2, borderaxespad=0)
        label = dict(data, **{k: table[k] for k in ("date", "commit") if k in table})
        ax.set_title(f"{data.get('title', 'What each choice costs')}: {table['title']}\n"
                     f"{run_label(label)}", loc="left", fontsize=11, fontweight="bold")
        note = (data.get("setup", "") + " Label at a bar's end: the figure itself.").strip()
        fig.tight_layout()
        fig.text(0.01, 0.0, textwrap.fill(note, 150), ha="left", va="top", fontsize=7.5,
                 color="#444444")
        paths += save(plt, fig, out_dir, f"{stem}-{table['key']}", formats)
    return paths


PLOTTERS = {"fio-compare": plot_fio_compare, "choices": plot_choices}


def plot(data, out_dir, stem, formats=("svg", "png"), source="results"):
    """Charts of one results object; returns the paths written."""
    check(data, source)
    return PLOTTERS[data["bench"]](data, Path(out_dir), stem, formats)


def write_results(data, path):
    """Writes a results object as JSON (what plot.py reads back)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results file (fio-compare.py or choices.py --json)")
    parser.add_argument("--out", help="directory for the charts (default: beside the results)")
    parser.add_argument("--formats", default="svg,png", help="comma-separated (default svg,png)")
    args = parser.parse_args()
    path = Path(args.results)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"bench/plot.py: cannot read {path}: {e}")
    formats = [f for f in args.formats.split(",") if f]
    try:
        written = plot(data, args.out or path.parent, path.stem, formats, source=str(path))
    except (ValueError, KeyError) as e:
        sys.exit(f"bench/plot.py: {path}: {e!r}")
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
