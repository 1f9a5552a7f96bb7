"""The job spec: every bad field gets one clear error naming it and its value; a job that cannot
fill N nodes is refused with the arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabtune.advise.job import fit, fit_problem, load_job, number, parse_job
from fabtune.errors import ConfigError, ExitStatus

BASE: dict[str, Any] = {
    "name": "l70", "layers": 80, "hidden": 8192, "vocab": 128256, "seq_len": 8192,
    "global_batch": 1024, "tp": 8, "pp": 4, "peak_tflops": 989,
}


def problems(doc: Any) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_job(doc, "job spec x.yml")
    assert err.value.code == ExitStatus.CONFIG
    return err.value.problems


def test_a_valid_spec_derives_params_from_the_shape() -> None:
    job = parse_job(BASE, "x")
    assert job.params == pytest.approx(12 * 80 * 8192**2 + 128256 * 8192)
    assert job.active_params == job.params and job.micro_batch == 1 and job.precision == "bf16"
    assert job.model_gpus == 32


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("tp", 0, "tp: 0 is not a whole number >= 1"),
        ("pp", 2.5, "pp: 2.5 is not a whole number >= 1"),
        ("precision", "int4", "precision: 'int4' is not one of bf16, fp16, fp8, fp32"),
        ("peak_tflops", -1, "peak_tflops: -1 is not a positive number"),
        ("achievable", 1.5, "achievable: 1.5 is not a fraction in (0, 1]"),
        ("seq_len", "long", "seq_len: 'long' is not a whole number >= 1"),
        ("global_batch", True, "global_batch: True is not a whole number >= 1"),
    ],
)
def test_a_bad_field_is_named_with_its_value(field: str, value: Any, words: str) -> None:
    assert problems({**BASE, field: value}) == [words]


def test_every_problem_at_once_and_unknown_fields_get_a_suggestion() -> None:
    found = problems({**BASE, "tensor_parallel": 8, "hiden": 1, "tp": -1})
    assert "tensor_parallel: is not a job field" in found[0]
    assert "hiden: is not a job field (did you mean hidden?)" in found
    assert "tp: -1 is not a whole number >= 1" in found


def test_missing_required_fields_and_shape() -> None:
    doc = {k: v for k, v in BASE.items() if k not in ("seq_len", "layers", "peak_tflops")}
    found = problems(doc)
    assert "seq_len: missing (required)" in found and "peak_tflops: missing (required)" in found
    assert any(p.startswith("params: missing; give params, or layers and hidden") for p in found)
    assert "layers: missing; tp 8 > 1 needs it (activation sizes)" in found


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"tp": 16}, "tp: 16 does not divide gpus_per_node 8"),
        ({"tp": 3}, "tp: 3 does not divide gpus_per_node 8"),
        ({"global_batch": 10, "micro_batch": 4}, "global_batch: 10 is not a multiple of micro_batch 4"),
        ({"ep": 8}, "top_k: missing; ep 8 > 1 is a mixture of experts"),
        ({"params": 1e9, "active_params": 2e9}, "active_params: 2e+09 is more than params 1e+09"),
        ({"pp": 1, "vp": 2}, "vp: 2 needs pp > 1"),
    ],
)
def test_fields_that_contradict_each_other(extra: dict[str, Any], words: str) -> None:
    assert any(p.startswith(words) for p in problems({**BASE, **extra})), problems({**BASE, **extra})


def test_not_a_mapping() -> None:
    assert problems(["a"])[0].startswith("(top level): a list, not a mapping")
    assert problems(None)[0].startswith("(top level): empty")


@pytest.mark.parametrize(("text", "value"), [(70e9, 70e9), ("70B", 70e9), ("1.5T", 1.5e12), ("8k", 8e3)])
def test_numbers_take_suffixes(text: Any, value: float) -> None:
    assert number(text) == pytest.approx(value)
    assert number("70X") is None and number(float("nan")) is None


def test_load_job_reads_yaml_and_names_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "job.yml"
    spec.write_text("name: small\nparams: 7B\nseq_len: 4096\nglobal_batch: 512\npeak_tflops: 989\n")
    job = load_job(spec)
    assert job.params == 7e9 and job.tp == 1
    spec.write_text("params: [\n")
    with pytest.raises(ConfigError) as err:
        load_job(spec)
    assert err.value.source == f"job spec {spec}" and err.value.problems[0].startswith("not valid YAML")
    with pytest.raises(ConfigError) as err:
        load_job(tmp_path / "none.yml")
    assert err.value.problems[0].startswith("cannot read")


def test_fit_fills_the_cluster() -> None:
    job = parse_job(BASE, "x")
    layout = fit(job, 16)
    assert (layout.gpus, layout.dp, layout.microbatches) == (128, 4, 256)


def test_a_job_that_cannot_fit_is_refused_with_the_arithmetic() -> None:
    job = parse_job(BASE, "x")
    assert fit_problem(job, 3) == (
        "N=3: 3 nodes x 8 GPUs = 24 GPUs is not a multiple of tp 8 x pp 4 = 32 GPUs (a replica)"
    )
    assert fit_problem(parse_job({**BASE, "dp": 8}, "x"), 16) == (
        "N=16: 16 nodes x 8 GPUs = 128 GPUs, but dp 8 x tp 8 x pp 4 = 256 GPUs (32 nodes); "
        "leave dp out to fill any N"
    )
    assert fit_problem(parse_job({**BASE, "global_batch": 1000}, "x"), 64) == (
        "N=64: 64 nodes x 8 GPUs = 512 GPUs gives dp 16; global_batch 1000 is not a multiple of "
        "dp 16 x micro_batch 1 = 16"
    )
    moe = parse_job({**BASE, "ep": 8, "top_k": 2, "pp": 1}, "x")
    assert "ep 8 does not divide it" in str(fit_problem(moe, 4))
    with pytest.raises(ConfigError) as err:
        fit(job, 3)
    assert err.value.problems == [fit_problem(job, 3)]
    assert fit_problem(job, 4) is None


def test_a_binary_or_huge_file_is_not_a_job_spec(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError) as err:
        load_job(binary)
    assert err.value.problems[0].startswith("not a text file")
    huge = tmp_path / "huge.yml"
    huge.write_text("#" * (64 * 1024 + 1))
    with pytest.raises(ConfigError) as err:
        load_job(huge)
    assert err.value.problems == ["is larger than 65536 bytes: not a job spec"]
