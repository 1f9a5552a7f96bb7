"""The self-contained HTML report: inline CSS and inline SVG charts, no scripts, no external URLs.

The page is rendered from the jinja2 templates in ``templates/`` (package data: ``report.html.j2``,
its ``sections.html.j2`` and ``macros.html.j2``, the style sheet ``report.css``), autoescaped. This
module turns the report document into views of plain texts and numbers as the page shows them; the
templates write the markup and escape every journal-derived string (host names, keys, reasons). The
SVG figures are built by ``svg.py``, which escapes each text it draws, and enter the page as Markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from markupsafe import Markup

from fabtune.report import svg
from fabtune.report.build import NOISE_BAND, RULE_OF_THUMB, deciding_metric, move_label, noise_band

View = dict[str, Any]

_LOADER = jinja2.PackageLoader("fabtune.report", "templates")
# Sections are written as lines of markup joined by the tags' whitespace control (trim_blocks,
# lstrip_blocks, ``{%-``): the page carries no line breaks the templates do not write on purpose.
ENV = jinja2.Environment(
    loader=_LOADER,
    autoescape=jinja2.select_autoescape(default_for_string=True, default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
# The report's style sheet, also the advisor's page's (fabtune/advise/html.py).
CSS = "\n" + _LOADER.get_source(ENV, "report.css")[0]


def _figure(markup: str) -> Markup:
    """An SVG figure of svg.py, which escapes every text it draws: inserted as it is."""
    return Markup(markup)  # noqa: S704 - built from escaped parts (svg.py)


def _v(value: Any) -> str:
    if value is None:
        return "\u2013"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _num(value: Any, fmt: str = "{:.1f}", none: str = "\u2013") -> str:
    return none if value is None else fmt.format(value)


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



def _step_bar(p: Mapping[str, Any], ref: float | None) -> svg.Bar:
    """One step's single figure as a bar, labelled with its share of the reference."""
    if p["median"] is None:
        text = "not measured"
    else:
        text = f"{p['median']:.1f}" + (f" = {p['median'] / ref:.0%} of {ref:.1f}" if ref else "")
    colour = svg.OUTCOME_COLOUR.get(p["outcome"], "#1f6fb2")
    return svg.Bar(p["label"], p["median"] or 0.0, None, ref, text, colour)


def _metric(metric: Mapping[str, Any]) -> View:
    """One metric's chart: bars when every step has one figure (they read better than a CI plot)."""
    view: View = {"name": metric["name"], "unit": metric["unit"], "guard": metric["role"] == "guard",
                  "bars": False, "dashed": None}
    if not all(p["n"] <= 1 for p in metric["series"]):
        return view | {"chart": _figure(svg.step_chart(metric))}
    ref = metric["reference"]
    items = [_step_bar(p, ref) for p in metric["series"]]
    chart = svg.bars(items, metric["unit"], metric["name"], height=260)
    dashed = {"label": metric["reference_label"] or "reference", "value": f"{ref:.1f}"} if ref else None
    return view | {"chart": _figure(chart), "bars": True, "dashed": dashed}


def _bandwidth(doc: Mapping[str, Any]) -> View:
    """The metrics' charts, and the legend of the step charts (none for a lone bar chart)."""
    metrics = [_metric(m) for m in doc["bandwidth"]]
    legend = None
    if metrics and (not any(m["bars"] for m in metrics) or len(metrics) > 1):
        banded = next((m for m in doc["bandwidth"] if m.get("reference_band")), None)
        shade = None
        if banded:
            shade = {"label": banded["reference_label"] or "reference", "band": f"{NOISE_BAND:g}"}
        legend = {"marks": doc["kind"] == "tune", "shade": shade}
    return {"metrics": metrics, "legend": legend}


def _ci(d: Mapping[str, Any] | None) -> str:
    """A metric's change against the reference with its 95% interval: ``+1.2% [-0.4%, +2.9%]``."""
    if not d or d["ratio"] is None:
        return "\u2013"
    low, high = d["ci_low"], d["ci_high"]
    interval = f" [{low - 1:+.1%}, {high - 1:+.1%}]" if low is not None and high is not None else ""
    return f"{d['ratio'] - 1:+.1%}{interval}"


