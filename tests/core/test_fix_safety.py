"""The fix-safety sweep as a property: on any mix of the rules' own cases, every fix of every
finding applies to text that still parses, and fix-all is idempotent.

Texts are built from the INVALID (and VALID) snippets of every rule, two to four of them
joined, so fixes meet code they were not written next to (several imports to extend, the same
helper defined twice, findings of different rules in one file). For each finding, each of its
fixes (safe and unsafe) applied alone gives parsable Python; fix-all (safe, then with unsafe
fixes) parses, and running it again on its own output changes nothing. Bounded example count.
"""

from __future__ import annotations

import ast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.fixes import apply_edits
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import Invalid
from ddp_lsp.core.settings import Settings
from tests.casekit import unmark

SNIPPETS = sorted({unmark(c.code).code for r in all_rules() for c in r.cases if c.env is None})
INVALID = sorted(
    {
        unmark(c.code).code
        for r in all_rules()
        for c in r.cases
        if isinstance(c, Invalid) and c.env is None and r.meta.fix.value != "none"
    }
)
SETTINGS = Settings(assume_distributed=True)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


texts = st.tuples(
    st.sampled_from(INVALID),  # at least one snippet with a fix
    st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=3),
    st.booleans(),
).map(lambda t: "\n\n".join([t[0], *t[1]] if t[2] else [*t[1], t[0]]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_every_fix_parses_and_fix_all_is_idempotent(text: str) -> None:
    assert _parses(text)
    findings = analyze(text, SETTINGS).findings
    for f in findings:
        for fix in f.fixes:
            fixed = apply_edits(text, fix.edits)
            assert _parses(fixed), f"{f.rule_id} fix {fix.title!r} broke the code:\n{fixed}"
    for unsafe in (False, True):
        once, _ = fix_text(text, SETTINGS, unsafe=unsafe)
        assert _parses(once), f"fix-all (unsafe={unsafe}) broke the code:\n{once}"
        twice, n = fix_text(once, SETTINGS, unsafe=unsafe)
        assert (twice, n) == (once, 0), f"fix-all (unsafe={unsafe}) is not idempotent"


def test_the_sweep_has_fixes_to_try() -> None:
    """The property is not vacuous: most INVALID snippets with a fixable rule carry a fix."""
    with_fixes = sum(any(f.fixes for f in analyze(code, SETTINGS).findings) for code in INVALID)
    assert with_fixes >= len(INVALID) // 2 > 10
