"""Inline SVG charts for the HTML report: no scripts, no external resources, readable at a glance."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

FONT = "font-family:'DejaVu Sans',Helvetica,Arial,sans-serif"
OUTCOME_COLOUR = {
    "baseline": "#1f6fb2",
    "kept": "#1a8a3a",
    "rolled_back": "#c2410c",
    "interrupted": "#6b7280",
    "measured": "#1f6fb2",
    "before": "#6b7280",
    "after": "#1f6fb2",
    "final": "#1a8a3a",
}
OUTCOME_MARK = {"kept": "\u2714 kept", "rolled_back": "\u2718 rolled back", "interrupted": "? interrupted"}


def _t(  # noqa: PLR0917 - a private SVG text helper, called positionally
    x: float,
    y: float,
    text: str,
    size: int = 13,
    anchor: str = "middle",
    colour: str = "#111",
    weight: str = "normal",
    extra: str = "",
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{colour}" '
        f'font-weight="{weight}" style="{FONT}" {extra}>{escape(text)}</text>'
    )


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``low..high``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 0.5:
        ticks.append(round(value, 6))
        value += step
    return ticks


def _wrap(label: str, width: int = 14, lines: int = 3) -> list[str]:
    words, out, line = label.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    out.append(line)
    if len(out) > lines:
        out = [*out[: lines - 1], out[lines - 1][: width - 1] + "\u2026"]
    return out


@dataclass(frozen=True)
class Frame:
    """A plot area inside an SVG canvas."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int

    @property
    def plot_w(self) -> float:
        return float(self.width - self.left - self.right)

    @property
    def plot_h(self) -> float:
        return float(self.height - self.top - self.bottom)


def _open(width: int, height: int, title: str) -> str:
    return (
        f'<svg role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" style="max-width:{width}px" aria-label="{escape(title)}">'
        f'<rect width="{width}" height="{height}" fill="#fff"/>'
    )


def _axis(f: Frame, ticks: Sequence[float], y: Callable[[float], float], label: str) -> list[str]:
    """Horizontal grid lines with their values, and the rotated axis label."""
    out = []
    for tick in ticks:
        out.append(
            f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="#e5e7eb"/>'
        )
        out.append(_t(f.left - 8, y(tick) + 4, f"{tick:g}", 12, "end", "#374151"))
    middle = f.top + f.plot_h / 2
    rotate = f'transform="rotate(-90 18 {middle:.1f})"'
    out.append(_t(18, middle, label, 13, "middle", "#111", "normal", rotate))
    return out


def _lines(f: Frame, metric: Mapping[str, Any], y: Callable[[float], float]) -> list[str]:
    """The step chart's dashed lines: the first baseline's median, the reference and its noise band."""
    series: Sequence[Mapping[str, Any]] = metric.get("series") or []
    reference = metric.get("reference")
    out: list[str] = []
    base = next((p.get("median") for p in series if p.get("outcome") == "baseline"), None)
    if base is not None:
        out.append(
            f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{y(base):.1f}" y2="{y(base):.1f}" '
            f'stroke="#1f6fb2" stroke-dasharray="6 4" stroke-width="1.5"/>'
        )
        out.append(
            _t(f.width - f.right - 4, y(base) - 5, f"baseline median {base:.1f}", 12, "end", "#1f6fb2")
        )
    noise = metric.get("reference_band")
    if reference is not None and noise:
        out.append(band(f, float(noise[0]), float(noise[1]), y, "noise band around the reference"))
    if reference is not None:
        label = str(metric.get("reference_label") or "reference")
        out.append(
            f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{y(reference):.1f}" '
            f'y2="{y(reference):.1f}" stroke="#7c3aed" stroke-dasharray="2 3" stroke-width="1.5"/>'
        )
        out.append(_t(f.left + 6, y(reference) - 5, f"{label} {reference:.1f}", 12, "start", "#7c3aed"))
    return out


