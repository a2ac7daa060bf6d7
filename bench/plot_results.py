#!/usr/bin/env python3
"""Charts of `mapfs bench` results (run by `mapfs bench plot RESULTS.json... --out DIR`).

Reads JSON written by any suite's --json, or by `mapfs bench all --json`
(a document holding every suite), and writes PNG files into DIR:

  SUITE.png        per-operation speed relative to tmpfs (bars; 1 = tmpfs,
                   higher is faster), one bar per file system, for every
                   suite that has a tmpfs baseline (micro, meta, concurrency,
                   ycsb, rocksdb, sqlite, fio)
  dir.png          the directory-size curve: ns per operation against the
                   number of entries, one panel per operation (log x axis)
  pswap.png        pswap against copying twice: microseconds against pages,
                   log-log, per mapping page size
  mapping.png      `mapfs bench mapping` (the HashFS §4 study): one panel per
                   experiment (4.1 ... 4.8, space), a bar per file-mapping
                   design (contiguous files first) for every metric and
                   parameter, ns on a log axis (space: bytes per GiB; 4.8:
                   throughput against contiguous files, tmpfs beside)
  overlay.png      per-operation speed relative to the kernel on the same
  overlay-shared.png  directory (x_kernel), one panel per directory (tmpfs,
                   ext4, xfs): micro, meta and YCSB; then MadFS Figs. 8-9
  results.md       every suite as a Markdown table: per workload, each file
                   system's median ns/op and its speed relative to tmpfs

Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def suites_of(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("suite") == "all":
        return doc.get("suites", [])
    return [doc]


def key(r):
    return (r["workload"], r.get("pages", 0), r.get("entries", 0), r.get("threads", 0))


def label(r):
    fs = r["fs"] if r.get("mode", "-") == "-" else f'{r["fs"]}/{r["mode"]}'
    return fs + (" 2m" if r.get("page") == "2m" else "") + (f'@{r["dir"]}' if r.get("dir") else "")


def bar_panel(ax, rows, base):
    """Bars of speed / tmpfs for `rows` on `ax`; False when there are none."""
    groups, series = [], {}
    for r in rows:
        k = key(r)
        if r["fs"] == "tmpfs" or k not in base or r["ns_per_op"] <= 0:
            continue
        if r["workload"] not in groups:
            groups.append(r["workload"])
        series.setdefault(label(r), {})[r["workload"]] = base[k] / r["ns_per_op"]
    if not groups:
        return False
    names = list(series)
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(groups))]
        ax.bar(xs, [series[n].get(g, 0) for g in groups], width, label=n)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    tilt = len(groups) > 6
    ax.set_xticklabels(groups, rotation=30 if tilt else 0, ha="right" if tilt else "center", fontsize=8)
    ax.set_ylabel("speed / tmpfs")
    ax.legend(fontsize=7)
    return True


def bars_vs_tmpfs(suite, rows, out):
    """One panel, or one per thread count (concurrency), of speed relative to tmpfs."""
    base = {key(r): r["ns_per_op"] for r in rows if r["fs"] == "tmpfs" and r["ns_per_op"] > 0}
    threads = sorted({r.get("threads", 0) for r in rows})
    n_groups = len({r["workload"] for r in rows})
    fig, axes = plt.subplots(len(threads), 1, figsize=(max(7.5, 0.6 * n_groups + 2), 3.4 * len(threads)), squeeze=False)
    drawn = False
    for ax, t in zip(axes[:, 0], threads):
        if bar_panel(ax, [r for r in rows if r.get("threads", 0) == t], base):
            drawn = True
        if t:
            ax.set_title(f"{t} thread{'s' if t > 1 else ''}", fontsize=9)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle(f"mapfs bench {suite}: per-operation speed relative to tmpfs (higher is faster)", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, f"{suite}.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def overlay_charts(rows, out):
    """overlay: bars of x_kernel per engine/mode, a panel per directory."""
    made = []
    for name, pick in (("overlay", lambda r: not r.get("threads")), ("overlay-shared", lambda r: r.get("threads"))):
        dirs = [d for d in ("tmpfs", "ext4", "xfs") if any(r.get("dir") == d and pick(r) for r in rows)]
        if not dirs:
            continue
        groups = []
        for r in rows:
            g = r["workload"] + (f' {r["threads"]}t' if r.get("threads") else "")
            if pick(r) and g not in groups:
                groups.append(g)
        fig, axes = plt.subplots(len(dirs), 1, figsize=(max(8, 0.5 * len(groups) + 2), 3.2 * len(dirs)), squeeze=False)
        for ax, d in zip(axes[:, 0], dirs):
            series = {}
            for r in rows:
                if r.get("dir") != d or not pick(r) or r["fs"] == d or r.get("x_kernel", 0) <= 0:
                    continue
                g = r["workload"] + (f' {r["threads"]}t' if r.get("threads") else "")
                series.setdefault(f'{r["fs"]}/{r["mode"]}', {})[g] = r["x_kernel"]
            width = 0.8 / max(1, len(series))
            for i, (n, vals) in enumerate(series.items()):
                xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(groups))]
                ax.bar(xs, [vals.get(g, 0) for g in groups], width, label=n)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels(groups, rotation=45, ha="right", fontsize=7)
            ax.set_ylabel(f"speed / {d} kernel")
            ax.set_title(f"directory on {d}", fontsize=9)
            ax.legend(fontsize=6, ncol=4)
        fig.suptitle(f"mapfs bench overlay: speed relative to the kernel on the same directory (log; higher is faster)", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, f"{name}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        made.append(path)
    return made


def dir_curve(rows, out):
    phases = [p for p in ("dir-create", "dir-lookup", "dir-stat", "dir-delete") if any(r["workload"] == p for r in rows)]
    if not phases:
        return None
    fig, axes = plt.subplots(1, len(phases), figsize=(3.2 * len(phases), 3.4), sharey=True)
    if len(phases) == 1:
        axes = [axes]
    for ax, ph in zip(axes, phases):
        by_fs = {}
        for r in rows:
            if r["workload"] == ph:
                by_fs.setdefault(label(r), []).append((r["entries"], r["ns_per_op"]))
        for fs, pts in sorted(by_fs.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fs)
        ax.set_xscale("log")
        ax.set_title(ph)
        ax.set_xlabel("entries in the directory")
    axes[0].set_ylabel("ns per operation")
    axes[0].legend(fontsize=8)
    fig.suptitle("mapfs bench dir: cost per operation against directory size")
    fig.tight_layout()
    path = os.path.join(out, "dir.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def pswap_curve(rows, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for page in ("4k", "2m"):
        for w, style in (("pswap", "-"), ("pswap-hot", "--"), ("copy", ":")):
            pts = sorted((r["pages"], r["median_ns"] / 1e3) for r in rows if r["workload"] == w and r["page"] == page)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=".", label=f"{w}, {page} pages")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("pages swapped (4 KiB each)")
    ax.set_ylabel("microseconds")
    ax.set_title("mapfs bench pswap: pswap vs copying the bytes twice")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "pswap.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


MAPPING_DESIGNS = ["contiguous", "hashfs", "cuckoo", "extent", "radix", "tmpfs"]


def design_order(d):
    return (MAPPING_DESIGNS.index(d) if d in MAPPING_DESIGNS else len(MAPPING_DESIGNS), d)


def design_of(r):
    """A mapping row's design: its mode on mapfs, "tmpfs" for the kernel rows of §4.8."""
    return "tmpfs" if r["fs"] == "tmpfs" else r["mode"]


