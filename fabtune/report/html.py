"""The self-contained HTML report: inline CSS and inline SVG charts, no scripts, no external URLs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from fabtune.report import svg
from fabtune.report.build import NOISE_BAND, RULE_OF_THUMB, deciding_metric, move_label, noise_band

CSS = """
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1040px;color:#111;
 background:#fff;font-size:14px;line-height:1.45}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:30px 0 6px;border-bottom:2px solid #e5e7eb;
 padding-bottom:4px}h3{font-size:15px;margin:16px 0 4px}
.badge{display:inline-block;padding:3px 12px;border-radius:12px;font-weight:bold;color:#fff;font-size:14px;
 vertical-align:middle}
.pass{background:#1a8a3a}.warn{background:#b45309}.fail{background:#b91c1c}.running{background:#6b7280}
.headline{font-size:17px;margin:10px 0 14px}
.meta{border-collapse:collapse;margin-bottom:8px}.meta td{padding:1px 14px 1px 0;vertical-align:top}
.meta td:first-child{color:#4b5563}.meta td:last-child{overflow-wrap:anywhere}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:10px 0}
.card{border:1px solid #e5e7eb;border-radius:8px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#4b5563;font-size:12px}
table.data{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}
table.data th{background:#f3f4f6;text-align:left;padding:5px 8px;border-bottom:1px solid #d1d5db}
table.data td{padding:4px 8px;border-bottom:1px solid #eef0f2;vertical-align:top}
td.v-pass,span.v-pass,td.o-kept,td.o-in_effect,td.o-applied,td.o-remediated{color:#1a8a3a;font-weight:bold}
td.v-warn,span.v-warn{color:#b45309;font-weight:bold}
td.v-fail,span.v-fail,td.o-rolled_back{color:#b91c1c;font-weight:bold}
code.entry{margin-right:2px;white-space:nowrap}
code{font-family:'DejaVu Sans Mono',monospace;font-size:12px;background:#f6f8fa;padding:1px 4px;
 border-radius:3px;overflow-wrap:break-word}
.note{color:#4b5563;font-size:13px}.bar{background:#1f6fb2;height:10px;display:inline-block;
 vertical-align:middle;margin-right:6px}
details{margin:6px 0}summary{cursor:pointer;color:#1f6fb2}
.chart{margin:8px 0 4px;overflow-x:auto}.chart svg{min-width:560px}
.multiples{display:grid;grid-template-columns:repeat(auto-fill,minmax(280px,1fr));gap:10px;margin:8px 0}
.panel{border:1px solid #e5e7eb;border-radius:6px;padding:4px}
.legend{font-size:12px;margin:6px 0}.key{margin-right:14px;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
@media (max-width:640px){body{margin:12px;font-size:13px}.card{min-width:120px}h1{font-size:20px}}
.pairmaps{display:flex;flex-wrap:wrap;gap:16px}
.pairmap{margin:0;flex:1 1 420px;max-width:100%;overflow-x:auto}
.pairmap svg{min-width:360px}
figcaption{font-weight:bold;font-size:13px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""


def _v(value: Any) -> str:
    if value is None:
        return "\u2013"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _num(value: Any, fmt: str = "{:.1f}", none: str = "\u2013") -> str:
    return none if value is None else fmt.format(value)


def _table(
    head: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[Sequence[str]] | None = None
) -> str:
    """A table of already-escaped cells (``classes`` per cell, optional)."""
    out = ['<div class="scroll"><table class="data"><tr>', *(f"<th>{escape(h)}</th>" for h in head), "</tr>"]
    for r, row in enumerate(rows):
        out.append("<tr>")
        for c, cell in enumerate(row):
            cls = classes[r][c] if classes and classes[r][c] else ""
            out.append(f'<td class="{cls}">{cell}</td>' if cls else f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</table></div>")
    return "".join(out)


def _hosts_label(hosts: Sequence[str], every: Sequence[str]) -> str:
    if len(hosts) > 1 and sorted(hosts) == sorted(every):
        return f"all {len(hosts)} hosts"
    return ", ".join(hosts)


def _cards(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    kind = doc["kind"]
    if kind == "tune":
        t = doc["tune"]
        return [
            (
                f"{_num(t['baseline_median'])} \u2192 {_num(t['final_median'])}",
                "all_reduce busbw GB/s (median)",
            ),
            (_num(t["change"], "{:+.1%}"), "change"),
            (str(t["kept"]), "moves kept"),
            (str(t["rolled_back"]), "moves rolled back (verified)"),
            (_num(t["noise_floor"], "{:.1%}"), "noise floor (robust CV)"),
        ]
    if kind == "bootstrap":
        b = doc["bootstrap"]
        share = (
            b["busbw_gbytes"] / b["busbw_reference_gbytes"]
            if b["busbw_gbytes"] is not None and b["busbw_reference_gbytes"]
            else None
        )
        matrix = [p for p in doc["pairs"]["results"] if not p["retest"]]
        low = min((p["share"] for p in matrix if p["share"] is not None), default=None)
        fails = sum(1 for c in doc["checks"] if c["verdict"] == "fail")
        return [
            (b["phase"], "phase reached"),
            (str(fails), "failed checks"),
            (_num(low, "{:.0%}"), "lowest pair (share of ceiling)"),
            (_num(b["busbw_gbytes"]), "all_reduce busbw GB/s per GPU"),
            (_num(share, "{:.0%}"), "of the busbw reference"),
        ]
    d = doc["drift"]
    rem = d["remediation"]
    state = (
        "\u2013"
        if rem is None
        else "rolled back"
        if rem["rolled_back"]
        else "applied"
        if rem["applied"]
        else "no"
    )
    return [
        (str(len(d["items"])), "knobs drifted"),
        (str(len({i["host"] for i in d["items"]})), "hosts drifted"),
        (str(len(d["failed"])), "hosts not checked"),
        (state, "remediation"),
    ]


def _bandwidth(doc: Mapping[str, Any]) -> str:
    if not doc["bandwidth"]:
        return '<p class="note">No bandwidth was measured in this run.</p>'
    out = []
    single = False
    for metric in doc["bandwidth"]:
        role = " (guard metric)" if metric["role"] == "guard" else ""
        out.append(f"<h3>{escape(metric['name'])} ({escape(metric['unit'])}){role}</h3>")
        if all(p["n"] <= 1 for p in metric["series"]):  # one figure per step: bars read better than a CI plot
            single = True
            ref = metric["reference"]
            items = [
                svg.Bar(
                    p["label"],
                    p["median"] or 0.0,
                    None,
                    ref,
                    f"{p['median']:.1f}" + (f" = {p['median'] / ref:.0%} of {ref:.1f}" if ref else "")
                    if p["median"] is not None
                    else "not measured",
                    svg.OUTCOME_COLOUR.get(p["outcome"], "#1f6fb2"),
                )
                for p in metric["series"]
            ]
            out.append(
                f'<div class="chart">{svg.bars(items, metric["unit"], metric["name"], height=260)}</div>'
            )
            if ref:
                out.append(
                    f'<p class="note">Dashed: {escape(metric["reference_label"] or "reference")} '
                    f"({ref:.1f} {escape(metric['unit'])}).</p>"
                )
        else:
            out.append(f'<div class="chart">{svg.step_chart(metric)}</div>')
    if not single or len(doc["bandwidth"]) > 1:
        marks = (
            " Marks: the tuning loop's decision (kept, or rolled back and verified)."
            if doc["kind"] == "tune"
            else ""
        )
        banded = next((m for m in doc["bandwidth"] if m.get("reference_band")), None)
        shade = (
            f" Shaded: the noise band around the {escape(banded['reference_label'] or 'reference')} "
            f"(\u00b1{NOISE_BAND:g} x the baseline's noise floor): a median inside it cannot be told "
            "apart from the reference."
            if banded
            else ""
        )
        out.append(
            '<p class="note">Dots: every repetition. Diamond: the median. Whisker: 95% bootstrap confidence '
            f"interval of the median.{marks} The axis is zoomed to the data.{shade}</p>"
        )
    return "".join(out)


def _decisions(doc: Mapping[str, Any]) -> str:
    rows, classes = [], []

    def ci(d: Mapping[str, Any] | None) -> str:
        if not d or d["ratio"] is None:
            return "\u2013"
        low, high = d["ci_low"], d["ci_high"]
        interval = f" [{low - 1:+.1%}, {high - 1:+.1%}]" if low is not None and high is not None else ""
        return f"{d['ratio'] - 1:+.1%}{interval}"

    for d in doc["tune"]["decisions"]:
        cited = d[deciding_metric(d["reason"])]
        p = None if d["reason"].startswith("guard: pause") or not cited else cited["p"]
        rows.append(
            [
                escape(move_label(d, doc["hosts"])),
                ", ".join(f"<code>{escape(k)}</code>" for k in d["knobs"]),
                escape(d["outcome"].replace("_", " ")),
                escape(ci(d["all_reduce"])),
                escape(ci(d["alltoall"])),
                _num(p, "{:.3g}"),
                str(d["runs"]),
                _num(d["pause_frames"], "{:d}"),
                escape(d["reason"]),
            ]
        )
        classes.append(["", "", f"o-{d['outcome']}", "", "", "", "", "", ""])
    if not rows:
        return '<p class="note">No move was tried.</p>'
    head = [
        "move",
        "knobs",
        "outcome",
        "all_reduce vs ref. [95% CI]",
        "alltoall vs ref. [95% CI]",
        "p (as in the reason)",
        "runs",
        "pause frames",
        "reason",
    ]
    return _table(head, rows, classes)


SOURCE_TITLES = {
    "baseline": "before tuning (after the baseline)",
    "final": "after tuning",
    "before": "before remediation",
    "after": "after remediation",
    "matrix": "pair matrix",
}


def _cells(shown: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[float | None, str]]:
    """Per (client, server) both ways: the lowest share over the pair's rails, and every rail's figure."""
    cells: dict[tuple[str, str], tuple[float | None, str]] = {}
    groups: dict[frozenset[str], list[Mapping[str, Any]]] = {}
    for p in shown:
        groups.setdefault(frozenset((p["server"], p["client"])), []).append(p)
    for runs in groups.values():
        shares = [p["share"] for p in runs]
        worst = None if any(s is None for s in shares) else min(s for s in shares if s is not None)
        tip = "; ".join(
            f"{p['client']}\u2192{p['server']} {p['device']}: "
            + (
                f"{p['gbps']:.1f} Gb/s = {p['share']:.0%} of {p['ceiling_gbps']:.1f}"
                if p["gbps"] is not None and p["share"] is not None
                else f"error {p['error']}"
            )
            for p in sorted(runs, key=lambda r: r["rail"])
        )
        for p in runs:
            cells[(p["client"], p["server"])] = (worst, tip)
            cells[(p["server"], p["client"])] = (worst, tip)
    return cells


def _share_summary(shown: Sequence[Mapping[str, Any]]) -> str:
    shares = [p["share"] for p in shown if p["share"] is not None]
    if not shares:
        return "no figure"
    mean = sum(shares) / len(shares)
    return f"mean {mean:.0%}, lowest {min(shares):.0%} of the ceiling ({len(shares)} runs)"


def _pairs(doc: Mapping[str, Any]) -> str:
    pairs = doc["pairs"]
    source = pairs["source"]
    shown = [p for p in pairs["results"] if p["source"] == source]
    if not shown:
        note = "No pair was measured." if doc["kind"] != "tune" else (
            "This run measured no host pairs (fabtune_tune.pair_matrix: off, or a run from before "
            "tuning runs measured them)."
        )
        return f'<p class="note">{note}</p>'
    sources = list(dict.fromkeys(p["source"] for p in pairs["results"] if not p["retest"]))
    hosts = sorted({h for p in pairs["results"] for h in (p["server"], p["client"])})
    maps = []
    for src in sources:
        mine = [p for p in pairs["results"] if p["source"] == src and not p["retest"]]
        title = SOURCE_TITLES.get(src, src)
        maps.append(
            f'<figure class="pairmap"><figcaption>{escape(title)}: {escape(_share_summary(mine))}'
            f"</figcaption>{svg.heatmap(hosts, _cells(mine), pairs['threshold'], f'pair heatmap ({src})')}"
            "</figure>"
        )
    rails = sorted({p["rail"] for p in shown})
    out = [f'<div class="pairmaps">{"".join(maps)}</div>']
    out.append(
        '<p class="note">ib_write_bw per host pair, as a share of the physical '
        f"ceiling (link rate less header overhead at the port's MTU); each cell shows the lowest of "
        f"{len(rails)} rail(s); hover a cell for every rail."
        + (" A pair not measured in a round is grey." if len(sources) > 1 else "")
        + (
            f" Threshold {pairs['threshold']:.0%}; cells below it have a dark border."
            if pairs["threshold"]
            else ""
        )
        + "</p>"
    )
    retests = [p for p in pairs["results"] if p["retest"]]
    odd = [p for p in shown if p["verdict"] == "fail" or p["error"]] + retests
    if odd:
        rows = [
            [
                escape(f"{p['client']} \u2192 {p['server']}"),
                escape(p["device"]),
                _num(p["gbps"]),
                _num(p["ceiling_gbps"]),
                _num(p["share"], "{:.0%}"),
                escape(_v(p["verdict"])),
                escape(p["note"] or (p["error"] or "")),
            ]
            for p in odd
        ]
        classes = [["", "", "", "", "", f"v-{p['verdict']}", ""] for p in odd]
        out.append("<h3>Suspect pairs and re-tests</h3>")
        out.append(
            _table(
                ["client \u2192 server", "NIC", "Gb/s", "ceiling", "share", "verdict", "note"], rows, classes
            )
        )
    return "".join(out)


def _gpus(doc: Mapping[str, Any]) -> str:
    rails = _rails(doc)
    if doc["kind"] == "tune":
        return _tune_busbw(doc) + rails
    if doc["kind"] == "bootstrap":
        rails = _bootstrap_busbw(doc["bootstrap"]) + rails
    return rails or '<p class="note">No per-GPU figure in this run.</p>'


def _rails(doc: Mapping[str, Any]) -> str:
    """Per GPU's rail: the mean and lowest pair bandwidth against the ceiling ('' without pairs)."""
    gpus = doc["gpus"]
    if gpus:
        items = [
            svg.Bar(
                f"{g['gpu']} \u00b7 {g['device']}",
                g["mean_gbps"],
                g["min_gbps"],
                g["ceiling_gbps"],
                f"{g['share_mean']:.0%} (min {g['share_min']:.0%})"
                if g["share_mean"] is not None
                else f"{g['mean_gbps']:.1f}",
                "#1a8a3a" if (g["share_min"] or 0) >= (doc["pairs"]["threshold"] or 0.9) else "#c2410c",
            )
            for g in gpus
        ]
        return (
            f'<div class="chart">{svg.bars(items, "ib_write_bw Gb/s", "per-GPU bandwidth")}</div>'
            + '<p class="note">Per GPU, over its NIC\'s rail: mean ib_write_bw of every pair on the rail '
            "(bar), the lowest pair (black tick) and the rail's physical ceiling (dashed)"
            + f" ({escape(SOURCE_TITLES.get(doc['pairs']['source'], ''))}).</p>"
        )
    return ""


def _tune_busbw(doc: Mapping[str, Any]) -> str:
    """busbw per GPU before and after against the line rate, the reference, the rule of thumb and
    the model's best reachable with its noise band."""
    t = doc["tune"]
    items = [svg.Bar("baseline", t["baseline_median"], colour="#1f6fb2")] if t["baseline_median"] else []
    if t["final_median"]:
        items.append(svg.Bar("tuned", t["final_median"], colour="#1a8a3a"))
    best = (doc["oracle"] or {}).get("best_busbw")
    band = noise_band(float(best), t["noise_floor"]) if best else None
    if best:
        items.append(svg.Bar("model's best reachable", float(best), colour="#7c3aed"))
    if not items:
        return '<p class="note">No per-GPU figure.</p>'
    ref = t.get("busbw_reference")
    guides = (
        [
            svg.Guide(ref["line_rate_gbytes"], "line rate R x rate / 8", "#374151", "2 3"),
            svg.Guide(ref["rule_of_thumb_gbytes"], f"rule of thumb {ref['rule_of_thumb']:.0%}", "#0f766e"),
        ]
        if ref
        else []
    )
    noise = (band[0], band[1], "noise band of the model's best") if band else None
    chart = svg.bars(items, "all_reduce busbw GB/s per GPU", "busbw per GPU", height=300, guides=guides,
                     noise=noise)
    notes = ["NCCL bus bandwidth is per GPU (rank): the medians of the baseline and of the tuned rack."]
    if ref:
        notes.append(_yardsticks(ref, t["final_median"]))
    if best and t["final_median"]:
        notes.append(_against_best(t["final_median"], float(best), band, t["noise_floor"]))
        model = (doc["oracle"] or {}).get("share_of_best")
        if model is not None:
            notes.append(f"The model itself puts the tuned rack at {model:.1%} of its best.")
    return f'<div class="chart">{chart}</div><p class="note">' + escape(" ".join(notes)) + "</p>"


def _bootstrap_busbw(b: Mapping[str, Any]) -> str:
    """The acceptance busbw per GPU against the line rate, the reference, the rule of thumb and the
    threshold ('' without a measurement)."""
    busbw, ref, line = b["busbw_gbytes"], b["busbw_reference_gbytes"], b.get("busbw_line_rate_gbytes")
    if busbw is None or not ref:
        return ""
    guides = [svg.Guide(line, "line rate R x rate / 8", "#374151", "2 3")] if line else []
    guides.append(svg.Guide(ref, "reference R x C_min / 8", "#7c3aed"))
    if b.get("rule_of_thumb_gbytes"):
        guides.append(svg.Guide(b["rule_of_thumb_gbytes"], f"rule of thumb {RULE_OF_THUMB:.0%}", "#0f766e"))
    if b["busbw_threshold"]:
        cut = b["busbw_threshold"]
        guides.append(svg.Guide(cut * ref, f"threshold {cut:.0%}", "#b91c1c"))
    items = [svg.Bar("acceptance", busbw, colour="#1a8a3a")]
    chart = svg.bars(items, "all_reduce busbw GB/s per GPU", "busbw per GPU", height=260, guides=guides)
    of_line = f" = {busbw / line:.0%} of the line rate {line:.1f} GB/s" if line else ""
    note = (
        f"all_reduce busbw per GPU at 8 GiB: {busbw:.1f} GB/s{of_line}, {busbw / ref:.0%} of the goodput "
        f"reference R x C_min / 8 = {ref:.1f} GB/s (a healthy rack reaches about {RULE_OF_THUMB:.0%} of it)."
    )
    return f'<div class="chart">{chart}</div><p class="note">{escape(note)}</p>'


def _yardsticks(ref: Mapping[str, Any], final: float | None) -> str:
    """The ring yardsticks in words, and where the tuned median stands against them."""
    text = (
        f"{ref['rails']} rail(s) per host at {ref['rate_gbps']:g} Gb/s. A ring all_reduce carries per GPU "
        f"the bus bandwidth of a node's rails: at most the line rate R x rate / 8 = "
        f"{ref['line_rate_gbytes']:.1f} GB/s, in goodput R x C_min / 8 = {ref['reference_gbytes']:.1f} "
        f"GB/s (ceiling {ref['ceiling_gbps']:.1f} Gb/s at the tuned MTU); a healthy rack reaches about "
        f"{ref['rule_of_thumb']:.0%} of it at 8 GiB ({ref['rule_of_thumb_gbytes']:.1f} GB/s, the rule of "
        "thumb bootstrap accepts against)."
    )
    if final is None:
        return text
    share = final / ref["reference_gbytes"]
    text += f" Tuned: {share:.0%} of R x C_min / 8"
    if share > 1:
        return text + (
            ": above the ring bound, so NCCL reduced along a tree (or NVLS/SHARP), which crosses the "
            "NICs about once per byte (bound: twice the line rate)."
        )
    below = " below the rule of thumb" if final < ref["rule_of_thumb_gbytes"] else ""
    return text + f"{below}."


def _against_best(final: float, best: float, band: Sequence[float] | None, noise: float | None) -> str:
    """Where the tuned median stands against the model's best, in words that mention the noise."""
    share = f"Tuned median {final:.1f} GB/s = {final / best:.1%} of the model's best reachable {best:.1f}"
    if band is None or noise is None:
        return share + " (no noise floor measured)."
    where = (
        "within its noise band" if band[0] <= final <= band[1]
        else "above its noise band" if final > band[1]
        else "below its noise band"
    )
    return (
        f"{share}: {where} (\u00b1{NOISE_BAND:g} x the noise floor {noise:.1%} = "
        f"{band[0]:.1f}..{band[1]:.1f}); the model is noiseless, a measurement is not."
    )


# The counters that matter on an RDMA port, as families of counter names (ethtool -S and the RDMA
# hw_counters of mlx5): PFC pause frames received and sent, CNPs sent (as notification point) and
# handled (as reaction point), ECN-marked RoCE packets received, packets out of sequence.
COUNTER_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pause rx", re.compile(r"rx_prio\d_pause")),
    ("pause tx", re.compile(r"tx_prio\d_pause")),
    ("CNPs sent", re.compile(r"np_cnp_sent")),
    ("CNPs handled", re.compile(r"rp_cnp_handled")),
    ("ECN marked", re.compile(r"np_ecn_marked_roce_packets")),
    ("out of sequence", re.compile(r"out_of_sequence")),
)


def counter_grid(counters: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
    """Per (host, port), per family, per source: the summed deltas (rack-wide rows left out)."""
    grid: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for c in counters:
        if c["host"] == "*":
            continue
        family = next((f for f, pattern in COUNTER_FAMILIES if pattern.fullmatch(c["counter"])), None)
        if family is None:
            continue
        cell = grid.setdefault((c["host"], c["port"]), {}).setdefault(family, {})
        cell[c["source"]] = cell.get(c["source"], 0) + int(c["delta"])
    return grid


def _small_multiples(doc: Mapping[str, Any]) -> str:
    """One panel per host port: each family's deltas per source, one scale per family for all."""
    grid = counter_grid(doc["counters"])
    if not grid:
        return ""
    sources = list(dict.fromkeys(c["source"] for c in doc["counters"] if c["host"] != "*"))
    families = [f for f, _ in COUNTER_FAMILIES if any(f in cell for cell in grid.values())]
    scales = [max(v for cell in grid.values() for v in cell.get(f, {}).values()) for f in families]
    colours = svg.SOURCE_COLOURS
    panels = [
        svg.panel(
            f"{host} \u00b7 {port}",
            [(f, [cell.get(f, {}).get(src, 0) for src in sources]) for f in families],
            scales,
            colours,
        )
        for (host, port), cell in sorted(grid.items())
    ]
    legend = " ".join(
        f'<span class="key"><span class="swatch" style="background:{colours[k % len(colours)]}"></span>'
        f"{escape(src)}</span>"
        for k, src in enumerate(sources)
    )
    missing = [f for f, _ in COUNTER_FAMILIES if f not in families]
    note = (
        f" Not shown, because no port counted any: {', '.join(missing)}." if missing else ""
    )
    return (
        f'<p class="legend">{legend}</p><div class="multiples">'
        + "".join(f'<div class="panel">{p}</div>' for p in panels)
        + '</div><p class="note">Per host port, the counters that matter, summed over each step\'s runs '
        "(one bar per step, one scale per counter across all panels, so a port that stands out "
        f"stands out).{escape(note)}</p>"
    )


def _counters(doc: Mapping[str, Any]) -> str:
    counters = doc["counters"]
    if not counters:
        return (
            '<p class="note">No counter moved on any port: no pause frame, CNP, ECN mark or packet out '
            "of sequence was counted while this run measured.</p>"
        )
    multiples = _small_multiples(doc)
    top = max(abs(c["delta"]) for c in counters) or 1
    rows = [
        [
            escape(c["source"]),
            escape(c["host"]),
            escape(c["port"]),
            f"<code>{escape(c['counter'])}</code>",
            f'<span class="bar" style="width:{max(2, 260 * abs(c["delta"]) // top)}px"></span>{c["delta"]:,}',
        ]
        for c in counters
    ]
    table = _table(["during", "host", "port", "counter", "delta"], rows)
    if multiples:
        return f"{multiples}<details><summary>every counter delta ({len(rows)})</summary>{table}</details>"
    return table


def _checks(doc: Mapping[str, Any]) -> str:
    checks = doc["checks"]
    if not checks:
        return '<p class="note">No check was recorded.</p>'
    order = {"fail": 0, "warn": 1, "pass": 2}
    ranked = sorted(checks, key=lambda c: order.get(c["verdict"], 3))
    rows = [
        [
            escape(c["phase"]),
            escape(c["check"]),
            escape(c["host"]),
            escape(c["verdict"]),
            escape(c["summary"]),
            f"<code>{escape(c['evidence'])}</code>" if c["evidence"] else "",
        ]
        for c in ranked
    ]
    classes = [["", "", "", f"v-{c['verdict']}", "", ""] for c in ranked]
    counts = {v: sum(1 for c in checks if c["verdict"] == v) for v in ("pass", "warn", "fail")}
    head = (
        f'<p><span class="v-fail">{counts["fail"]} fail</span> \u00b7 <span class="v-warn">{counts["warn"]} '
        f'warn</span> \u00b7 <span class="v-pass">{counts["pass"]} pass</span></p>'
    )
    return head + _table(["phase", "check", "host", "verdict", "summary", "evidence"], rows, classes)


TOP_KEYS = ("nics", "nccl", "sm")


def knob_place(knob: str) -> tuple[str, str | None]:
    """A settings row's knob as ``(name, NIC)``: ``nics.eth2.mtu`` and ``eth2.mtu`` are ``mtu`` on
    eth2; ``nccl.NCCL_IB_TC`` has no NIC."""
    parts = knob.split(".")
    if parts[0] == "nics" and len(parts) >= 3:
        return ".".join(parts[2:]), parts[1]
    if parts[0] not in TOP_KEYS and len(parts) >= 2:
        return ".".join(parts[1:]), parts[0]
    return knob, None


def _value(value: Any) -> str:
    """A setting's value, escaped: a map as its entries (``26 \u2192 3``), a list as a list."""
    if value is None:
        return '<span class="note">not set</span>'
    if isinstance(value, Mapping):
        if not value:
            return "<code>{}</code>"
        return " ".join(
            f'<code class="entry">{escape(str(k))}\u2192{escape(_v(v))}</code>' for k, v in value.items()
        )
    return f"<code>{escape(_v(value))}</code>"


def _where(places: Mapping[str, set[str | None]], every: Sequence[str]) -> str:
    """Hosts (and their NICs) one change was made on: ``all 4 hosts \u00b7 eth2, eth3`` when alike."""
    hosts = sorted(places)
    nic_sets = {frozenset(n for n in nics if n) for nics in places.values()}
    if len(nic_sets) == 1:
        nics = sorted(next(iter(nic_sets)))
        label = _hosts_label(hosts, every) if len(hosts) > 1 else hosts[0]
        return escape(label + (f" \u00b7 {', '.join(nics)}" if nics else ""))
    return escape("; ".join(f"{h} \u00b7 {', '.join(sorted(n for n in places[h] if n))}" for h in hosts))


def settings_groups(
    settings: Sequence[Mapping[str, Any]],
) -> list[tuple[str, Any, Any, str, dict[str, set[str | None]]]]:
    """Rows merged per knob and change: ``(knob, before, after, outcome, {host: NICs})``."""
    merged: dict[tuple[str, str, str, str], tuple[Any, Any, dict[str, set[str | None]]]] = {}
    for s in settings:
        name, nic = knob_place(str(s["knob"]))
        key = (name, _v(s["before"]), _v(s["after"]), str(s["outcome"]))
        places = merged.setdefault(key, (s["before"], s["after"], {}))[2]
        places.setdefault(str(s["host"]), set()).add(nic)
    return [
        (name, before, after, outcome, places)
        for (name, _b, _a, outcome), (before, after, places) in sorted(
            merged.items(), key=lambda kv: (kv[0][0].startswith(("nccl.", "sm.")), kv[0][0], sorted(kv[1][2]))
        )
    ]


def _settings_table(settings: Sequence[Mapping[str, Any]], every: Sequence[str]) -> tuple[str, int]:
    groups = settings_groups(settings)
    rows = [
        [f"<code>{escape(name)}</code>", _value(before), _value(after), _where(places, every),
         escape(outcome.replace("_", " "))]
        for name, before, after, outcome, places in groups
    ]
    classes = [["", "", "", "", "o-" + g[3].replace(" ", "_")] for g in groups]
    return _table(["knob", "before", "after", "where", "outcome"], rows, classes), len(groups)


def _settings(doc: Mapping[str, Any]) -> str:
    settings = doc["settings"]
    if not settings:
        return '<p class="note">No setting was changed.</p>'
    every = doc["hosts"]
    out = []
    order: list[str] = []
    for s in settings:
        if s["change"] not in order:
            order.append(s["change"])
    for change in order:
        mine = [s for s in settings if s["change"] == change]
        table, count = _settings_table(mine, every)
        title = {"whole run": "In effect after the run (before \u2192 after)"}.get(change, change)
        if change == "whole run" or len(order) == 1:
            out.append(f"<h3>{escape(title)}</h3>{table}")
        else:
            outcome = mine[0]["outcome"].replace("_", " ")
            out.append(
                f"<details><summary>{escape(change)} \u2014 {escape(outcome)}, {count} knob "
                f"change(s)</summary>{table}</details>"
            )
    out.append(
        '<p class="note">Only knobs whose value changed, one row per knob and value with the hosts and '
        "NICs it was changed on. A map (dscp2prio) shows the entries that changed; an entry a port did "
        "not list held the driver's default (DSCP d on priority d &gt;&gt; 3).</p>"
    )
    return "".join(out)


def _job(job: Mapping[str, Any]) -> str:
    """The job's predicted step at the target size, one row per measured state, and its verdict."""
    rows, classes = [], []
    for p in job["predictions"]:
        shares = p["shares"]
        rows.append([escape(p["state"]), escape(p["option"]), _num(p["per_gpu_gbytes"]),
                     _num(p["mfu"], "{:.1%}"), _num(p["step_s"], "{:.3f}"),
                     *(_num(shares.get(k), "{:.0%}") for k in ("compute", "bubble", "fabric", "nvlink"))])
        classes.append(["", "", "", "" if job["min_mfu"] is None else "v-pass" if p["passed"] else "v-fail",
                        "", "", "", "", ""])
    head = ["measured state", "fabric", "per-GPU fabric GB/s", "MFU", "step s", "compute", "bubble",
            "fabric wait", "NVLink"]
    table = _table(head, rows, classes) if rows else '<p class="note">No prediction was made.</p>'
    threshold = "" if job["min_mfu"] is None else f" Threshold (--min-mfu): {job['min_mfu']:.0%}."
    return (
        f"<p><b>{escape(job['summary'])}</b></p>{table}"
        f'<p class="note">Job {escape(job["name"])} at N = {job["nodes"]} nodes, predicted from this run\'s '
        "own all_reduce busbw by the advisor's model (docs/advisor.md); the step split is in shares of "
        f"the step.{escape(threshold)}</p>"
    )


def _meta(doc: Mapping[str, Any]) -> str:
    run = doc["run"]
    rows = [
        ("run", run["id"]),
        ("fabric", f"{run['fabric']}" + (f" ({run['fabric_type']})" if run["fabric_type"] else "")),
        ("hosts", f"{len(doc['hosts'])}: {', '.join(doc['hosts'])}"),
        ("inventory", run["inventory"]),
        ("profile", run["profile"] or "\u2013"),
        ("started", run["started"] or "\u2013"),
        ("ended", run["ended"] or "\u2013"),
        ("duration", "\u2013" if run["duration_s"] is None else f"{run['duration_s']:.0f} s"),
        ("state", run["state"]),
    ]
    if doc["kind"] == "drift":
        rows.append(("desired state", doc["drift"]["source"]))
    if doc["kind"] == "tune" and doc["tune"]["tuned_desired"]:
        rows.append(("tuned desired state", doc["tune"]["tuned_desired"]))
    if doc["kind"] == "tune" and doc["tune"].get("lossless"):
        rows.append(("lossless class", doc["tune"]["lossless"]["says"]))
    return (
        '<table class="meta">'
        + "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
        + "</table>"
    )


def render_html(doc: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    kind, status = doc["kind"], doc["status"]
    title = f"fabtune {kind} report \u2014 {doc['run']['fabric']} \u2014 {doc['run']['id']}"
    cards = "".join(
        f'<div class="card"><b>{escape(v)}</b><span>{escape(k)}</span></div>' for v, k in _cards(doc)
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f'<h1>fabtune {escape(kind)} \u00b7 {escape(doc["run"]["fabric"])} <span class="badge {status}">'
        f"{escape(status.upper())}</span></h1>",
        f'<div class="headline">{escape(doc["headline"])}</div>',
        _meta(doc),
        f'<div class="cards">{cards}</div>',
        '<h2 id="bandwidth">Bandwidth per step</h2>',
        _bandwidth(doc),
    ]
    if kind == "tune":
        parts += ['<h2 id="decisions">Decisions</h2>', _decisions(doc)]
    if kind == "drift":
        rem = doc["drift"]["remediation"]
        if rem is not None and rem["reasons"]:
            parts.append("<p><b>Rolled back:</b> " + escape("; ".join(rem["reasons"])) + "</p>")
    parts += [
        '<h2 id="pairs">Host pairs (share of the physical ceiling)</h2>',
        _pairs(doc),
        '<h2 id="gpus">Per-GPU bandwidth</h2>',
        _gpus(doc),
        *([f'<h2 id="job">Training job at {doc["job"]["nodes"]} nodes</h2>', _job(doc["job"])]
          if doc.get("job") else []),
        '<h2 id="counters">Counter deltas</h2>',
        _counters(doc),
        '<h2 id="checks">Checks and their evidence</h2>',
        _checks(doc),
        '<h2 id="settings">Settings applied (diff)</h2>',
        _settings(doc),
        f'<p class="note">Built from the run journal alone. Schema {escape(doc["schema"])} version '
        f"{doc['schema_version']} (fabtune/report/schemas/report-v1.schema.json). Regenerate with "
        f"<code>fabtune report {escape(doc['run']['id'])} --format html</code>.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