def step_chart(metric: Mapping[str, Any], width: int = 960, height: int = 380) -> str:
    """Per step: every sample (dots), the median (large marker) and its 95 % CI (whisker), the
    keep/roll-back mark above, the first baseline's median and the reference as dashed lines."""
    series: Sequence[Mapping[str, Any]] = metric.get("series") or []
    unit, name = str(metric.get("unit", "")), str(metric.get("name", ""))
    if not series:
        return ""
    rotate = len(series) > 7
    f = Frame(width, height + (40 if rotate else 0), 72, 24, 40, 110 if rotate else 70)
    values = [
        v for p in series for v in [*p.get("samples", []), p.get("ci_low"), p.get("ci_high")] if v is not None
    ]
    reference = metric.get("reference")
    if reference is not None:
        values.append(float(reference))
        values += [float(v) for v in metric.get("reference_band") or []]
    lo, hi = min(values), max(values)
    pad = max((hi - lo) * 0.12, hi * 0.02, 0.5)
    ticks = nice_ticks(max(0.0, lo - pad), hi + pad)
    y0, y1 = ticks[0], ticks[-1]

    def y(v: float) -> float:
        return f.top + f.plot_h * (1 - (v - y0) / (y1 - y0))

    slot = f.plot_w / len(series)
    out = [_open(f.width, f.height, f"{name} per step"), *_axis(f, ticks, y, f"{name} ({unit})")]
    out += _lines(f, metric, y)
    for i, p in enumerate(series):
        cx = f.left + slot * (i + 0.5)
        colour = OUTCOME_COLOUR.get(str(p.get("outcome")), "#374151")
        samples = p.get("samples") or []
        for j, v in enumerate(samples):
            dx = ((j % 5) - 2) * min(4.0, slot / 14)
            out.append(
                f'<circle cx="{cx + dx - slot * 0.16:.1f}" cy="{y(v):.1f}" r="2.6" fill="{colour}" '
                f'fill-opacity="0.35"/>'
            )
        low, high, med = p.get("ci_low"), p.get("ci_high"), p.get("median")
        if low is not None and high is not None:
            cap = min(10.0, slot / 6)
            out.append(
                f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
                f'stroke="{colour}" stroke-width="2.5"/>'
            )
            for v in (low, high):
                out.append(
                    f'<line x1="{cx - cap:.1f}" x2="{cx + cap:.1f}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                    f'stroke="{colour}" stroke-width="2.5"/>'
                )
        if med is not None:
            out.append(
                f'<rect x="{cx - 6:.1f}" y="{y(med) - 6:.1f}" width="12" height="12" fill="{colour}" '
                f'transform="rotate(45 {cx:.1f} {y(med):.1f})"><title>{escape(str(p.get("label")))}: '
                f"median {med:.2f} {escape(unit)}, 95% CI {low}..{high}, n={p.get('n')}</title></rect>"
            )
            mark = OUTCOME_MARK.get(str(p.get("outcome")))
            top = y(max(v for v in [high, med, *samples] if v is not None))
            text = mark or (f"{med:.1f}" if p.get("outcome") != "baseline" else "baseline")
            out.append(_t(cx, top - 10, text, 12, "middle", colour, "bold"))
        label = str(p.get("label", ""))
        if rotate:
            ly = f.height - f.bottom + 16
            out.append(
                _t(cx, ly, label[:28], 12, "end", "#111", "normal", f'transform="rotate(-35 {cx:.1f} {ly})"')
            )
        else:
            for k, line in enumerate(_wrap(label, max(8, int(slot / 7.5)))):
                out.append(_t(cx, f.height - f.bottom + 18 + 15 * k, line, 12))
    out.append(f'<line x1="{f.left}" x2="{f.left}" y1="{f.top}" y2="{f.top + f.plot_h}" stroke="#9ca3af"/>')
    out.append("</svg>")
    return "".join(out)


def share_colour(share: float | None, threshold: float | None) -> str:
    """Green at the ceiling, yellow at the threshold, red well below it; grey when not measured."""
    if share is None:
        return "#d1d5db"
    limit = threshold if threshold is not None else 0.9
    if share >= limit:
        frac = min(1.0, (share - limit) / max(1e-6, 1.0 - limit))
        hue = 75 + 55 * frac
        return f"hsl({hue:.0f},60%,{52 - 8 * frac:.0f}%)"
    frac = max(0.0, min(1.0, (limit - share) / 0.3))
    return f"hsl({40 - 40 * frac:.0f},80%,{58 - 10 * frac:.0f}%)"


def _heat_cell(
    at: tuple[float, float], cell: int, share: float | None, tip: str, threshold: float | None
) -> str:
    """One client-server cell: coloured by its share, outlined when below the threshold."""
    x, y = at
    fail = share is not None and threshold is not None and share < threshold
    rect = (
        f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
        f'fill="{share_colour(share, threshold)}" stroke="{"#7f1d1d" if fail else "#fff"}" '
        f'stroke-width="{2.5 if fail else 1}"><title>{escape(tip)}</title></rect>'
    )
    text = "\u2013" if share is None else f"{share * 100:.0f}%"
    size = 12 if cell < 44 else 13
    weight = "bold" if fail else "normal"
    return rect + _t(x + cell / 2, y + cell / 2 + 4, text, size, "middle", "#111", weight)


