"""Schema round trips, option validation (the server passes untrusted command arguments) and
exit codes."""

from __future__ import annotations

import json

import pytest

from ddp_lsp.preflight.schema import (
    SCHEMA_ID,
    PreflightOptions,
    PreflightReport,
    ProbeResult,
    Status,
)


def _report(*statuses: Status, error: str | None = None) -> PreflightReport:
    probes = tuple(
        ProbeResult(
            f"p{i}",
            f"P{i}",
            s,
            f"m{i}",
            {"x": i},
            "fix" if s is Status.FAIL else None,
            ("ref",),
            0.5,
        )
        for i, s in enumerate(statuses)
    )
    return PreflightReport(
        host="h",
        python="/py",
        python_version="3.11.0",
        platform="Linux",
        created="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        probes=probes,
        torch="2.13.0",
        gpus=("A", "B"),
        backend="gloo",
        world_size=2,
        error=error,
    )


def test_report_round_trips_through_json_text() -> None:
    report = _report(Status.PASS, Status.WARN, Status.FAIL, Status.SKIP)
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == SCHEMA_ID
    assert data["summary"] == {"pass": 1, "warn": 1, "fail": 1, "skip": 1}
    back = PreflightReport.from_json(data)
    assert back == report


def test_other_schema_is_rejected() -> None:
    data = _report(Status.PASS).to_json()
    data["schema"] = "ddp-lsp-preflight/0"
    with pytest.raises(ValueError, match="unsupported preflight schema"):
        PreflightReport.from_json(data)


@pytest.mark.parametrize(
    ("statuses", "strict", "error", "code"),
    [
        ((Status.PASS, Status.SKIP), False, None, 0),
        ((Status.PASS, Status.WARN), False, None, 0),
        ((Status.PASS, Status.WARN), True, None, 1),
        ((Status.FAIL,), False, None, 1),
        ((Status.PASS,), False, "cancelled", 2),
    ],
)
def test_exit_codes(
    statuses: tuple[Status, ...], strict: bool, error: str | None, code: int
) -> None:
    assert _report(*statuses, error=error).exit_code(strict) == code


def test_options_from_untrusted_json() -> None:
    opts = PreflightOptions.from_json(
        {"world_size": 4, "backend": "gloo", "quick": True, "probes": ["limits"]}
    )
    assert opts == PreflightOptions(world_size=4, backend="gloo", quick=True, probes=("limits",))
    # The child gets the options as one JSON object and reads them back with from_json: one
    # definition on both sides, every field included.
    from ddp_lsp.preflight.runner import build_parser, options_from_args

    full = PreflightOptions(
        world_size=3,
        backend="nccl",
        quick=True,
        probes=("limits", "host.memory"),
        num_workers=6,
        batch_bytes=1 << 20,
        params=1000,
        grad_bytes_per_param=2,
        bucket_cap_mb=50.0,
        handshake_timeout_s=4.0,
        timeout_scale=2.0,
        torchrun=True,
        prefetch_factor=4,
        pin_memory=False,
        backend_source="train.py:12",
        world_size_source="train.py:40",
    )
    for sent in (opts, full, PreflightOptions()):
        argv = sent.to_argv()
        assert argv[0] == "--options-json"
        assert options_from_args(build_parser().parse_args(argv)) == sent
    # Every field is sent (a field missing from to_json would silently fall back to its default).
    assert set(full.to_json()) == set(PreflightOptions.__dataclass_fields__)
    assert all(
        value != getattr(PreflightOptions(), key)
        for key, value in full.to_json().items()
        if key not in ("strict",)
    )


def test_options_json_that_is_not_json_is_a_clear_error() -> None:
    from ddp_lsp.preflight.runner import build_parser, options_from_args

    with pytest.raises(ValueError, match="--options-json is not JSON"):
        options_from_args(build_parser().parse_args(["--options-json", "{nope"]))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"world_size": "4"}, "world_size must be an integer"),
        ({"world_size": 0}, "between 1 and 1024"),
        ({"backend": "mpi"}, "backend must be one of"),
        ({"quick": "yes"}, "quick must be true or false"),
        ({"probes": "limits"}, "list of probe ids"),
        ({"probes": ["../../etc"]}, "not a probe id"),
        ({"probes": ["limits; rm -rf /"]}, "not a probe id"),
        ({"python": "/bin/sh"}, "unknown preflight option"),
        ({"handshake_timeout_s": float("nan")}, "positive number"),
        ({"num_workers": True}, "num_workers must be an integer"),
        ({"pin_memory": 1}, "pin_memory must be true or false"),
        ({"prefetch_factor": 0}, "prefetch_factor must be between"),
        ({"backend_source": 12}, "backend_source must be a string"),
    ],
)
def test_options_reject_bad_arguments(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PreflightOptions.from_json(data)
