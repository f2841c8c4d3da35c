"""Preflight options have one definition: PreflightOptions' fields and their OptionSpec.

Every place that spells an option (the JSON the parent sends the child, the flags of
``ddp-lsp preflight`` and of the runner, the keys of ``ddp-lsp.runPreflight``, the docs of both)
is made from or checked against that definition here, so a new option cannot reach one place
and miss another.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from ddp_lsp.preflight import cli, runner
from ddp_lsp.preflight.schema import (
    OptionKind,
    PreflightOptions,
    lsp_option_keys,
    option_specs,
    options_from_flags,
)

REPO = Path(__file__).resolve().parents[2]

# Every field away from its default.
FULL = PreflightOptions(
    world_size=3,
    backend="nccl",
    quick=True,
    strict=True,
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


def test_every_field_has_a_spec_and_full_sets_every_field() -> None:
    assert list(option_specs()) == [f.name for f in fields(PreflightOptions)]
    default = PreflightOptions()
    assert [
        f.name
        for f in fields(PreflightOptions)
        if getattr(FULL, f.name) == getattr(default, f.name)
    ] == []


def _argv(options: PreflightOptions, *, runner_flags: bool) -> list[str]:
    """The command line that asks for ``options``, written from the specs by hand."""
    argv: list[str] = []
    for name, spec in option_specs().items():
        if spec.flag is None or not (spec.cli or runner_flags):
            continue
        value: Any = getattr(options, name)
        if spec.kind is OptionKind.BOOL:
            argv += [spec.flag] if value else []
        elif spec.kind is OptionKind.FLAG:
            argv += [spec.flag if value else "--no-" + spec.flag[2:]]
        elif spec.kind is OptionKind.PROBES:
            argv += [spec.flag, *value]
        else:
            argv += [spec.flag, str(value)]
    return argv


def _flagged(options: PreflightOptions, *, runner_flags: bool) -> PreflightOptions:
    """``options`` with the fields no flag of that parser sets back at their defaults."""
    default = PreflightOptions()
    kwargs = {
        name: getattr(options if spec.flag and (spec.cli or runner_flags) else default, name)
        for name, spec in option_specs().items()
    }
    return PreflightOptions(**kwargs)


def test_the_runner_flags_set_every_flagged_field() -> None:
    ns = runner.build_parser().parse_args(_argv(FULL, runner_flags=True))
    assert runner.options_from_args(ns) == _flagged(FULL, runner_flags=True)
    # ... and the JSON the parent sends sets every field, flag or not.
    assert runner.options_from_args(runner.build_parser().parse_args(FULL.to_argv())) == FULL


def test_the_cli_flags_set_every_cli_field() -> None:
    ns = cli.build_parser().parse_args(_argv(FULL, runner_flags=False))
    assert options_from_flags(ns) == _flagged(FULL, runner_flags=False)
    assert options_from_flags(ns, params=7).params == 7  # --model-file's estimate


def test_defaults_are_the_fields_defaults() -> None:
    assert options_from_flags(cli.build_parser().parse_args([])) == PreflightOptions()
    assert runner.options_from_args(runner.build_parser().parse_args([])) == PreflightOptions()


@pytest.mark.parametrize(
    "parser", [cli.build_parser(), runner.build_parser()], ids=["cli", "runner"]
)
def test_no_parser_spells_an_option_by_hand(parser: argparse.ArgumentParser) -> None:
    # A hand-written flag for an option (another spelling, another default) would be a second
    # definition: every action that sets a field is the one add_option_flags made from its spec.
    specs = option_specs()
    spec_flags = {spec.flag for spec in specs.values() if spec.flag is not None}
    for action in parser._actions:  # argparse has no public list of its actions
        if action.dest in specs:
            flag = specs[action.dest].flag
            assert flag is not None and flag in action.option_strings, action.option_strings
        else:
            words = {s.lstrip("-").replace("-", "_") for s in action.option_strings}
            assert not words & set(specs), f"{action.option_strings} spells an option by hand"
            assert not set(action.option_strings) & spec_flags, f"{action.dest} is not a field"


def test_the_lsp_keys_are_the_fields_named_in_camel_case() -> None:
    from ddp_lsp.lsp.preflight import _options

    keys = lsp_option_keys()
    for key, name in keys.items():
        assert key == re.sub(r"_(\w)", lambda m: m.group(1).upper(), name.removesuffix("_s"))
        value: Any = getattr(FULL, name)
        sent = list(value) if isinstance(value, tuple) else value
        assert _options({key: sent}) == {name: value}


def test_the_docs_list_what_the_definition_says() -> None:
    server_md = (REPO / "docs" / "server.md").read_text(encoding="utf-8")
    sentence = re.search(r"`options` takes (.*?); a bad one", server_md, re.S)
    assert sentence is not None
    assert set(re.findall(r"`(\w+)`", sentence.group(1))) == set(lsp_option_keys())
    preflight_md = (REPO / "docs" / "preflight.md").read_text(encoding="utf-8")
    synopsis = preflight_md.split("```", 2)[1]
    documented = set(re.findall(r"--[\w-]+", synopsis))
    parser_flags = {
        s for a in cli.build_parser()._actions for s in a.option_strings if s.startswith("--")
    }
    assert documented == parser_flags - {"--help"}
