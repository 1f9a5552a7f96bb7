"""The advice as a small self-contained HTML page: the project's report style (inline CSS, inline
SVG, no scripts, no external resources), two charts against N (MFU; exposed communication beside
compute), one line per fabric option, the table, the verdict and the assumptions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from fabtune.report.html import CSS
from fabtune.report.svg import FONT, SOURCE_COLOURS, Frame, nice_ticks

OPTION_COLOURS = {
    **dict(zip(("roce", "roce+qp", "roce+ar", "ib-ndr"), SOURCE_COLOURS[1:], strict=False)),
    "compute": "#111827", "bubble": "#9ca3af", "NVLink": "#0f766e",
}


def _text(
    x: float, y: float, text: str, anchor: str = "middle", *, colour: str = "#374151", extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="12" text-anchor="{anchor}" fill="{colour}" '
        f'style="{FONT}" {extra}>{escape(text)}</text>'
    )


def line_chart(
    series: Mapping[str, Sequence[tuple[int, float]]], label: str, title: str, dashed: Sequence[str] = ()
) -> str:
    """Lines of value against N (log2 axis), one per series; ``dashed`` series drawn dashed."""
    f = Frame(width=720, height=320, left=70, right=130, top=30, bottom=46)
    xs = sorted({n for points in series.values() for n, _ in points})
    values = [v for points in series.values() for _, v in points]
    if not xs or not values:
        return ""
    ticks = nice_ticks(0.0, max(values) * 1.05)
    lo, hi = math.log2(xs[0]), math.log2(xs[-1]) if xs[-1] > xs[0] else math.log2(xs[0]) + 1

    def x(n: int) -> float:
        return f.left + (math.log2(n) - lo) / (hi - lo) * f.plot_w

    def y(v: float) -> float:
        return f.top + f.plot_h - (v - ticks[0]) / (ticks[-1] - ticks[0]) * f.plot_h

    out = [
        f'<svg role="img" viewBox="0 0 {f.width} {f.height}" width="100%" style="max-width:{f.width}px" '
        f'aria-label="{escape(title)}"><rect width="{f.width}" height="{f.height}" fill="#fff"/>',
        _text(f.width / 2, 18, title, colour="#111"),
    ]
    for t in ticks:
        out.append(
            f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#e5e7eb"/>'
        )
        out.append(_text(f.left - 8, y(t) + 4, f"{t:g}", "end"))
    for n in xs:
        out.append(_text(x(n), f.height - f.bottom + 18, str(n)))
    out.append(_text(f.left + f.plot_w / 2, f.height - 8, "nodes (N)"))
    middle = f.top + f.plot_h / 2
    out.append(_text(18, middle, label, extra=f'transform="rotate(-90 18 {middle:.1f})"'))
    for i, (name, points) in enumerate(series.items()):
        colour = OPTION_COLOURS.get(name, "#6b7280")
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        path = " ".join(f"{x(n):.1f},{y(v):.1f}" for n, v in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        out += [f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>' for n, v in points]
        out.append(_text(f.width - f.right + 8, f.top + 14 + 16 * i, name, "start", colour=colour))
    out.append("</svg>")
    return "".join(out)


def _series(rows: Sequence[Mapping[str, Any]], value: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        out.setdefault(str(r["option"]), []).append((int(r["nodes"]), float(r[value])))
    return out


def _exposed(r: Mapping[str, Any]) -> float:
    return float(r["dp_exposed_s"] + r["tp_s"] + r["pp_s"] + r["ep_s"])


def render_advice(doc: Mapping[str, Any]) -> str:
    """The advice document (``Advice.to_json``) as one HTML page."""
    rows: Sequence[Mapping[str, Any]] = doc["rows"]
    mfu = {k: [(n, v * 100) for n, v in pts] for k, pts in _series(rows, "mfu").items()}
    # the split as shares of the step: compute and bubble (the same on every option), NVLink (TP and
    # intra-node EP/PP), and the fabric, per option
    first = str(rows[0]["option"]) if rows else ""
    own = [r for r in rows if r["option"] == first]
    split: dict[str, list[tuple[int, float]]] = {
        "compute": [(int(r["nodes"]), 100 * r["compute_s"] / r["step_s"]) for r in own],
        "bubble": [(int(r["nodes"]), 100 * r["bubble_s"] / r["step_s"]) for r in own],
        "NVLink": [(int(r["nodes"]), 100 * (_exposed(r) - r["fabric_s"]) / r["step_s"]) for r in own],
    }
    for r in rows:
        split.setdefault(f"{r['option']}", []).append((int(r["nodes"]), 100 * r["fabric_s"] / r["step_s"]))
    head = ["N", "fabric", "per-GPU GB/s", "step s", "compute s", "bubble s", "exposed comm s",
            "fabric share", "MFU", f"scaling vs N={doc['reference_nodes']}"]
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in (
            str(r["nodes"]), str(r["option"]), f"{r['per_gpu_gbytes']:.1f}", f"{r['step_s']:.3f}",
            f"{r['compute_s']:.3f}", f"{r['bubble_s']:.3f}", f"{_exposed(r):.3f}",
            f"{r['fabric_s'] / r['step_s']:.1%}", f"{r['mfu']:.1%}", f"{r['scaling']:.1%}",
        )) + "</tr>"
        for r in rows
    )
    job, m = doc["job"], doc["measured"]
    title = f"fabtune advise \u2014 {job['name']}"
    return "".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<div class="headline">{escape(doc["verdict"])}</div>',
        f'<p class="note">Measured: run {escape(str(m["run_id"]))} ({escape(str(m["phase"]))}), '
        f'{m["nodes"]} {escape(str(m["kind"]))} nodes, all_reduce busbw {m["all_reduce"]:.1f} GB/s.</p>',
        '<h2 id="mfu">MFU against N</h2>',
        f'<div class="chart">{line_chart(mfu, "MFU (%)", "predicted MFU, one line per fabric option")}</div>',
        '<h2 id="split">Step time split against N</h2>',
        '<div class="chart">'
        + line_chart(split, "share of the step (%)",
                     "compute, bubble, NVLink (dashed) and fabric wait per option",
                     dashed=("compute", "bubble", "NVLink"))
        + "</div>",
        '<h2 id="table">Predictions</h2>',
        '<div class="scroll"><table class="data"><tr>',
        *(f"<th>{escape(h)}</th>" for h in head),
        f"</tr>{body}</table></div>",
        '<h2 id="assumptions">Assumptions</h2><ul>',
        *(f"<li>{escape(a)}</li>" for a in doc["assumptions"]),
        "</ul>",
        '<p class="note">Equations and sources: docs/advisor.md.</p>',
        "</body></html>",
    ])
