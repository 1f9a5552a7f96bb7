"""Ansible with and without the mitogen accelerator on fabtune's own playbooks, side by side.

On one 2-host testbed (the demo rack's shape, factory defaults), each round times, for each
strategy: reading the facts (``facts.yml``), a move applied with its revert armed (the MTU toggled,
the move's roles only, as the loop applies it), its confirm and its rollback. The strategies
alternate within each round, so machine load falls on both alike. mitogen is not a dependency of
fabtune: install it first (``pip install mitogen``); it is enabled as its documentation says, with
``ANSIBLE_STRATEGY_PLUGINS`` pointing at ``ansible_mitogen/plugins/strategy`` and
``ANSIBLE_STRATEGY=mitogen_linear``.

Usage (root): .venv/bin/python bench/accelerator.py [--rounds N]
Prints a Markdown table (medians, seconds) for docs/benchmarks.md, and every failure it met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from apply_cost import SPEC, one_move

from fabtune.inventory import read_inventory
from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec
from fabtune.tune.backend import AnsibleBackend

STEPS = ("facts", "armed apply", "confirm", "rollback apply")


def mitogen_env() -> dict[str, str]:
    import ansible_mitogen

    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def one_round(backend: AnsibleBackend, run_id: str, env: dict[str, str]) -> dict[str, float]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        start = time.monotonic()
        backend.facts()
        times = {"facts": time.monotonic() - start}
        times.update(one_move(backend, run_id, scoped=True))
        return times
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-"))
    spec = build_spec({**SPEC, "name": "bacc", "subnet_base": "10.228"})
    build.up(spec)
    runs: dict[str, list[dict[str, float]]] = {"default": [], "mitogen": []}
    failures: list[str] = []
    try:
        backend = AnsibleBackend(read_inventory(layout.testbed_dir(spec.name) / "inventory.yml"), 300)
        for n in range(args.rounds):
            for which, env in (("default", {}), ("mitogen", mitogen_env())):
                try:
                    runs[which].append(one_round(backend, f"bench-{which}-{n}", env))
                except Exception as err:  # report it: a failure is the evaluation's answer too
                    failures.append(f"round {n} {which}: {type(err).__name__}: {str(err)[:400]}")
    finally:
        build.down(spec.name)
    print(f"| step (median of {args.rounds}, s) | default (linear) | mitogen_linear | ratio |")
    print("|---|---|---|---|")
    for step in STEPS:
        old = [r[step] for r in runs["default"]]
        new = [r[step] for r in runs["mitogen"]]
        if old and new:
            a, b = statistics.median(old), statistics.median(new)
            print(f"| {step} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    for line in failures:
        print(f"- failed: {line}")


if __name__ == "__main__":
    main()