def _decision(d: Mapping[str, Any], hosts: Sequence[str]) -> View:
    cited = d[deciding_metric(d["reason"])]
    p = None if d["reason"].startswith("guard: pause") or not cited else cited["p"]
    return {
        "move": move_label(d, hosts), "knobs": d["knobs"], "outcome": d["outcome"].replace("_", " "),
        "outcome_class": f"o-{d['outcome']}", "all_reduce": _ci(d["all_reduce"]),
        "alltoall": _ci(d["alltoall"]),
        "p": _num(p, "{:.3g}"), "runs": d["runs"], "pause_frames": _num(d["pause_frames"], "{:d}"),
        "reason": d["reason"],
    }


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



def _pair_map(pairs: Mapping[str, Any], source: str, hosts: Sequence[str]) -> View:
    """One round's heatmap (re-tests left out) with its caption."""
    mine = [p for p in pairs["results"] if p["source"] == source and not p["retest"]]
    chart = svg.heatmap(hosts, _cells(mine), pairs["threshold"], f"pair heatmap ({source})")
    title = SOURCE_TITLES.get(source, source)
    return {"title": title, "summary": _share_summary(mine), "chart": _figure(chart)}


def _odd_pair(p: Mapping[str, Any]) -> View:
    return {
        "pair": f"{p['client']} \u2192 {p['server']}", "device": p["device"], "gbps": _num(p["gbps"]),
        "ceiling": _num(p["ceiling_gbps"]), "share": _num(p["share"], "{:.0%}"),
        "verdict": _v(p["verdict"]),
        "verdict_class": f"v-{p['verdict']}", "note": p["note"] or (p["error"] or ""),
    }


def _pairs(doc: Mapping[str, Any]) -> View:
    """The heatmaps per round, and the pairs that failed, erred or were re-tested."""
    pairs = doc["pairs"]
    shown = [p for p in pairs["results"] if p["source"] == pairs["source"]]
    if not shown:
        empty = "No pair was measured." if doc["kind"] != "tune" else (
            "This run measured no host pairs (fabtune_tune.pair_matrix: off, or a run from before "
            "tuning runs measured them)."
        )
        return {"empty": empty}
    sources = list(dict.fromkeys(p["source"] for p in pairs["results"] if not p["retest"]))
    hosts = sorted({h for p in pairs["results"] for h in (p["server"], p["client"])})
    retests = [p for p in pairs["results"] if p["retest"]]
    odd = [p for p in shown if p["verdict"] == "fail" or p["error"]] + retests
    return {
        "empty": None, "maps": [_pair_map(pairs, src, hosts) for src in sources],
        "rails": len({p["rail"] for p in shown}), "rounds": len(sources),
        "threshold": f"{pairs['threshold']:.0%}" if pairs["threshold"] else None,
        "odd": [_odd_pair(p) for p in odd],
    }


def _gpus(doc: Mapping[str, Any]) -> View:
    """The busbw figure of a tune or bootstrap, then the rails' pair bandwidth; a tune says when it
    has no busbw figure, the others when they have no figure at all."""
    kind, rails = doc["kind"], _rails(doc)
    busbw = None
    if kind in ("tune", "bootstrap"):
        busbw = _tune_busbw(doc) if kind == "tune" else _bootstrap_busbw(doc["bootstrap"])
    empty = None
    if kind == "tune" and not busbw:
        empty = "No per-GPU figure."
    elif kind != "tune" and not busbw and not rails:
        empty = "No per-GPU figure in this run."
    return {"figures": [busbw] if busbw else [], "empty": empty, "rails": rails}


def _rail_bar(g: Mapping[str, Any], threshold: float | None) -> svg.Bar:
    return svg.Bar(
        f"{g['gpu']} \u00b7 {g['device']}",
        g["mean_gbps"],
        g["min_gbps"],
        g["ceiling_gbps"],
        f"{g['share_mean']:.0%} (min {g['share_min']:.0%})" if g["share_mean"] is not None
        else f"{g['mean_gbps']:.1f}",
        "#1a8a3a" if (g["share_min"] or 0) >= (threshold or 0.9) else "#c2410c",
    )


def _rails(doc: Mapping[str, Any]) -> View | None:
    """Per GPU's rail: the mean and lowest pair bandwidth against the ceiling (None without pairs)."""
    if not doc["gpus"]:
        return None
    items = [_rail_bar(g, doc["pairs"]["threshold"]) for g in doc["gpus"]]
    chart = svg.bars(items, "ib_write_bw Gb/s", "per-GPU bandwidth")
    return {"chart": _figure(chart), "source": SOURCE_TITLES.get(doc["pairs"]["source"], "")}