def _heat_legend(lx: float, top: float, threshold: float | None) -> list[str]:
    """The colour scale beside the matrix, marked at the threshold (90% when none is set)."""
    out = [_t(lx, top + 4, "share of the physical ceiling", 12, "start", "#374151")]
    limit = threshold if threshold is not None else 0.9
    stops = [
        (1.0, "100% (at the ceiling)"),
        (limit, f"{limit:.0%} (threshold)" if threshold is not None else f"{limit:.0%}"),
        (limit - 0.1, f"{limit - 0.1:.0%}"),
        (limit - 0.3, f"\u2264{limit - 0.3:.0%}"),
        (None, "not measured"),
    ]
    for k, (share, label) in enumerate(stops):
        yy = top + 16 + 24 * k
        out.append(
            f'<rect x="{lx}" y="{yy}" width="18" height="18" fill="{share_colour(share, threshold)}" '
            f'stroke="#9ca3af"/>'
        )
        out.append(_t(lx + 26, yy + 14, label, 12, "start"))
    return out


def _heat_axes(hosts: Sequence[str], left: int, top: int, cell: int) -> list[str]:
    """The axis titles (server across, client down) and each host's name on both axes."""
    mid = top + cell * len(hosts) / 2
    out = [
        _t(left + cell * len(hosts) / 2, 16, "server (listening end)", 13, "middle", "#374151"),
        _t(14, mid, "client", 13, "middle", "#374151", "normal", f'transform="rotate(-90 14 {mid:.1f})"'),
    ]
    for i, h in enumerate(hosts):
        cx = left + cell * (i + 0.5)
        out.append(
            _t(cx, top - 8, h, 12, "start", "#111", "normal", f'transform="rotate(-45 {cx:.1f} {top - 8})"')
        )
        out.append(_t(left - 8, top + cell * (i + 0.5) + 4, h, 12, "end"))
    return out


