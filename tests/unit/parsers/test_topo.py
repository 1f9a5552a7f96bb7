"""nvidia-smi topo -m parser: every nvidia-smi fixture, values read off the samples by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import topo

Loader = Callable[[str], str]


def test_nv8_9nic_partial(sample: Loader) -> None:
    matrix = topo.parse(sample("nvidia-smi__topo_m_8gpu_NV8_9nic_partial__nccl-issue933.txt"))
    assert len(matrix.gpus) == 8
    assert matrix.nics == tuple(f"NIC{i}" for i in range(9))
    assert list(matrix.cells) == [f"GPU{i}" for i in range(7)]
    assert matrix.distance(0, 2) == "PIX"
    assert matrix.distance("GPU4", "NIC1") == "PIX"
    assert matrix.distance(6, 5) == "PIX"
    assert matrix.distance(0, 1) == "SYS"
    assert matrix.distance(0, 0) == "NODE"
    assert matrix.distance("GPU0", "GPU1") == "NV8"
    assert matrix.cpu_affinity["GPU4"] == "48-95,144-191"
    assert matrix.numa_affinity["GPU4"] == "1"
    assert matrix.gpu_numa_id == {}
    with pytest.raises(KeyError):
        matrix.distance(7, 0)  # the GPU7 row was not captured


def test_pcie_no_nvlink_10nic(sample: Loader) -> None:
    matrix = topo.parse(
        sample("nvidia-smi__topo_m_8gpu_pcie_no_nvlink_10nic_partial__deepep-issue128.txt")
    )
    assert len(matrix.nics) == 10
    assert matrix.distance(0, 0) == "PIX"
    assert matrix.distance(5, 5) == "PIX"
    assert matrix.distance(5, 9) == "SYS"
    assert matrix.distance("GPU0", "GPU1") == "SYS"
    assert matrix.cpu_affinity["GPU4"] == "56-111,168-223"
    assert matrix.gpu_numa_id["GPU0"] == "N/A"


def test_18nic_pxb_after_prompt(sample: Loader) -> None:
    matrix = topo.parse(sample("nvidia-smi__topo_m_8xH100_18nic_pxb_partial__deepep-issue145.txt"))
    assert len(matrix.columns) == 26
    assert [matrix.distance(0, n) for n in range(4)] == ["PXB"] * 4
    assert matrix.distance(0, 4) == "NODE"
    assert matrix.distance(0, 10) == "SYS"
    assert matrix.distance(2, 6) == "PXB"
    assert matrix.distance(3, 17) == "SYS"
    assert matrix.distance("GPU1", "GPU0") == "NV18"
    assert matrix.numa_affinity["GPU3"] == "0"


def test_6nic_partial(sample: Loader) -> None:
    matrix = topo.parse(sample("nvidia-smi__topo_m_8xH100_6nic_partial__nccl-issue1591.txt"))
    assert matrix.distance(0, 0) == "PIX"
    assert matrix.distance(2, 1) == "PIX"
    assert matrix.distance(1, 0) == "NODE"
    assert matrix.distance(0, 4) == "SYS"
    assert matrix.cpu_affinity["GPU2"] == "0-31,64-95"


def test_8nic_full_with_legend(sample: Loader) -> None:
    matrix = topo.parse(
        sample("nvidia-smi__topo_m_8xH100_8nic_full_with_legend__sglang-issue30401.txt")
    )
    assert matrix.nic_names["NIC3"] == "mlx5_3"
    assert len(matrix.nic_names) == 8
    assert all(matrix.distance(k, k) == "PIX" for k in range(8))
    assert matrix.distance(5, "mlx5_5") == "PIX"
    assert matrix.distance("GPU4", "mlx5_0") == "SYS"
    assert matrix.distance(1, 0) == "NODE"
    assert matrix.cells["NIC1"]["NIC0"] == "NODE"
    assert matrix.cells["NIC7"]["NIC7"] == "X"
    assert matrix.nic_device("NIC7") == "mlx5_7"
    assert "NIC0" not in matrix.cpu_affinity
    assert matrix.cpu_affinity["GPU7"] == "48-95,144-191"
    with pytest.raises(KeyError):
        matrix.distance(0, "mlx5_9")


def test_no_nic(sample: Loader) -> None:
    matrix = topo.parse(sample("nvidia-smi__topo_m_8xH100_no_nic__ml-engineering.txt"))
    assert matrix.nics == ()
    assert matrix.distance("GPU0", "GPU7") == "NV18"
    assert matrix.distance("GPU3", "GPU3") == "X"
    assert matrix.numa_affinity["GPU4"] == "1"
    assert matrix.cpu_affinity["GPU7"] == "52-103,156-207"


def test_tabs_10nic(sample: Loader) -> None:
    matrix = topo.parse(sample("nvidia-smi__topo_m_hgx_h100_10nic_tabs_partial__nccl-issue1264.txt"))
    assert matrix.distance(3, 5) == "PIX"
    assert matrix.distance(4, 6) == "PIX"
    assert matrix.distance(7, 9) == "PIX"
    assert matrix.distance(3, 4) == "SYS"
    assert matrix.cells["NIC2"]["GPU2"] == "PIX"
    assert matrix.cells["NIC0"]["NIC0"] == "X"
    assert matrix.gpu_numa_id["GPU7"] == "N/A"
    assert matrix.numa_affinity["GPU4"] == "1"
    assert matrix.cpu_affinity["GPU0"] == "0-55,112-167"


def test_old_mlx5_column_labels() -> None:
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tNV12\tPHB\t0-15\n"
        "GPU1\tNV12\t X \tSYS\t0-15\n"
        "mlx5_0\tPHB\tSYS\t X \t\n"
    )
    matrix = topo.parse(text)
    assert matrix.distance(0, "mlx5_0") == "PHB"
    assert matrix.nic_device("mlx5_0") == "mlx5_0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no matrix header found"),
        ("        GPU0    GPU1\n", "no rows"),
        ("        GPU0    GPU1\nGPU0     X      NV18\nGPU1    NV18\n", "line 3"),
        ("        GPU0    GPU1\nGPU0     X      FOO\n", "unknown distance"),
        ("        GPU0    WAT\nGPU0     X      PIX\n", "unknown column label"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        topo.parse(text)
