"""The preflight's data at its boundaries: options in, results out (schema ``ddp-lsp-preflight/1``).

Stdlib only. The language server imports this module to read cached reports and to validate
``ddp-lsp.runPreflight`` arguments, so it must never import torch (or anything heavy). The JSON
shape is documented in ``docs/preflight.md``; a change that renames or removes a field needs a
new schema id, adding an optional field does not.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

SCHEMA_ID = "ddp-lsp-preflight/1"

#: JSON-compatible scalar or nested value of a probe's measurement.
JsonValue = Any


class Status(str, enum.Enum):
    """Outcome of one probe. ``skip`` always carries a reason in ``message``."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


BACKENDS = ("nccl", "gloo")


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found, self-contained enough to show in a hover without the rest."""

    id: str
    title: str
    status: Status
    message: str
    values: Mapping[str, JsonValue] = field(default_factory=dict)
    fix: str | None = None
    references: tuple[str, ...] = ()
    duration_s: float = 0.0
    #: A ``skip`` of something the job needs (its backend, its rank count): what was not
    #: checked although it matters. ``--strict`` fails on these.
    needed: bool = False

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "message": self.message,
            "values": dict(self.values),
            "fix": self.fix,
            "references": list(self.references),
            "duration_s": round(self.duration_s, 4),
            "needed": self.needed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> ProbeResult:
        return cls(
            id=str(data["id"]),
            title=str(data.get("title", data["id"])),
            status=Status(str(data["status"])),
            message=str(data.get("message", "")),
            values=dict(data.get("values") or {}),
            fix=None if data.get("fix") is None else str(data["fix"]),
            references=tuple(str(r) for r in data.get("references") or ()),
            duration_s=float(data.get("duration_s") or 0.0),
            needed=bool(data.get("needed", False)),
        )


class OptionKind(str, enum.Enum):
    """An option's type at the boundaries (JSON check, argparse action)."""

    BOOL = "bool"  # --x
    FLAG = "flag"  # a bool that may be unset: --x / --no-x
    INT = "int"
    FLOAT = "float"
    STR = "str"
    PROBES = "probes"  # a list of probe ids: --probe ID ...


@dataclass(frozen=True)
class OptionSpec:
    """How one preflight option is spelled at each boundary; the field's type and default are
    the dataclass field's. ``flag``: the command-line flag of
    ``ddp-lsp preflight`` and of the runner (None: none, set from ``--script``); ``cli``: False
    for a flag only the runner takes. ``lsp``: the key in ``ddp-lsp.runPreflight``'s options
    object (None: not accepted from the editor)."""

    kind: OptionKind
    flag: str | None = None
    help: str | None = None
    lsp: str | None = None
    cli: bool = True
    metavar: str | None = None


