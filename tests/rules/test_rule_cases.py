"""Every rule's own cases: VALID snippets stay silent, INVALID ones are found at the marked
span, and each fix produces the expected text, parses, removes its finding and is idempotent."""

from __future__ import annotations

import ast

import pytest

from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import Invalid, Valid
from tests.casekit import check_invalid, findings

CASES = [
    pytest.param(
        rule, case, id=f"{rule.meta.id}-{'valid' if isinstance(case, Valid) else 'invalid'}-{i}"
    )
    for rule in all_rules()
    for i, case in enumerate(rule.cases)
]


def test_every_rule_has_cases() -> None:
    for rule in all_rules():
        kinds = {type(c) for c in rule.cases}
        assert Valid in kinds and Invalid in kinds, f"{rule.meta.id} needs VALID and INVALID cases"


@pytest.mark.parametrize(("rule", "case"), CASES)
def test_case(rule, case) -> None:
    if isinstance(case, Valid):
        found = findings(rule, case.code, case.distributed, case.env)
        assert found == [], [f"{f.span.start}: {f.message}" for f in found]
    else:
        check_invalid(rule, case)


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.meta.id)
def test_non_distributed_code_gets_only_any_module_rules(rule) -> None:
    """RULES.md "Distributed context": plain single-GPU code gets none of the rules that need
    several ranks; a rule whose bug is a bug in any PyTorch program (``RuleMeta.any_module``:
    a graph kept alive, a scaler misuse) still reports its cases there."""
    from tests.casekit import unmark

    reported = []
    for case in rule.cases:
        if isinstance(case, Invalid):
            code = unmark(case.code).code
            plain = "\n".join(
                line
                for line in code.splitlines()
                if "distributed" not in line
                and "DistributedDataParallel" not in line
                and "DDP" not in line
                and "RANK" not in line
                and "init_process_group" not in line
            )
            try:
                tree = ast.parse(plain)
            except SyntaxError:
                continue
            if _imports_a_distributed_framework(tree):
                continue  # `from accelerate.utils import set_seed`: still distributed code
            found = findings(rule, plain, distributed=False, env=case.env)
            if rule.meta.any_module:
                reported.append(bool(found))
            else:
                assert found == [], [f"{f.span.start}: {f.message}" for f in found]
    if rule.meta.any_module:
        assert any(reported), f"{rule.meta.id} runs in any module but reports no plain case"


def test_any_module_and_distributed_only_exclude_each_other() -> None:
    for rule in all_rules():
        assert not (rule.meta.any_module and rule.meta.distributed_only), rule.meta.id


def _imports_a_distributed_framework(tree: ast.Module) -> bool:
    """An import the framework tables mark as distributed (accelerate, DeepSpeed, mpi4py)."""
    from ddp_lsp.core import names as known_names

    return any(
        known_names.is_distributed_import(qual)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for _, qual in known_names.import_bindings(node)
    )


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.meta.id)
def test_fix_availability_matches_the_cases(rule) -> None:
    """``RuleMeta.fix`` (what `ddp-lsp rules` and the docs promise) agrees with the cases:
    NONE offers no fix on any case, ALWAYS on every one, SOMETIMES on some but not all."""
    from ddp_lsp.core.types import FixAvailability
    from tests.casekit import unmark

    offered = []
    for case in rule.cases:
        if isinstance(case, Invalid):
            m = unmark(case.code)
            found = findings(rule, m.code, case.distributed, case.env)
            offered.append(any(f.fixes for f in found))
    assert offered, f"{rule.meta.id} has no INVALID case"
    if rule.meta.fix is FixAvailability.NONE:
        assert not any(offered), f"{rule.meta.id} says fix=none but a case offers a fix"
    elif rule.meta.fix is FixAvailability.ALWAYS:
        assert all(offered), f"{rule.meta.id} says fix=always but a case offers none"
    else:
        assert any(offered) and not all(offered), (
            f"{rule.meta.id} says fix=sometimes, but {sum(offered)} of {len(offered)} cases "
            "offer a fix: add the case that shows the other side, or correct RuleMeta.fix"
        )
