"""``ddp-lsp rules`` and ``ddp-lsp explain``."""

from __future__ import annotations

import json

from ddp_lsp import docs
from ddp_lsp.core.registry import all_meta


def test_rules_table_lists_every_rule(cli_run) -> None:
    r = cli_run("rules")
    assert r.rc == 0
    lines = r.out.splitlines()
    assert lines[0].split() == ["id", "name", "severity", "fix", "summary"]
    for meta in all_meta():
        (line,) = [x for x in lines if x.startswith(meta.id + " ")]
        assert meta.name in line and meta.severity.label in line and meta.summary in line
        assert f" {meta.fix.value} " in line
    assert len(lines) == len(all_meta()) + 1


def test_rules_json(cli_run) -> None:
    r = cli_run("rules", "--format", "json")
    rows = json.loads(r.out)
    assert [row["code"] for row in rows] == [m.id for m in all_meta()]
    ddp201 = next(row for row in rows if row["code"] == "DDP201")
    assert ddp201 == {
        "code": "DDP201",
        "name": "clip-without-unscale",
        "severity": "error",
        "fix": "sometimes",
        "summary": ddp201["summary"],
        "default_on": True,
        "url": ddp201["url"],
    }
    assert ddp201["url"].endswith("/DDP201.md") and ddp201["summary"]
    assert next(row for row in rows if row["code"] == "DDP304")["default_on"] is False


def test_rules_off_by_default_say_how_to_select_them(cli_run) -> None:
    line = next(x for x in cli_run("rules").out.splitlines() if x.startswith("DDP304 "))
    assert line.endswith("(off by default: select DDP304)")
    assert "*Off by default:* runs where `select` names `DDP304`" in (
        docs.rule_markdown("DDP304") or ""
    )
    assert "*Off by default.*" in docs.index_markdown()
    assert "Off by default" not in (docs.rule_markdown("DDP201") or "")


def test_ddp503_is_off_by_default_and_says_so(cli_run) -> None:
    rows = json.loads(cli_run("rules", "--format", "json").out)
    assert next(row for row in rows if row["code"] == "DDP503")["default_on"] is False
    line = next(x for x in cli_run("rules").out.splitlines() if x.startswith("DDP503 "))
    assert line.endswith("(off by default: select DDP503)")
    assert "*Off by default:* runs where `select` names `DDP503`" in (
        docs.rule_markdown("DDP503") or ""
    )


def test_explain_prints_rule_markdown(cli_run) -> None:
    r = cli_run("explain", "DDP201")
    assert r.rc == 0 and r.out == docs.rule_markdown("DDP201")
    assert r.out.startswith("# DDP201 clip-without-unscale")
    assert cli_run("explain", "clip-without-unscale").out == r.out
    assert cli_run("explain", "ddp201").out == r.out


def test_explain_unknown_rule_exit_2(cli_run) -> None:
    r = cli_run("explain", "DDP777")
    assert r.rc == 2 and r.out == ""
    assert "unknown rule 'DDP777'" in r.err and "ddp-lsp rules" in r.err


def test_explain_without_id_is_usage_error(cli_run) -> None:
    r = cli_run("explain")
    assert r.rc == 2 and "usage" in r.err
