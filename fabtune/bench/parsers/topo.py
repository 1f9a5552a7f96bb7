"""Parse ``nvidia-smi topo -m``: the GPU/NIC distance matrix and the NIC legend.

Layout (formats.md §8): a header row of column labels (``GPU0 .. GPUn``, ``NIC0 .. NICm`` or, in
older drivers, ``mlx5_0 ..``, then ``CPU Affinity``, ``NUMA Affinity`` and, in newer drivers,
``GPU NUMA ID``), one row per GPU then per NIC with cells ``X``, ``NV#``, ``PIX``, ``PXB``,
``PHB``, ``NODE``, ``SYS``; NIC rows leave the affinity columns empty. Columns are TAB separated
by the tool, space separated in many copies; both are handled by whitespace splitting because no
cell contains a space. A ``Legend:`` and a ``NIC Legend:`` (``  NIC0: mlx5_0``) follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.bench.parsers._common import content_lines, fail

TOOL = "topo"

# Device column labels: GPUn, NICn, or an RDMA device name in older drivers (mlx5_0).
_DEVICE_LABEL_RE = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+)$")
# Affinity column labels, in the order nvidia-smi prints them.
_AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_RE = re.compile(r"^\s*GPU0\b.*$")
# Cell values: X (self), NV# (bonded NVLinks), PIX, PXB, PHB, NODE, SYS.
_CELL_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
# "  NIC0: mlx5_0"
_NIC_LEGEND_RE = re.compile(r"^\s*(?P<nic>NIC\d+):\s*(?P<device>\S+)\s*$")
_LEGEND_RE = re.compile(r"^\s*(?:NIC )?Legend:\s*$")


@dataclass(frozen=True)
class TopoMatrix:
    """The ``nvidia-smi topo -m`` matrix.

    ``cells[row][column]`` is the printed distance; ``cpu_affinity``/``numa_affinity``/
    ``gpu_numa_id`` are keyed by GPU label; ``nic_names`` maps ``NICk`` to ``mlx5_k``.
    """

    columns: tuple[str, ...]
    cells: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPU column labels (``GPU0`` ...)."""
        return tuple(c for c in self.columns if c.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        """NIC column labels (``NIC0`` ... or ``mlx5_0`` ...)."""
        return tuple(c for c in self.columns if not c.startswith("GPU"))

    def distance(self, gpu: str | int, nic: str | int) -> str:
        """Return the printed distance between a GPU and a NIC (or any two columns).

        Args:
            gpu: ``"GPU3"`` or ``3``.
            nic: ``"NIC2"``, ``2`` (meaning ``NIC2``) or an RDMA device name from the NIC legend
                (``"mlx5_2"``). Another ``GPUn`` label is accepted too.

        Returns:
            ``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE`` or ``SYS``.

        Raises:
            KeyError: if either label is not in the matrix (or its rows were not captured).
        """
        row = gpu if isinstance(gpu, str) else f"GPU{gpu}"
        column = self._column(nic)
        if row in self.cells and column in self.cells[row]:
            return self.cells[row][column]
        if column in self.cells and row in self.cells[column]:
            return self.cells[column][row]
        raise KeyError(f"no topology entry for {row} / {column}")

    def nic_device(self, nic: str) -> str:
        """Return the RDMA device name of a NIC column (``NIC0`` -> ``mlx5_0``).

        Args:
            nic: A NIC column label.

        Returns:
            The device name from the NIC legend, or the label itself for ``mlx5_*`` columns.

        Raises:
            KeyError: if the legend does not name the NIC.
        """
        if nic in self.nic_names:
            return self.nic_names[nic]
        if _DEVICE_LABEL_RE.match(nic) and not nic.startswith(("GPU", "NIC")):
            return nic
        raise KeyError(f"{nic} is not in the NIC Legend")

    def _column(self, nic: str | int) -> str:
        if isinstance(nic, int):
            return f"NIC{nic}"
        if nic in self.columns:
            return nic
        for label, device in self.nic_names.items():
            if device == nic:
                return label
        raise KeyError(f"{nic} is neither a matrix column nor in the NIC Legend")


def parse(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output.

    Args:
        text: The tool's stdout (a shell prompt line before the header is ignored).

    Returns:
        The matrix.

    Raises:
        ParseError: without a header row, without rows, or on a short or unknown cell.
    """
    lines = content_lines(text)
    start = next((i for i, line in enumerate(lines) if _HEADER_RE.match(line)), None)
    if start is None:
        fail(TOOL, "no matrix header found (expected a line of column labels starting 'GPU0')")
    columns, affinity = _header(lines[start])
    cells: dict[str, dict[str, str]] = {}
    extras: dict[str, dict[str, str]] = {label: {} for label in affinity}
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip() or _LEGEND_RE.match(line):
            break
        _row(line, number, columns, affinity, cells=cells, extras=extras)
    if not cells:
        fail(TOOL, "matrix has a header but no rows (expected lines starting 'GPU0')")
    return TopoMatrix(
        columns=columns,
        cells=cells,
        cpu_affinity=extras.get("CPU Affinity", {}),
        numa_affinity=extras.get("NUMA Affinity", {}),
        gpu_numa_id=extras.get("GPU NUMA ID", {}),
        nic_names=_nic_legend(lines[start:]),
    )


def _header(line: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    text = line
    affinity = tuple(label for label in _AFFINITY_LABELS if label in text)
    for label in affinity:
        text = text.replace(label, " ")
    columns = tuple(text.split())
    bad = [c for c in columns if not _DEVICE_LABEL_RE.match(c)]
    if bad:
        fail(TOOL, f"unknown column label(s) {', '.join(bad)} in header {line.strip()!r}")
    return columns, affinity


def _row(
    line: str,
    number: int,
    columns: tuple[str, ...],
    affinity: tuple[str, ...],
    *,
    cells: dict[str, dict[str, str]],
    extras: dict[str, dict[str, str]],
) -> None:
    tokens = line.split()
    label, values = tokens[0], tokens[1:]
    if label not in columns or len(values) < len(columns):
        fail(
            TOOL,
            f"line {number}: expected a row label from the header and {len(columns)} cells, "
            f"got {line.strip()!r}",
        )
    bad = [v for v in values[: len(columns)] if not _CELL_RE.match(v)]
    if bad:
        fail(TOOL, f"line {number}: unknown distance(s) {', '.join(bad)}")
    cells[label] = dict(zip(columns, values[: len(columns)], strict=True))
    for name, value in zip(affinity, values[len(columns) :], strict=False):
        extras[name][label] = value


def _nic_legend(lines: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in lines:
        match = _NIC_LEGEND_RE.match(line)
        if match:
            names[match["nic"]] = match["device"]
    return names