def mapping_charts(rows, out):
    """The mapping study: a panel per experiment, bars per design."""
    designs = sorted({design_of(r) for r in rows}, key=design_order)
    exps = []
    for r in rows:
        e = r["workload"].split("-", 1)[0]
        if e not in exps:
            exps.append(e)
    cols = 2
    nrows = (len(exps) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(16, 4.2 * nrows), squeeze=False)
    for i, e in enumerate(exps):
        ax = axes[i // cols][i % cols]
        er = [r for r in rows if r["workload"].split("-", 1)[0] == e]
        groups = []
        for r in er:
            g = (r["workload"].split("-", 1)[1], r.get("threads") or r.get("pages") or 0)
            if g not in groups:
                groups.append(g)
        ds = [d for d in designs if any(design_of(r) == d for r in er)]  # tmpfs in §4.8 only
        width = 0.8 / max(1, len(ds))

        def cell(d, g):
            v = [r for r in er if design_of(r) == d and r["workload"].split("-", 1)[1] == g[0]
                 and (r.get("threads") or r.get("pages") or 0) == g[1]]
            return v[0] if v else None

        for j, d in enumerate(ds):
            vals = []
            for g in groups:
                r, base = cell(d, g), cell("contiguous", g)
                if r is None:
                    vals.append(0)
                elif e == "space":
                    vals.append(r["entries"])
                elif e == "4.8":  # throughput against contiguous files, as the paper's Figs. 12-13
                    vals.append(base["ns_per_op"] / r["ns_per_op"] if base and r["ns_per_op"] > 0 else 0)
                else:
                    vals.append(r["ns_per_op"])
            ax.bar([k + j * width for k in range(len(groups))], vals, width, label=d)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(groups))])
        ax.set_xticklabels([f"{m}\n{p}" if p else m for m, p in groups], fontsize=7)
        ax.set_yscale("linear" if e in ("space", "4.8") else "log")
        ax.set_ylabel({"space": "bytes of mapping per GiB", "4.8": "throughput / contiguous files (higher is faster)"}
                      .get(e, "ns (median)"))
        ax.set_title(f"§{e}" if e[0].isdigit() else e, fontsize=9)
        ax.legend(fontsize=7)
    for i in range(len(exps), nrows * cols):
        axes[i // cols][i % cols].axis("off")
    fig.suptitle("mapfs bench mapping: file mapping per design (HashFS paper §4); lower is faster but §4.8",
                 fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "mapping.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def markdown(doc):
    """One suite as a Markdown table: ns/op (x tmpfs) per file system."""
    rows = doc["results"]
    if doc["suite"] == "mapping":
        return mapping_markdown(doc)
    base = {key(r): r["ns_per_op"] for r in rows if r["fs"] == "tmpfs" and r["ns_per_op"] > 0}
    cols, lines = [], {}
    for r in rows:
        c = label(r)
        if c not in cols:
            cols.append(c)
        n = r.get("entries") or r.get("threads") or r.get("pages") or ""
        if r.get("threads"):
            n = f"{n} thr"
        k = (r["workload"], n)
        if doc["suite"] == "pswap":
            cell = f"{r['median_ns'] / 1e3:,.1f} us"
        else:
            cell = f"{r['ns_per_op']:,.0f}"
            if doc["suite"] == "overlay":
                if r["fs"] != r.get("dir") and r.get("x_kernel", 0) > 0:
                    cell += f" ({r['x_kernel']:.2f}x)"
            elif r["fs"] != "tmpfs" and key(r) in base and r["ns_per_op"] > 0:
                cell += f" ({base[key(r)] / r['ns_per_op']:.2f}x)"
        lines.setdefault(k, {})[c] = cell
    has_n = any(k[1] != "" for k in lines)
    head = ["workload"] + (["n"] if has_n else []) + cols
    what = {"pswap": "median time per swap",
            "overlay": "median ns/op; (x) = speed relative to the kernel on the same directory, > 1 is faster"}
    out = [f"**{doc['suite']}** ({what.get(doc['suite'], 'median ns/op; (x tmpfs) = speed relative to tmpfs, > 1 is faster')})", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (w, n), cells in lines.items():
        out.append("| " + " | ".join([w] + ([str(n)] if has_n else []) + [cells.get(c, "") for c in cols]) + " |")
    return "\n".join(out) + "\n"


def mapping_markdown(doc):
    """The mapping study: ns per design, and each against contiguous files."""
    rows = [r for r in doc["results"] if not r["workload"].startswith("4.8-")]
    apps = [r for r in doc["results"] if r["workload"].startswith("4.8-")]
    if not rows:  # `--apps only`
        return mapping_apps_markdown(apps)
    designs = sorted({design_of(r) for r in rows}, key=design_order)
    lines = {}
    for r in rows:
        n = r.get("threads") or r.get("pages") or ""
        lines.setdefault((r["workload"], n), {})[design_of(r)] = r
    out = ["**mapping** (median ns per block looked up / per operation; (x) = time relative to contiguous "
           "files, > 1 is slower; space: bytes of mapping per GiB)", "",
           "| workload | n | " + " | ".join(designs) + " |", "|" + "---|" * (len(designs) + 2)]
    for (w, n), by in lines.items():
        base = by.get("contiguous")
        cells = []
        for d in designs:
            r = by.get(d)
            if r is None:
                cells.append("")
            elif w.startswith("space"):
                cells.append(f"{r['entries'] / 2**20:.1f} MiB")
            else:
                c = f"{r['ns_per_op']:,.1f}"
                if base and d != "contiguous" and base["ns_per_op"] > 0:
                    c += f" ({r['ns_per_op'] / base['ns_per_op']:.1f}x)"
                cells.append(c)
        out.append(f"| {w} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n" + (mapping_apps_markdown(apps) if apps else "")


def mapping_apps_markdown(rows):
    """§4.8: operations per second per design and tmpfs, throughput against contiguous files."""
    designs = sorted({design_of(r) for r in rows}, key=design_order)
    lines = {}
    for r in rows:
        lines.setdefault((r["workload"][4:], r.get("threads") or 1), {})[design_of(r)] = r
    out = ["", "**mapping §4.8** (operations per second, median; (x) = throughput relative to contiguous files, "
           "> 1 is faster; YCSB through the shim)", "",
           "| workload | threads | " + " | ".join(designs) + " |", "|" + "---|" * (len(designs) + 2)]
    for (w, n), by in lines.items():
        base = by.get("contiguous")
        cells = []
        for d in designs:
            r = by.get(d)
            if r is None or r["ns_per_op"] <= 0:
                cells.append("")
                continue
            c = f"{1e9 / r['ns_per_op']:,.0f}"
            if base and d != "contiguous" and base["ns_per_op"] > 0:
                c += f" ({base['ns_per_op'] / r['ns_per_op']:.2f}x)"
            cells.append(c)
        out.append(f"| {w} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    made, md = [], []
    for path in a.results:
        for doc in suites_of(path):
            md.append(markdown(doc))
            suite, rows = doc["suite"], doc["results"]
            if suite == "dir":
                made.append(dir_curve(rows, a.out))
            elif suite == "pswap":
                made.append(pswap_curve(rows, a.out))
            elif suite == "mapping":
                made.append(mapping_charts(rows, a.out))
            elif suite == "overlay":
                made.extend(overlay_charts(rows, a.out))
            else:
                made.append(bars_vs_tmpfs(suite, rows, a.out))
    if md:
        with open(os.path.join(a.out, "results.md"), "w") as f:
            f.write("\n".join(md))
        made.append(os.path.join(a.out, "results.md"))
    made = [m for m in made if m]
    for m in made:
        print(m)
    if not made:
        print("mapfs bench plot: nothing to plot", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