def _option(default: Any, spec: OptionSpec) -> Any:
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True)
class PreflightOptions:
    """What the user asked for; validated here so the CLI and the server share one set of rules.

    ``world_size`` is the number of local ranks the probes spawn (default: the GPU count with
    NCCL, 2 with gloo). ``num_workers`` and ``batch_bytes`` describe the user's DataLoader so
    that /dev/shm and CPU needs can be computed; ``params`` feeds the feasibility estimate;
    ``prefetch_factor`` and ``pin_memory`` size the pinned host buffers (host.memory).
    ``backend_source`` / ``world_size_source`` say where a backend or rank count read from the
    training script came from (``train.py:12``), so a failure can point at the line.

    Each field is the one definition of its option: its :class:`OptionSpec` gives the JSON
    the parent sends the child (``--options-json``, :meth:`to_json` / :meth:`from_json`), the
    flags of ``ddp-lsp preflight`` and of the runner (:func:`add_option_flags`,
    :func:`options_from_flags`) and the key of ``ddp-lsp.runPreflight`` (:func:`lsp_option_keys`).
    A new option is a field here with its spec, nothing else.
    """

    world_size: int | None = _option(
        None,
        OptionSpec(
            OptionKind.INT,
            "--world-size",
            "ranks per node (default: GPUs, or 2 on CPU)",
            "worldSize",
        ),
    )
    backend: str | None = _option(None, OptionSpec(OptionKind.STR, "--backend", None, "backend"))
    quick: bool = _option(
        False,
        OptionSpec(
            OptionKind.BOOL,
            "--quick",
            "skip the DDP correctness run, the bandwidth sweep and feasibility",
            "quick",
        ),
    )
    strict: bool = _option(
        False,
        OptionSpec(
            OptionKind.BOOL,
            "--strict",
            "warnings, and skips of what the job needs, fail too (exit 1)",
        ),
    )
    probes: tuple[str, ...] = _option(
        (),
        OptionSpec(OptionKind.PROBES, "--probe", "run only these probes", "probes", metavar="ID"),
    )
    num_workers: int | None = _option(
        None,
        OptionSpec(
            OptionKind.INT, "--num-workers", "your DataLoader num_workers per rank", "numWorkers"
        ),
    )
    batch_bytes: int | None = _option(
        None,
        OptionSpec(
            OptionKind.INT,
            "--batch-bytes",
            "bytes of one batch (sizes /dev/shm need)",
            "batchBytes",
        ),
    )
    params: int | None = _option(
        None,
        OptionSpec(OptionKind.INT, "--params", "model parameter count (feasibility)", "params"),
    )
    grad_bytes_per_param: int = _option(
        4, OptionSpec(OptionKind.INT, "--grad-bytes", "bytes per gradient element: 4 fp32, 2 bf16")
    )
    bucket_cap_mb: float = _option(
        25.0, OptionSpec(OptionKind.FLOAT, "--bucket-cap-mb", "DDP bucket_cap_mb (default 25)")
    )
    handshake_timeout_s: float = _option(
        10.0,
        OptionSpec(
            OptionKind.FLOAT,
            "--handshake-timeout",
            "seconds for init and barrier",
            "handshakeTimeout",
        ),
    )
    timeout_scale: float = _option(
        1.0,
        OptionSpec(
            OptionKind.FLOAT, "--timeout-scale", "multiply every probe timeout", "timeoutScale"
        ),
    )
    torchrun: bool = _option(
        False,
        OptionSpec(
            OptionKind.BOOL,
            "--torchrun",
            "one process per node under torchrun; gather to rank 0",
            cli=False,
        ),
    )
    prefetch_factor: int | None = _option(
        None,
        OptionSpec(
            OptionKind.INT, "--prefetch-factor", "your DataLoader prefetch_factor", "prefetchFactor"
        ),
    )
    pin_memory: bool | None = _option(
        None,
        OptionSpec(
            OptionKind.FLAG,
            "--pin-memory",
            "your DataLoader pins batches (sizes host.memory; default: assumed where CUDA is)",
            "pinMemory",
        ),
    )
    # Where a backend or rank count read from the training script came from (``--script``).
    backend_source: str | None = _option(None, OptionSpec(OptionKind.STR))
    world_size_source: str | None = _option(None, OptionSpec(OptionKind.STR))

    def __post_init__(self) -> None:
        if self.world_size is not None and not (1 <= self.world_size <= 1024):
            raise ValueError(f"world_size must be between 1 and 1024, got {self.world_size}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.num_workers is not None and not (0 <= self.num_workers <= 4096):
            raise ValueError(f"num_workers must be between 0 and 4096, got {self.num_workers}")
        if self.batch_bytes is not None and not (0 <= self.batch_bytes <= 1 << 44):
            raise ValueError(f"batch_bytes out of range: {self.batch_bytes}")
        if self.params is not None and not (1 <= self.params <= 10**13):
            raise ValueError(f"params must be between 1 and 1e13, got {self.params}")
        if self.prefetch_factor is not None and not (1 <= self.prefetch_factor <= 1024):
            raise ValueError(
                f"prefetch_factor must be between 1 and 1024, got {self.prefetch_factor}"
            )
        for name in ("backend_source", "world_size_source"):
            text = getattr(self, name)
            if text is not None and (len(text) > 500 or "\0" in text):
                raise ValueError(f"{name} must be a short text")
        if self.grad_bytes_per_param not in (1, 2, 4, 8):
            raise ValueError("grad_bytes_per_param must be 1, 2, 4 or 8")
        for name in ("bucket_cap_mb", "handshake_timeout_s", "timeout_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.handshake_timeout_s > 3600 or self.timeout_scale > 100:
            raise ValueError("timeouts are capped at an hour (timeout_scale at 100)")
        for probe_id in self.probes:
            if not _is_probe_id(probe_id):
                raise ValueError(f"not a probe id: {probe_id!r}")

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {}
        for name, spec in option_specs().items():
            value = getattr(self, name)
            out[name] = list(value) if spec.kind is OptionKind.PROBES else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> PreflightOptions:
        """Build options from untrusted input (LSP command arguments): unknown keys and wrong
        types raise ``ValueError`` with a message fit for ``window/showMessage``."""
        if not isinstance(data, Mapping):
            raise ValueError("preflight options must be an object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown preflight option(s): {', '.join(unknown)}")
        specs = option_specs()
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if value is None:
                continue
            kind = specs[key].kind
            if kind in (OptionKind.BOOL, OptionKind.FLAG):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be true or false")
                kwargs[key] = value
            elif kind is OptionKind.INT:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{key} must be an integer")
                kwargs[key] = value
            elif kind is OptionKind.FLOAT:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{key} must be a number")
                kwargs[key] = float(value)
            elif kind is OptionKind.STR:
                if not isinstance(value, str):
                    raise ValueError(f"{key} must be a string")
                kwargs[key] = value
            elif kind is OptionKind.PROBES:
                if isinstance(value, str) or not isinstance(value, Sequence):
                    raise ValueError("probes must be a list of probe ids")
                if not all(isinstance(p, str) for p in value):
                    raise ValueError("probes must be a list of probe ids")
                kwargs[key] = tuple(value)
        return cls(**kwargs)

    def to_argv(self) -> list[str]:
        """The runner's command line for these options: one JSON object, read back with
        :meth:`from_json` in the child, so the two sides share this one definition."""
        return ["--options-json", json.dumps(self.to_json(), sort_keys=True)]


def option_specs() -> dict[str, OptionSpec]:
    """Every option's :class:`OptionSpec`, by field name, in field order."""
    return {f.name: f.metadata["option"] for f in fields(PreflightOptions)}


def lsp_option_keys() -> dict[str, str]:
    """``ddp-lsp.runPreflight``'s option keys (camelCase) -> field names."""
    return {spec.lsp: name for name, spec in option_specs().items() if spec.lsp is not None}


def add_option_flags(parser: argparse.ArgumentParser, *, runner: bool) -> None:
    """Add the option flags to ``ddp-lsp preflight``'s parser (``runner=False``) or to the
    runner's (``python -m ddp_lsp.preflight``, which also takes the runner-only ones)."""
    import argparse  # not at the top: the language server imports this module

    defaults = {f.name: f.default for f in fields(PreflightOptions)}
    for name, spec in option_specs().items():
        if spec.flag is None or not (spec.cli or runner):
            continue
        kwargs: dict[str, Any] = {"dest": name, "help": spec.help}
        if spec.kind is OptionKind.BOOL:
            kwargs["action"] = "store_true"
        elif spec.kind is OptionKind.FLAG:
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        elif spec.kind is OptionKind.PROBES:
            kwargs.update(action="extend", nargs="+", default=[], metavar=spec.metavar)
        else:
            kwargs["type"] = {OptionKind.INT: int, OptionKind.FLOAT: float, OptionKind.STR: str}[
                spec.kind
            ]
            kwargs["default"] = defaults[name]
            if name == "backend":
                kwargs["choices"] = BACKENDS
            else:  # as argparse names it from the flag: --grad-bytes GRAD_BYTES
                kwargs["metavar"] = spec.metavar or spec.flag[2:].upper().replace("-", "_")
        parser.add_argument(spec.flag, **kwargs)


def options_from_flags(ns: argparse.Namespace, **overrides: Any) -> PreflightOptions:
    """The options a parser made by :func:`add_option_flags` read; ``overrides`` win (a
    parameter count estimated from ``--model-file``). Raises ``ValueError`` on a bad value."""
    kwargs: dict[str, Any] = {}
    for name, spec in option_specs().items():
        if hasattr(ns, name):
            value = getattr(ns, name)
            kwargs[name] = tuple(value) if spec.kind is OptionKind.PROBES else value
    kwargs.update(overrides)
    return PreflightOptions(**kwargs)


def _is_probe_id(text: str) -> bool:
    parts = text.split(".")
    return (
        isinstance(text, str)
        and 0 < len(text) <= 64
        and all(p and p.replace("_", "").isalnum() and p.isascii() for p in parts)
    )


@dataclass(frozen=True)
class Summary:
    passed: int = 0
    warned: int = 0
    failed: int = 0
    skipped: int = 0

    def to_json(self) -> dict[str, int]:
        return {"pass": self.passed, "warn": self.warned, "fail": self.failed, "skip": self.skipped}


@dataclass(frozen=True)
class PreflightReport:
    """A whole preflight run on one host; ``nodes`` holds the other hosts' reports after a
    multi-node run under torchrun (rank 0's report is the top level)."""

    host: str
    python: str
    python_version: str
    platform: str
    created: str
    duration_s: float
    probes: tuple[ProbeResult, ...]
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    gpus: tuple[str, ...] = ()
    backend: str | None = None
    world_size: int | None = None
    options: Mapping[str, JsonValue] = field(default_factory=dict)
    error: str | None = None
    node_rank: int | None = None
    nodes: tuple[PreflightReport, ...] = ()
    schema: str = SCHEMA_ID

    @property
    def summary(self) -> Summary:
        counts = {status: 0 for status in Status}
        for probe in self.probes:
            counts[probe.status] += 1
        return Summary(
            counts[Status.PASS], counts[Status.WARN], counts[Status.FAIL], counts[Status.SKIP]
        )

    def probe(self, probe_id: str) -> ProbeResult | None:
        for probe in self.probes:
            if probe.id == probe_id:
                return probe
        return None

    def exit_code(self, strict: bool = False) -> int:
        """0: no failure; 1: a probe failed (with ``strict``: warned, or skipped something the
        job needs); 2: preflight error."""
        if self.error is not None:
            return 2
        bad = {Status.FAIL, Status.WARN} if strict else {Status.FAIL}
        reports = (self, *self.nodes)
        probes = [p for r in reports for p in r.probes]
        if any(p.status in bad for p in probes):
            return 1
        return 1 if strict and any(p.status is Status.SKIP and p.needed for p in probes) else 0

    def with_probes(self, probes: Sequence[ProbeResult]) -> PreflightReport:
        return replace(self, probes=tuple(probes))

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "schema": self.schema,
            "host": self.host,
            "python": self.python,
            "python_version": self.python_version,
            "platform": self.platform,
            "created": self.created,
            "duration_s": round(self.duration_s, 3),
            "env": {
                "torch": self.torch,
                "cuda": self.cuda,
                "nccl": self.nccl,
                "driver": self.driver,
                "gpus": list(self.gpus),
            },
            "backend": self.backend,
            "world_size": self.world_size,
            "options": dict(self.options),
            "error": self.error,
            "node_rank": self.node_rank,
            "summary": self.summary.to_json(),
            "probes": [p.to_json() for p in self.probes],
            "nodes": [n.to_json() for n in self.nodes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> PreflightReport:
        schema = data.get("schema")
        if schema != SCHEMA_ID:
            raise ValueError(f"unsupported preflight schema {schema!r} (expected {SCHEMA_ID})")
        env = data.get("env") or {}
        return cls(
            host=str(data["host"]),
            python=str(data.get("python", "")),
            python_version=str(data.get("python_version", "")),
            platform=str(data.get("platform", "")),
            created=str(data["created"]),
            duration_s=float(data.get("duration_s") or 0.0),
            probes=tuple(ProbeResult.from_json(p) for p in data.get("probes") or ()),
            torch=env.get("torch"),
            cuda=env.get("cuda"),
            nccl=env.get("nccl"),
            driver=env.get("driver"),
            gpus=tuple(env.get("gpus") or ()),
            backend=data.get("backend"),
            world_size=data.get("world_size"),
            options=dict(data.get("options") or {}),
            error=data.get("error"),
            node_rank=data.get("node_rank"),
            nodes=tuple(cls.from_json(n) for n in data.get("nodes") or ()),
        )