def heatmap(
    hosts: Sequence[str],
    cells: Mapping[tuple[str, str], tuple[float | None, str]],
    threshold: float | None,
    title: str,
) -> str:
    """Host by host: the share of the physical ceiling (cell text), coloured against the threshold."""
    n = len(hosts)
    if n == 0:
        return ""
    cell = max(34, min(64, 640 // n))
    left, top = 30 + 8 * max(len(h) for h in hosts), 40 + 8 * max(len(h) for h in hosts)
    width, height = left + cell * n + 230, top + cell * n + 20
    out = [_open(width, height, title), *_heat_axes(hosts, left, top, cell)]
    for r, client in enumerate(hosts):
        for c, server in enumerate(hosts):
            x, yy = left + cell * c, top + cell * r
            if client == server:
                out.append(f'<rect x="{x}" y="{yy}" width="{cell}" height="{cell}" fill="#f3f4f6" '
                           'stroke="#fff"/>')
                continue
            share, tip = cells.get((client, server), (None, "not measured"))
            out.append(_heat_cell((x, yy), cell, share, tip, threshold))
    out += _heat_legend(left + cell * n + 24, top, threshold)
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Bar:
    """One bar: a value, an optional lower marker and ceiling, the text above it."""

    label: str
    value: float
    low: float | None = None
    ceiling: float | None = None
    note: str = ""
    colour: str = "#1f6fb2"


@dataclass(frozen=True)
class Guide:
    """A horizontal line across a chart (a line rate, a reference), labelled at its right end."""

    value: float
    label: str
    colour: str = "#7c3aed"
    dash: str = "6 4"


def _guides(f: Frame, guides: Sequence[Guide], y: Callable[[float], float]) -> list[str]:
    """Each guide's line across the plot and its label in the right margin (a guide with an empty
    dash is a label only: a band's)."""
    out = []
    placed: list[float] = []
    for g in sorted(guides, key=lambda g: -g.value):
        yy = y(g.value)
        if g.dash:
            out.append(
                f'<line x1="{f.left}" x2="{f.width - f.right}" y1="{yy:.1f}" y2="{yy:.1f}" '
                f'stroke="{g.colour}" stroke-dasharray="{g.dash}" stroke-width="1.5"/>'
            )
        ty = yy + 4
        while any(abs(ty - p) < 14 for p in placed):  # labels of close lines stack, never overlap
            ty += 14
        placed.append(ty)
        # in the right margin, beside the plot: never over a bar or its figure
        text = f"{g.label} {g.value:.1f}" if g.dash else g.label
        out.append(_t(f.width - f.right + 6, ty, text, 12, "start", g.colour))
    return out


def band(f: Frame, low: float, high: float, y: Callable[[float], float], label: str) -> str:
    """A translucent horizontal band from ``low`` to ``high`` (a noise band)."""
    top, bottom = y(high), y(low)
    return (
        f'<rect x="{f.left}" y="{top:.1f}" width="{f.plot_w:.1f}" height="{max(bottom - top, 1.0):.1f}" '
        f'fill="#7c3aed" fill-opacity="0.13"><title>{escape(label)}</title></rect>'
    )


def bars(
    items: Sequence[Bar],
    unit: str,
    title: str,
    width: int = 960,
    height: int = 300,
    *,
    guides: Sequence[Guide] = (),
    noise: tuple[float, float, str] | None = None,
) -> str:
    """Vertical bars from zero with the ceiling as a dashed cap and the lowest value as a tick;
    ``guides`` are lines across the chart, ``noise`` a band ``(low, high, label)``."""
    if not items:
        return ""
    f = Frame(width, height, 72, 200 if guides else 24, 36, 56)
    top_value = max(
        [*(max(b.value, b.ceiling or 0.0, b.low or 0.0) for b in items), *(g.value for g in guides)]
    ) * 1.08 or 1.0
    ticks = nice_ticks(0.0, top_value)

    def y(v: float) -> float:
        return f.top + f.plot_h * (1 - v / ticks[-1])

    slot = f.plot_w / len(items)
    bw = min(90.0, slot * 0.55)
    out = [_open(width, height, title), *_axis(f, ticks, y, unit)]
    labels = list(guides)
    if noise is not None:
        out.append(band(f, noise[0], noise[1], y, noise[2]))
        labels.append(Guide((noise[0] + noise[1]) / 2, noise[2], "#7c3aed", ""))
    out += _guides(f, labels, y)
    for i, b in enumerate(items):
        cx = f.left + slot * (i + 0.5)
        out.append(
            f'<rect x="{cx - bw / 2:.1f}" y="{y(b.value):.1f}" width="{bw:.1f}" '
            f'height="{y(0) - y(b.value):.1f}" fill="{b.colour}" fill-opacity="0.85">'
            f"<title>{escape(b.label)}: {b.value:.2f} {escape(unit)}</title></rect>"
        )
        if b.ceiling:
            out.append(
                f'<line x1="{cx - bw / 2 - 6:.1f}" x2="{cx + bw / 2 + 6:.1f}" y1="{y(b.ceiling):.1f}" '
                f'y2="{y(b.ceiling):.1f}" stroke="#7c3aed" stroke-width="2" stroke-dasharray="5 3"/>'
            )
        if b.low is not None:
            out.append(
                f'<line x1="{cx - bw / 2:.1f}" x2="{cx + bw / 2:.1f}" y1="{y(b.low):.1f}" '
                f'y2="{y(b.low):.1f}" stroke="#111" stroke-width="3"/>'
            )
        top = y(max(b.value, b.ceiling or 0.0))
        out.append(_t(cx, top - 8, b.note or f"{b.value:.1f}", 12, "middle", "#111", "bold"))
        for k, line in enumerate(_wrap(b.label, max(10, int(slot / 7.5)), 2)):
            out.append(_t(cx, height - f.bottom + 18 + 15 * k, line, 12))
    out.append("</svg>")
    return "".join(out)


SOURCE_COLOURS = ("#6b7280", "#1f6fb2", "#1a8a3a", "#c2410c", "#7c3aed", "#0f766e", "#b45309", "#be185d")


def panel(
    title: str,
    rows: Sequence[tuple[str, Sequence[int | None]]],
    scales: Sequence[float],
    colours: Sequence[str],
    width: int = 300,
) -> str:
    """One small multiple: per row (a counter family) one bar per source, on the row's shared scale
    (``scales``, the same in every panel, so panels compare); None: the source has no figure."""
    bar_h, gap, label_w = 9, 10, 104
    height = 26 + sum(len(values) * bar_h + gap for _, values in rows)
    out = [_open(width, height, title), _t(6, 16, title, 13, "start", "#111", "bold")]
    yy = 26.0
    span = width - label_w - 84  # room for the longest figure after the bar (a 64-bit counter's delta)
    for (label, values), scale in zip(rows, scales, strict=True):
        out.append(f'<g aria-label="{escape(label)}">')
        out.append(_t(label_w - 6, yy + len(values) * bar_h / 2 + 4, label, 12, "end", "#374151"))
        for k, value in enumerate(values):
            if value is None:
                continue
            w = 0.0 if not scale else span * value / scale
            out.append(
                f'<rect x="{label_w}" y="{yy + k * bar_h:.1f}" width="{max(w, 1.0):.1f}" '
                f'height="{bar_h - 2}" fill="{colours[k % len(colours)]}"/>'
            )
            out.append(_t(label_w + max(w, 1.0) + 4, yy + k * bar_h + bar_h - 2, f"{value:,}", 10, "start"))
        out.append("</g>")
        yy += len(values) * bar_h + gap
    out.append("</svg>")
    return "".join(out)
