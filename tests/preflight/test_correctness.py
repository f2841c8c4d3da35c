"""dist.correctness: DDP vs one process, the sampler's shards, RNG and buffers after the wrap.

The verdict (``judge``) is tested on numbers; the probe itself runs for real with 2 gloo ranks,
once clean and once with a rank whose weights change after the wrap (fault injection).
"""

from __future__ import annotations

from typing import Any

import pytest

from ddp_lsp.preflight.probes import PROBES_BY_ID
from ddp_lsp.preflight.probes.base import ProbeContext
from ddp_lsp.preflight.probes.correctness import TOLERANCE, judge
from ddp_lsp.preflight.probes.ranks import INJECT_ENV
from ddp_lsp.preflight.runner import run_isolated
from ddp_lsp.preflight.schema import PreflightOptions, Status


def _clean(world: int = 2) -> dict[str, Any]:
    return {
        "wrap_param_diff": [0.0] * world,
        "wrap_buffer_diff": [0.0] * world,
        "rng_equal": [True] * world,
        "sampler": {"samples": 37, "per_rank": 19, "padding": 1, "missing": [], "extra_overlap": 0},
        "steps": 3,
        "reference_diff": [2e-8] * world,
        "final_param_diff": [0.0] * world,
    }


def test_clean_numbers_pass_and_say_what_was_checked() -> None:
    outcome = judge(_clean(), 2, "gloo")
    assert outcome.status is Status.PASS
    for words in ("single-process", "RNG", "buffers", "disjoint and complete", "1 padded"):
        assert words in outcome.message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"wrap_param_diff": [0.0, 1e-2]},
            "parameters of rank(s) 1 differ from rank 0's after the DDP wrap",
        ),
        ({"wrap_buffer_diff": [0.0, 0.0, 0.3]}, "buffers of rank(s) 2 differ"),
        ({"rng_equal": [True, False]}, "RNG state of rank(s) 1 differs"),
        (
            {
                "sampler": {
                    "samples": 37,
                    "per_rank": 19,
                    "padding": 1,
                    "missing": [3, 4],
                    "extra_overlap": 2,
                }
            },
            "2 index(es) on several ranks, 2 index(es) on no rank",
        ),
        ({"reference_diff": [1e-3, 1e-3]}, "rank(s) 0, 1 differ from single-process training"),
        ({"final_param_diff": [0.0, float("nan")]}, "ranks end training with different parameters"),
    ],
)
def test_each_broken_promise_fails_and_names_the_rank(
    change: dict[str, Any], expected: str
) -> None:
    values = _clean(3 if "wrap_buffer_diff" in change else 2)
    values.update(change)
    outcome = judge(values, len(values["wrap_param_diff"]), "nccl")
    assert outcome.status is Status.FAIL
    assert expected in outcome.message
    assert outcome.fix


def test_rounding_below_the_tolerance_is_not_a_failure() -> None:
    values = _clean()
    values["reference_diff"] = [TOLERANCE / 10, TOLERANCE / 2]
    assert judge(values, 2, "gloo").status is Status.PASS


def _run(env: dict[str, str] | None = None) -> Any:
    options = PreflightOptions(backend="gloo", world_size=2)
    ctx = ProbeContext(options=options, env={"PATH": "", **(env or {})})
    # Generous: DDP's first construction imports torch._dynamo, which takes tens of seconds
    # on a loaded 2-CPU machine.
    return run_isolated(PROBES_BY_ID["dist.correctness"], ctx, 300)


@pytest.mark.torch
def test_real_two_rank_ddp_matches_one_process() -> None:
    pytest.importorskip("torch")
    result = _run()
    assert result.status is Status.PASS, result.message
    assert result.values["world_size"] == 2 and result.values["backend"] == "gloo"
    # Ranks start from different weights: the pass means DDP's broadcast really synced them.
    assert max(result.values["reference_diff"]) <= TOLERANCE
    assert result.values["sampler"]["missing"] == [] and result.values["sampler"]["padding"] == 1


@pytest.mark.torch
def test_real_rank_with_different_weights_is_caught() -> None:
    pytest.importorskip("torch")
    result = _run({INJECT_ENV: "weights:1,sampler:1,rng:1"})
    assert result.status is Status.FAIL, result.message
    assert "parameters of rank(s) 1 differ from rank 0's after the DDP wrap" in result.message
    assert result.values["wrap_param_diff"][1] == pytest.approx(1e-2, rel=1e-3)
    assert "differ from single-process training" in result.message
    assert "DistributedSampler shards of 37 samples are not a partition" in result.message
    assert result.values["rng_equal"] == [True, False]
    assert "RNG state of rank(s) 1 differs" in result.message
    # Only what was injected: the buffers (perturbed before the wrap) were synced by DDP.
    assert max(result.values["wrap_buffer_diff"]) == 0.0
