"""The self-contained HTML report: inline CSS and inline SVG charts, no scripts, no external URLs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from fabtune.report import svg
from fabtune.report.build import move_label

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
.meta td:first-child{color:#4b5563}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:10px 0}
.card{border:1px solid #e5e7eb;border-radius:8px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#4b5563;font-size:12px}
table.data{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}
table.data th{background:#f3f4f6;text-align:left;padding:5px 8px;border-bottom:1px solid #d1d5db}
table.data td{padding:4px 8px;border-bottom:1px solid #eef0f2;vertical-align:top}
td.v-pass,span.v-pass,td.o-kept,td.o-in_effect,td.o-applied,td.o-remediated{color:#1a8a3a;font-weight:bold}
td.v-warn,span.v-warn{color:#b45309;font-weight:bold}
td.v-fail,span.v-fail,td.o-rolled_back{color:#b91c1c;font-weight:bold}
code{font-family:'DejaVu Sans Mono',monospace;font-size:12px;background:#f6f8fa;padding:1px 4px;
 border-radius:3px;word-break:break-all}
.note{color:#4b5563;font-size:13px}.bar{background:#1f6fb2;height:10px;display:inline-block;
 vertical-align:middle;margin-right:6px}
details{margin:6px 0}summary{cursor:pointer;color:#1f6fb2}
.chart{margin:8px 0 4px}
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
    out = ['<table class="data"><tr>', *(f"<th>{escape(h)}</th>" for h in head), "</tr>"]
    for r, row in enumerate(rows):
        out.append("<tr>")
        for c, cell in enumerate(row):
            cls = classes[r][c] if classes and classes[r][c] else ""
            out.append(f'<td class="{cls}">{cell}</td>' if cls else f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</table>")
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
        out.append(
            '<p class="note">Dots: every repetition. Diamond: the median. Whisker: 95% bootstrap confidence '
            f"interval of the median.{marks} The axis is zoomed to the data.</p>"
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
        p = d["all_reduce"]["p_gain"] if d["all_reduce"] else None
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
        "p (gain)",
        "runs",
        "pause frames",
        "reason",
    ]
    return _table(head, rows, classes)


def _pairs(doc: Mapping[str, Any]) -> str:
    pairs = doc["pairs"]
    source = pairs["source"]
    shown = [p for p in pairs["results"] if p["source"] == source]
    if not shown:
        note = "This run type measures no host pairs." if doc["kind"] == "tune" else "No pair was measured."
        return f'<p class="note">{note}</p>'
    hosts = sorted({h for p in shown for h in (p["server"], p["client"])})
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
    rails = sorted({p["rail"] for p in shown})
    out = [svg.heatmap(hosts, cells, pairs["threshold"], "pair heatmap")]
    out.append(
        f'<p class="note">ib_write_bw per host pair ({escape(str(source))}), as a share of the physical '
        f"ceiling (link rate less header overhead at the port's MTU); each cell shows the lowest of "
        f"{len(rails)} rail(s); hover a cell for every rail."
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
            svg.bars(items, "ib_write_bw Gb/s", "per-GPU bandwidth")
            + '<p class="note">Per GPU, over its NIC\'s rail: mean ib_write_bw of every pair on the rail '
            "(bar), the lowest pair (black tick) and the rail's physical ceiling (dashed).</p>"
        )
    if doc["kind"] == "tune":
        t = doc["tune"]
        items = [svg.Bar("baseline", t["baseline_median"], colour="#1f6fb2")] if t["baseline_median"] else []
        if t["final_median"]:
            items.append(svg.Bar("tuned", t["final_median"], colour="#1a8a3a"))
        best = (doc["oracle"] or {}).get("best_busbw")
        if best:
            items.append(svg.Bar("model's best reachable", float(best), colour="#7c3aed"))
        return (
            svg.bars(items, "all_reduce busbw GB/s per GPU", "busbw per GPU", height=260)
            + '<p class="note">NCCL bus bandwidth is per GPU (rank): medians before and after tuning.</p>'
            if items
            else '<p class="note">No per-GPU figure.</p>'
        )
    return '<p class="note">No per-GPU figure in this run.</p>'


def _counters(doc: Mapping[str, Any]) -> str:
    counters = doc["counters"]
    if not counters:
        return '<p class="note">No counter moved.</p>'
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
    return _table(["during", "host", "port", "counter", "delta"], rows)


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
        merged: dict[tuple[str, str, str, str], list[str]] = {}
        for s in mine:
            merged.setdefault((s["knob"], _v(s["before"]), _v(s["after"]), s["outcome"]), []).append(
                s["host"]
            )
        rows = [
            [
                escape(_hosts_label(h, every)),
                f"<code>{escape(k)}</code>",
                f"<code>{escape(b)}</code>",
                f"<code>{escape(a)}</code>",
                escape(o.replace("_", " ")),
            ]
            for (k, b, a, o), h in merged.items()
        ]
        classes = [["", "", "", "", "o-" + o.replace(" ", "_")] for (_k, _b, _a, o) in merged]
        table = _table(["hosts", "knob", "before", "after", "outcome"], rows, classes)
        title = {"whole run": "In effect after the run (before \u2192 after, every host)"}.get(change, change)
        if change == "whole run" or len(order) == 1:
            out.append(f"<h3>{escape(title)}</h3>{table}")
        else:
            outcome = mine[0]["outcome"].replace("_", " ")
            out.append(
                f"<details><summary>{escape(change)} \u2014 {escape(outcome)}, {len(merged)} knob "
                f"change(s)</summary>{table}</details>"
            )
    return "".join(out)


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
        "<h2>Bandwidth per step</h2>",
        _bandwidth(doc),
    ]
    if kind == "tune":
        parts += ["<h2>Decisions</h2>", _decisions(doc)]
    if kind == "drift":
        rem = doc["drift"]["remediation"]
        if rem is not None and rem["reasons"]:
            parts.append("<p><b>Rolled back:</b> " + escape("; ".join(rem["reasons"])) + "</p>")
    parts += [
        "<h2>Host pairs (share of the physical ceiling)</h2>",
        _pairs(doc),
        "<h2>Per-GPU bandwidth</h2>",
        _gpus(doc),
        "<h2>Counter deltas</h2>",
        _counters(doc),
        "<h2>Checks and their evidence</h2>",
        _checks(doc),
        "<h2>Settings applied (diff)</h2>",
        _settings(doc),
        f'<p class="note">Built from the run journal alone. Schema {escape(doc["schema"])} version '
        f"{doc['schema_version']} (fabtune/report/schemas/report-v1.schema.json). Regenerate with "
        f"<code>fabtune report {escape(doc['run']['id'])} --format html</code>.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