def _tune_guides(ref: Mapping[str, Any] | None) -> list[svg.Guide]:
    if not ref:
        return []
    return [
        svg.Guide(ref["line_rate_gbytes"], "line rate R x rate / 8", "#374151", "2 3"),
        svg.Guide(ref["rule_of_thumb_gbytes"], f"rule of thumb {ref['rule_of_thumb']:.0%}", "#0f766e"),
    ]


def _tune_busbw(doc: Mapping[str, Any]) -> View | None:
    """busbw per GPU before and after against the line rate, the reference, the rule of thumb and
    the model's best reachable with its noise band (None without a figure)."""
    t = doc["tune"]
    items = [svg.Bar("baseline", t["baseline_median"], colour="#1f6fb2")] if t["baseline_median"] else []
    if t["final_median"]:
        items.append(svg.Bar("tuned", t["final_median"], colour="#1a8a3a"))
    best = (doc["oracle"] or {}).get("best_busbw")
    band = noise_band(float(best), t["noise_floor"]) if best else None
    if best:
        items.append(svg.Bar("model's best reachable", float(best), colour="#7c3aed"))
    if not items:
        return None
    ref = t.get("busbw_reference")
    noise = (band[0], band[1], "noise band of the model's best") if band else None
    chart = svg.bars(items, "all_reduce busbw GB/s per GPU", "busbw per GPU", height=300,
                     guides=_tune_guides(ref), noise=noise)
    notes = ["NCCL bus bandwidth is per GPU (rank): the medians of the baseline and of the tuned rack."]
    if ref:
        notes.append(_yardsticks(ref, t["final_median"]))
    if best and t["final_median"]:
        notes.append(_against_best(t["final_median"], float(best), band, t["noise_floor"]))
        model = (doc["oracle"] or {}).get("share_of_best")
        if model is not None:
            notes.append(f"The model itself puts the tuned rack at {model:.1%} of its best.")
    return {"chart": _figure(chart), "note": " ".join(notes)}


def _bootstrap_busbw(b: Mapping[str, Any]) -> View | None:
    """The acceptance busbw per GPU against the line rate, the reference, the rule of thumb and the
    threshold (None without a measurement)."""
    busbw, ref, line = b["busbw_gbytes"], b["busbw_reference_gbytes"], b.get("busbw_line_rate_gbytes")
    if busbw is None or not ref:
        return None
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
    return {"chart": _figure(chart), "note": note}


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



def _small_multiples(doc: Mapping[str, Any]) -> View:
    """One panel per host port: each family's deltas per source, one scale per family for all (no
    panels when no port counted a family)."""
    grid = counter_grid(doc["counters"])
    if not grid:
        return {"legend": [], "panels": [], "missing": []}
    sources = list(dict.fromkeys(c["source"] for c in doc["counters"] if c["host"] != "*"))
    families = [f for f, _ in COUNTER_FAMILIES if any(f in cell for cell in grid.values())]
    scales = [max(v for cell in grid.values() for v in cell.get(f, {}).values()) for f in families]
    colours = svg.SOURCE_COLOURS
    panels = [
        _figure(svg.panel(
            f"{host} \u00b7 {port}",
            [(f, [cell.get(f, {}).get(src, 0) for src in sources]) for f in families],
            scales,
            colours,
        ))
        for (host, port), cell in sorted(grid.items())
    ]
    legend = [{"colour": colours[k % len(colours)], "source": src} for k, src in enumerate(sources)]
    missing = [f for f, _ in COUNTER_FAMILIES if f not in families]
    return {"legend": legend, "panels": panels, "missing": missing}


