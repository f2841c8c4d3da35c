"""``ddp-lsp preflight``: run the probes in the training interpreter and print the report.

This process never imports torch: it starts ``python -m ddp_lsp.preflight`` semantics in
``--python`` (default: this interpreter) through :mod:`ddp_lsp.preflight.client`, prints each
probe as it finishes, and exits 0 (no failure), 1 (a failure; with ``--strict`` a warning too)
or 2 (the preflight itself could not run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ddp_lsp.cliutil import positive_seconds, unwritable_reason
from ddp_lsp.preflight.schema import (
    PreflightOptions,
    ProbeResult,
    Status,
    add_option_flags,
    options_from_flags,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddp-lsp preflight",
        description="Probe this machine for PyTorch distributed training (DDP). Without a GPU the "
        "gloo path runs for real on 127.0.0.1; probes that need a GPU say why they were skipped.",
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter you train with (default: this one)",
    )
    p.add_argument(
        "--json",
        dest="json_file",
        metavar="FILE",
        help="write the JSON report (schema ddp-lsp-preflight/1)",
    )
    p.add_argument("--markdown", action="store_true", help="print the report as Markdown")
    p.add_argument(
        "--model-file",
        help="estimate the parameter count statically from this file (never imported)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=900.0, help="overall limit in seconds"
    )
    p.add_argument("--no-color", action="store_true", help="ASCII status marks")
    p.add_argument(
        "--script",
        metavar="FILE",
        help="your training script: its init_process_group backend, mp.spawn ranks and "
        "DataLoader settings become the job the probes check (read statically, never imported)",
    )
    # The options themselves (--world-size, --quick, --probe ...): PreflightOptions' fields.
    add_option_flags(p, runner=False)
    return p


def _print_probe(result: ProbeResult, unicode: bool) -> None:
    from ddp_lsp.preflight.report import probe_line

    sys.stdout.write(probe_line(result, unicode) + "\n")
    if result.fix and result.status in (Status.WARN, Status.FAIL):
        sys.stdout.write(f"  {'→' if unicode else '->'} {result.fix}\n")
    sys.stdout.flush()


def _with_script(options: PreflightOptions, path: str) -> PreflightOptions:
    """The job as the script states it (explicit flags win), said in one line per fact."""
    from ddp_lsp.preflight.scriptinfo import load_script, options_with_facts

    facts = load_script(path)
    name = os.path.basename(path)
    for line in facts.describe(name) or ["no init_process_group, spawn or DataLoader settings"]:
        sys.stdout.write(f"job from {name}: {line}\n")
    return options_with_facts(options, facts, name)


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(list(argv))
        if ns.json_file:
            problem = unwritable_reason(ns.json_file)
            if problem is not None:
                sys.stderr.write(
                    f"ddp-lsp preflight: cannot write --json {ns.json_file}: {problem}\n"
                )
                return 2
    except SystemExit as exc:
        return int(exc.code or 0) and 2
    from ddp_lsp.preflight.client import PreflightError, run_preflight_sync
    from ddp_lsp.preflight.report import (
        _unicode_ok,
        not_checked,
        render_markdown,
        summary_counts,
        summary_line,
    )

    params = ns.params
    if params is None and ns.model_file:
        from ddp_lsp.preflight.paramcount import estimate_params

        try:
            with open(ns.model_file, encoding="utf-8") as handle:
                estimate = estimate_params(handle.read())
        except OSError as exc:
            sys.stderr.write(f"ddp-lsp preflight: cannot read {ns.model_file}: {exc.strerror}\n")
            return 2
        if estimate is None:
            sys.stderr.write(
                f"ddp-lsp preflight: no layer sizes found in {ns.model_file}; pass --params\n"
            )
        elif estimate.unresolved:
            # A lower bound is no model size: a verdict from it would judge another model.
            sys.stdout.write(
                f"model: >= {estimate.params:,} parameters in {estimate.layers} layers of "
                f"{ns.model_file}, {estimate.unresolved} layers unresolved: not used for a "
                "verdict (pass --params, or measure the job: ddp-lsp feasibility -- python "
                f"{ns.model_file})\n"
            )
        else:
            params = estimate.params
            sys.stdout.write(
                f"model: {params:,} parameters in {estimate.layers} layers of {ns.model_file} "
                "(static estimate)\n"
            )
    try:
        options = options_from_flags(ns, params=params)
        if ns.script:
            options = _with_script(options, ns.script)
    except ValueError as exc:
        sys.stderr.write(f"ddp-lsp preflight: {exc}\n")
        return 2
    from ddp_lsp.preflight.probes import PROBES_BY_ID

    unknown = [p for p in options.probes if p not in PROBES_BY_ID]
    if unknown:
        sys.stderr.write(
            f"ddp-lsp preflight: unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBES_BY_ID)}\n"
        )
        return 2
    unicode = _unicode_ok() and not ns.no_color
    sys.stdout.write(f"DDP preflight in {ns.python} ...\n")
    sys.stdout.flush()
    try:
        report = run_preflight_sync(
            ns.python,
            options,
            None if ns.markdown else (lambda r: _print_probe(r, unicode)),
            timeout_s=ns.timeout,
        )
    except PreflightError as exc:
        sys.stderr.write(f"ddp-lsp preflight: {exc}\n")
        return 2
    if ns.markdown:
        sys.stdout.write(render_markdown(report))
    else:
        for line in not_checked(report):
            sys.stdout.write(line + "\n")
        for node in report.nodes:
            sys.stdout.write(
                f"node {node.node_rank} ({node.host}): {summary_counts(node, unicode)}\n"
            )
        sys.stdout.write(summary_line(report, unicode) + "\n")
    if report.error:
        sys.stderr.write(f"ddp-lsp preflight: {report.error}\n")
    if ns.json_file:
        tmp = f"{ns.json_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(report.to_json(), handle, indent=2)
        os.replace(tmp, ns.json_file)
    return report.exit_code(ns.strict)
