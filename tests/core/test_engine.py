"""Engine behaviour: rule isolation, reuse of chunk findings, suppressions, settings, fix-all."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from ddp_lsp.config import (
    ConfigError,
    load_settings,
    settings_from_mapping,
    settings_from_pyproject,
)
from ddp_lsp.core.crossfile import ModuleProjectFacts
from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze, fix_text
from ddp_lsp.core.registry import all_rules
from ddp_lsp.core.rule import ChunkContext, Rule
from ddp_lsp.core.settings import Settings
from ddp_lsp.core.suppress import add_suppression, codes_on_line
from ddp_lsp.core.types import Finding, Pos, RuleMeta, Severity

BUGGY = """import torch
import torch.distributed as dist

def train(model, loader, optimizer, scaler):
    for x, y in loader:
        scaler.scale(model(x).sum()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()


def other(a):
    return a + 1
"""
CLIP_LINE = 6


class Boom(Rule):
    meta = RuleMeta("DDP990", "boom", Severity.ERROR, "always raises")

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        raise RuntimeError("kaboom")
        yield  # pragma: no cover


class Counting(Rule):
    meta = RuleMeta("DDP991", "counting", Severity.HINT, "counts its runs")
    runs = 0

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        Counting.runs += 1
        return iter(())


def test_a_crashing_rule_loses_only_its_own_findings(caplog: pytest.LogCaptureFixture) -> None:
    rules = (*all_rules(), Boom())
    result = analyze(BUGGY, Settings(), rules=rules)
    assert any(f.rule_id == "DDP201" for f in result.findings)
    assert {e.rule_id for e in result.errors} == {"DDP990"}
    assert "kaboom" in result.errors[0].message
    assert "DDP990" in caplog.text


def test_findings_are_reused_while_chunk_and_facts_are_unchanged() -> None:
    Counting.runs = 0
    rules = (Counting(),)
    doc = Document(BUGGY)
    analyze(doc, Settings(), rules=rules)
    chunks = len(doc.chunks())
    assert Counting.runs == chunks  # every chunk runs once
    Counting.runs = 0
    last = doc.line_count - 2
    doc.apply_edit(Pos(last, 15), Pos(last, 16), "2")  # inside `other`: facts unchanged
    analyze(doc, Settings(), rules=rules)
    assert Counting.runs == 1
    Counting.runs = 0
    doc.apply_edit(Pos(0, 0), Pos(0, 0), "import contextlib\n")  # a new import: facts change
    analyze(doc, Settings(), rules=rules)
    # ... but this rule reads none of them: only the edited chunk runs again.
    assert Counting.runs == 1


class ReadsAlias(Rule):
    """Counts its runs; reads one alias of the module facts."""

    meta = RuleMeta("DDP992", "reads-alias", Severity.HINT, "reads an alias")
    runs = 0
    name = "contextlib"

    def check(self, ctx: ChunkContext) -> Iterator[Finding]:
        ReadsAlias.runs += 1
        ctx.facts.aliases.get(self.name)
        return iter(())


def test_a_fact_change_reruns_only_the_chunks_that_read_it() -> None:
    reads_new, reads_old = ReadsAlias(), ReadsAlias()
    reads_old.name = "torch"
    for rule, expect_all in ((reads_new, True), (reads_old, False)):
        doc = Document(BUGGY)
        analyze(doc, Settings(), rules=(rule,))
        ReadsAlias.runs = 0
        doc.apply_edit(Pos(0, 0), Pos(0, 0), "import contextlib\n")
        analyze(doc, Settings(), rules=(rule,))
        assert doc.rules_ran == ReadsAlias.runs
        assert ReadsAlias.runs == (len(doc.chunks()) if expect_all else 1), rule.name


PROJECT_APPEARS = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def setup(rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(rank)


def make_loader(dataset):
    return DataLoader(dataset, batch_size=8, shuffle=True)


def step(model, batch):
    return model(batch).sum()


def report(values):
    return sum(values) / len(values)
"""


def test_the_project_appearing_reruns_only_the_chunks_whose_answers_it_changes() -> None:
    # An editor shows a file before its project index is ready; the index's first facts then
    # arrive. Facts that say nothing new of the module must re-run no chunk (every chunk used
    # to read "is there a project", and a 20,000-line file took 1.6 s on the next keystroke);
    # a path that makes the module test code re-runs the chunks that ask (DDP401's loader).
    doc = Document(PROJECT_APPEARS)
    alone = analyze(doc)
    assert any(f.rule_id == "DDP401" for f in alone.findings)
    plain = analyze(doc, project=ModuleProjectFacts("train", "train.py", root="/p"))
    assert doc.rules_ran == 0
    assert [(f.rule_id, f.span) for f in plain.findings] == [
        (f.rule_id, f.span) for f in alone.findings
    ]
    test = ModuleProjectFacts("tests.test_train", "tests/test_train.py", root="/p")
    in_tests = analyze(doc, project=test)
    assert 0 < doc.rules_ran < len(doc.chunks())
    assert not any(f.rule_id == "DDP401" for f in in_tests.findings)


def test_suppression_comments() -> None:
    lines = BUGGY.splitlines(keepends=True)
    for comment in (
        "  # ddp-lsp: ignore[DDP201]",
        "  # ddp-lsp: ignore",
        "  # noqa: DDP201",
        "  # noqa",
    ):
        text = "".join(
            line.rstrip("\n") + comment + "\n" if i == CLIP_LINE else line
            for i, line in enumerate(lines)
        )
        assert not [f for f in analyze(text).findings if f.rule_id == "DDP201"], comment
    other = BUGGY.replace("1.0)\n", "1.0)  # ddp-lsp: ignore[DDP999]\n")
    assert [f for f in analyze(other).findings if f.rule_id == "DDP201"]


def test_add_suppression_extends_existing_comment() -> None:
    assert add_suppression("x = 1\n", "DDP201") == "x = 1  # ddp-lsp: ignore[DDP201]\n"
    assert add_suppression("x = 1  # ddp-lsp: ignore[DDP101]\r\n", "DDP201") == (
        "x = 1  # ddp-lsp: ignore[DDP101, DDP201]\r\n"
    )
    assert (
        add_suppression("x  # ddp-lsp: ignore[DDP201]\n", "DDP201")
        == "x  # ddp-lsp: ignore[DDP201]\n"
    )
    assert codes_on_line("x  # noqa: E501, DDP201") == {"E501", "DDP201"}


def test_select_ignore_and_severity() -> None:
    assert not analyze(BUGGY, Settings(ignore=("DDP2",))).findings
    assert analyze(BUGGY, Settings(select=("DDP201",))).findings
    s = settings_from_mapping({"severity": {"DDP201": "hint"}})
    f = next(f for f in analyze(BUGGY, s).findings if f.rule_id == "DDP201")
    assert f.severity is Severity.HINT
    # A more specific select wins over a broader ignore (ruff's habit).
    assert analyze(BUGGY, Settings(select=("DDP201",), ignore=("DDP2",))).findings


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"selec": ["DDP1"]}, "unknown key 'selec'"),
        ({"select": "DDPX"}, "'DDPX' is not a rule id"),
        ({"select": [1]}, "must be a list of strings"),
        ({"severity": {"DDP201": "loud"}}, "unknown severity 'loud'"),
        ({"severity": {"E501": "hint"}}, "'E501' is not a rule id"),
        ({"assume-distributed": "yes"}, "must be true or false"),
        ({"project": "off"}, "must be true or false"),
        ({"rank-guard-names": ["not an id"]}, "not a Python identifier"),
        ({"select": ["DDP999"]}, "'DDP999' matches no rule"),
        ({"ignore": ["DDP9"]}, "'DDP9' matches no rule"),
        ({"severity": {"DDP999": "error"}}, "'DDP999' is not a rule"),
    ],
)
def test_invalid_settings_name_the_key(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_mapping(data, "pyproject.toml [tool.ddp-lsp]")
    assert needle in str(err.value)
    assert "pyproject.toml" in str(err.value)


def test_pyproject_loading(tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ddp-lsp]\nignore = ["DDP5"]\nrank-guard-names = ["is_leader", "my_rank"]\n'
    )
    sub = tmp_path / "pkg"
    sub.mkdir()
    s = load_settings(sub / "train.py")
    assert s.ignore == ("DDP5",)
    assert "is_leader" in s.rank_model.predicates and "my_rank" in s.rank_model.names
    assert s.project and not settings_from_mapping({"project": False}).project
    (tmp_path / "pyproject.toml").write_text("[tool.ddp-lsp\nbroken")
    with pytest.raises(ConfigError, match="invalid TOML"):
        settings_from_pyproject(tmp_path / "pyproject.toml")


