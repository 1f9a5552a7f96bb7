"""The short Markdown summary, for tickets and reviews."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fabtune.report.build import LOSSLESS_CHECK, SLOW_PORT_CHECK, move_label

MAX_ROWS = 12


def _cell(value: Any) -> str:
    text = (
        "-"
        if value is None
        else json.dumps(value, sort_keys=True)
        if isinstance(value, (dict, list))
        else str(value)
    )
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n_... {len(rows) - MAX_ROWS} more in the HTML report._")
    return lines


def _ci(d: Mapping[str, Any] | None) -> str:
    if not d or d.get("ratio") is None:
        return "-"
    low, high = d.get("ci_low"), d.get("ci_high")
    interval = f" (CI {low - 1:+.1%}..{high - 1:+.1%})" if low is not None and high is not None else ""
    return f"{d['ratio'] - 1:+.1%}{interval}"


def _tune_lines(doc: Mapping[str, Any]) -> list[str]:
    """The noise floor, the share of the model's best, the tuned state and the decisions table."""
    t = doc["tune"]
    lines = [f"- noise floor {t['noise_floor']:.1%}" if t["noise_floor"] is not None else "- noise floor -"]
    if doc["oracle"] and doc["oracle"].get("share_of_best") is not None:
        best, final = doc["oracle"].get("best_busbw"), t["final_median"]
        measured = f" (measured median {final / best:.1%} of it)" if best and final else ""
        lines.append(
            f"- reaches {doc['oracle']['share_of_best']:.1%} of the model's best reachable busbw "
            f"in the model{measured}"
        )
    if t["tuned_desired"]:
        lines.append(f"- tuned desired state: `{t['tuned_desired']}`")
    if t.get("lossless"):
        lines.append(f"- lossless class: {t['lossless']['says']}")
    for c in doc["checks"]:
        if c["check"] in ("ib_write_bw pair (rdma_cm)", SLOW_PORT_CHECK, LOSSLESS_CHECK):
            lines.append(f"- {c['phase']}: {c['summary']}")
        if c["check"] == SLOW_PORT_CHECK:  # its slow pairs under it
            lines += [f"  - slow pair: {line}" for line in c["evidence"].splitlines()]
    rows = [
        [move_label(d, doc["hosts"]), d["outcome"].replace("_", " "), _ci(d["all_reduce"]),
         _ci(d["alltoall"]), d["reason"]]
        for d in t["decisions"]
    ]
    return [*lines, "", *_table(["move", "outcome", "all_reduce", "alltoall", "reason"], rows)]


def _bootstrap_lines(doc: Mapping[str, Any]) -> list[str]:
    """busbw against its reference, the pair matrix's lowest share, the changes, the failed checks."""
    b, lines = doc["bootstrap"], []
    if b["busbw_gbytes"] is not None and b["busbw_reference_gbytes"]:
        lines.append(
            f"- all_reduce busbw {b['busbw_gbytes']:.1f} GB/s per GPU = "
            f"{b['busbw_gbytes'] / b['busbw_reference_gbytes']:.0%} of "
            f"{b['busbw_reference_gbytes']:.1f} (threshold {b['busbw_threshold'] or 0:.0%})"
            + (f"; line rate {line:.1f}" if (line := b.get("busbw_line_rate_gbytes")) else "")
        )
    matrix = [p for p in doc["pairs"]["results"] if not p["retest"]]
    if matrix:
        low = min((p["share"] for p in matrix if p["share"] is not None), default=None)
        lines.append(
            f"- {len(matrix)} pair runs, lowest {low:.0%} of the ceiling" if low is not None
            else f"- {len(matrix)} pair runs"
        )
    lines.append(f"- {sum(b['changes'].values())} knob(s) changed by the baseline profile")
    fails = [[c["host"], c["check"], c["summary"], c["evidence"]]
             for c in doc["checks"] if c["verdict"] == "fail"]
    if fails:
        lines += ["", *_table(["host", "check", "summary", "evidence"], fails)]
    return lines


def _drift_lines(doc: Mapping[str, Any]) -> list[str]:
    """The desired state's source, the remediation's bandwidth, hosts not checked, the drifted knobs."""
    d = doc["drift"]
    lines = [f"- desired state: {d['source']}"]
    rem = d["remediation"]
    for phase in ("before", "after") if rem is not None else ():
        bw = rem[phase]
        if bw:
            busbw = "-" if bw["busbw_gbytes"] is None else f"{bw['busbw_gbytes']:.2f} GB/s"
            lines.append(
                f"- bandwidth {phase} remediation: ib_write_bw mean "
                f"{bw['pair_mean_gbps'] or 0:.1f} Gb/s, all_reduce busbw {busbw}"
            )
    if rem is not None and rem["reasons"]:
        lines.append("- rolled back: " + "; ".join(rem["reasons"]))
    lines += [f"- {host} not checked: {why}" for host, why in sorted(d["failed"].items())]
    if d["items"]:
        rows = [[i["host"], i["knob"], i["expected"], i["found"]] for i in d["items"]]
        lines += ["", *_table(["host", "knob", "expected", "found"], rows)]
    return lines


SECTIONS = {"tune": _tune_lines, "bootstrap": _bootstrap_lines, "drift": _drift_lines}


def render_markdown(doc: Mapping[str, Any], html_path: str | None = None) -> str:
    """A few lines and one table: what ran, the verdict, what changed, what failed."""
    run, kind = doc["run"], doc["kind"]
    lines = [
        f"**fabtune {kind}** `{run['id']}` on `{run['fabric']}` ({len(doc['hosts'])} hosts): "
        f"**{doc['status'].upper()}** \u2014 {doc['headline']}",
        "",
    ]
    duration = "-" if run["duration_s"] is None else f"{run['duration_s']:.0f} s"
    lines.append(f"- started {run['started'] or '-'}, took {duration}, state `{run['state']}`")
    if doc.get("job") and doc["job"]["summary"]:
        lines.append(f"- {doc['job']['summary']}")
    lines += SECTIONS.get(kind, _drift_lines)(doc)
    if html_path:
        lines += ["", f"Full report: `{html_path}`"]
    return "\n".join(lines) + "\n"