def _counters(doc: Mapping[str, Any]) -> View:
    """Every counter delta (with a bar against the largest), and the small multiples per port."""
    counters = doc["counters"]
    top = max((abs(c["delta"]) for c in counters), default=0) or 1
    rows = [
        {"source": c["source"], "host": c["host"], "port": c["port"], "counter": c["counter"],
         "width": max(2, 260 * abs(c["delta"]) // top), "delta": f"{c['delta']:,}"}
        for c in counters
    ]
    return {"rows": rows, **_small_multiples(doc)}


def _checks(doc: Mapping[str, Any]) -> View:
    """The checks, failures first, and the count per verdict."""
    checks = doc["checks"]
    order = {"fail": 0, "warn": 1, "pass": 2}
    rows = [
        {"phase": c["phase"], "check": c["check"], "host": c["host"], "verdict": c["verdict"],
         "summary": c["summary"], "evidence": c["evidence"] or ""}
        for c in sorted(checks, key=lambda c: order.get(c["verdict"], 3))
    ]
    counts = {v: sum(1 for c in checks if c["verdict"] == v) for v in ("pass", "warn", "fail")}
    return {"rows": rows, "counts": counts}


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



def _value(value: Any) -> str | list[tuple[str, str]] | None:
    """A setting's value for the page: None (not set), a text, or a map's changed entries
    (``26 \u2192 3``)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return [(str(k), _v(v)) for k, v in value.items()] if value else "{}"
    return _v(value)


def _where(places: Mapping[str, set[str | None]], every: Sequence[str]) -> str:
    """Hosts (and their NICs) one change was made on: ``all 4 hosts \u00b7 eth2, eth3`` when alike."""
    hosts = sorted(places)
    nic_sets = {frozenset(n for n in nics if n) for nics in places.values()}
    if len(nic_sets) == 1:
        nics = sorted(next(iter(nic_sets)))
        label = _hosts_label(hosts, every) if len(hosts) > 1 else hosts[0]
        return label + (f" \u00b7 {', '.join(nics)}" if nics else "")
    return "; ".join(f"{h} \u00b7 {', '.join(sorted(n for n in places[h] if n))}" for h in hosts)


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



def _settings_rows(settings: Sequence[Mapping[str, Any]], every: Sequence[str]) -> list[View]:
    return [
        {"knob": name, "before": _value(before), "after": _value(after), "where": _where(places, every),
         "outcome": outcome.replace("_", " "), "outcome_class": "o-" + outcome.replace(" ", "_")}
        for name, before, after, outcome, places in settings_groups(settings)
    ]


def _settings(doc: Mapping[str, Any]) -> list[View]:
    """One table per change (in the order made): the whole run's or a lone change open, the others
    folded."""
    settings = doc["settings"]
    order = list(dict.fromkeys(s["change"] for s in settings))
    out = []
    for change in order:
        mine = [s for s in settings if s["change"] == change]
        is_open = change == "whole run" or len(order) == 1
        title = {"whole run": "In effect after the run (before \u2192 after)"}.get(change, change)
        out.append({"open": is_open, "title": title if is_open else change,
                    "outcome": mine[0]["outcome"].replace("_", " "),
                    "groups": _settings_rows(mine, doc["hosts"])})
    return out


def _job(job: Mapping[str, Any]) -> View:
    """The job's predicted step at the target size, one row per measured state, and its verdict."""
    gated = job["min_mfu"] is not None
    rows = [
        {"state": p["state"], "option": p["option"], "gbytes": _num(p["per_gpu_gbytes"]),
         "mfu": _num(p["mfu"], "{:.1%}"),
         "mfu_class": ("v-pass" if p["passed"] else "v-fail") if gated else "",
         "step": _num(p["step_s"], "{:.3f}"),
         "shares": [_num(p["shares"].get(k), "{:.0%}") for k in ("compute", "bubble", "fabric", "nvlink")]}
        for p in job["predictions"]
    ]
    return {"summary": job["summary"], "rows": rows, "name": job["name"], "nodes": job["nodes"],
            "min_mfu": f"{job['min_mfu']:.0%}" if gated else None}


def _meta(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
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
    return [(k, str(v)) for k, v in rows]


def _rolled_back(doc: Mapping[str, Any]) -> list[str]:
    """Why a drift remediation was rolled back (empty for anything else)."""
    rem = doc["drift"]["remediation"] if doc["kind"] == "drift" else None
    return list(rem["reasons"]) if rem is not None and rem["reasons"] else []


def render_html(doc: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    kind = doc["kind"]
    return ENV.get_template("report.html.j2").render(
        kind=kind, status=doc["status"], run=doc["run"], headline=doc["headline"], meta=_meta(doc),
        cards=_cards(doc), bandwidth=_bandwidth(doc),
        decisions=[_decision(d, doc["hosts"]) for d in doc["tune"]["decisions"]] if kind == "tune" else None,
        rolled_back=_rolled_back(doc), pairs=_pairs(doc), gpus=_gpus(doc),
        job=_job(doc["job"]) if doc.get("job") else None, counters=_counters(doc), checks=_checks(doc),
        settings=_settings(doc), schema=doc["schema"], schema_version=doc["schema_version"],
    )