def test_assume_distributed_and_plain_code() -> None:
    # Plain single-GPU code gets only the rules whose bug is a bug in any program (clipping
    # scaled gradients, DDP201: RuleMeta.any_module); assume-distributed runs every rule.
    plain = BUGGY.replace("import torch.distributed as dist\n", "") + (
        '\n\ndef save(model):\n    torch.save(model.state_dict(), "model.pt")\n'
    )
    assert {f.rule_id for f in analyze(plain).findings} == {"DDP201"}
    every = Settings(select=("DDP", "DDP501"), assume_distributed=True)  # DDP501: off by default
    assumed = {f.rule_id for f in analyze(plain, every).findings}
    assert {"DDP201", "DDP501"} <= assumed


def test_fix_all_is_idempotent_and_parses() -> None:
    fixed, n = fix_text(BUGGY)
    assert n >= 1
    ast.parse(fixed)
    assert fix_text(fixed) == (fixed, 0)
    assert "scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_" in fixed


WRAPPER_SAVED = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(net, rank):
    model = DDP(net)
    if rank == 0:
        torch.save(model.state_dict(), "model.pt")
"""


def test_a_rule_off_by_default_runs_only_where_select_names_it() -> None:
    """DDP304 is off by default (docs/accuracy.md F42, F43): the default settings and a
    prefix do not run it; its full id in `select` does, and `ignore` still wins."""
    from ddp_lsp.core.registry import default_on, rule_by_id

    rule = rule_by_id("DDP304")
    assert rule is not None and not rule.meta.default_on and not default_on("DDP304")
    assert default_on("DDP201")

    def ids(settings: Settings) -> set[str]:
        return {f.rule_id for f in analyze(WRAPPER_SAVED, settings).findings}

    assert "DDP304" not in ids(Settings())
    assert "DDP304" not in ids(Settings(select=("DDP3",)))
    assert "DDP304" in ids(Settings(select=("DDP", "DDP304")))
    assert "DDP304" in ids(Settings(select=("DDP304",)))
    assert "DDP304" not in ids(Settings(select=("DDP304",), ignore=("DDP304",)))
    # Given the rule explicitly, the findings are still filtered by the settings.
    assert not analyze(WRAPPER_SAVED, Settings(), rules=(rule,)).findings
    assert analyze(WRAPPER_SAVED, Settings(select=("DDP304",)), rules=(rule,)).findings
