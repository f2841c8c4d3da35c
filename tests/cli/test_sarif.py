"""``--format sarif``: SARIF 2.1.0 that GitHub code scanning accepts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import sarif_schema
from tests.cli.conftest import BUGGY, BUGGY_LINE, write


def _sarif(cli_run, *args: str):  # type: ignore[no-untyped-def]
    r = cli_run("check", *args, "--format", "sarif")
    return r, json.loads(r.out)


def test_validator_catches_what_it_should() -> None:
    """The hand-written validator must be able to fail."""
    assert sarif_schema.problems({"runs": []}) == ["sarifLog: missing required 'version'"]
    bad = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"rules": [{"id": "X"}]}},
                "results": [
                    {
                        "level": "fatal",
                        "ruleIndex": 3,
                        "ruleId": "X",
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": "src\\a.py"},
                                    "region": {"startLine": 0, "startColumn": 5, "endColumn": 2},
                                }
                            }
                        ],
                    }
                ],
            }
        ],
    }
    found = "\n".join(sarif_schema.problems(bad))
    for expected in (
        "missing required 'name'",
        "missing required 'message'",
        "'fatal'",
        "ruleIndex 3",
        "backslash",
        "startLine: must be >= 1",
        "endColumn before",
    ):
        assert expected in found, found


def test_sarif_is_valid_and_points_at_the_finding(cli_run, project: Path) -> None:
    write(project / "src" / "train.py", BUGGY)
    r, log = _sarif(cli_run, "src", "--select", "DDP201")
    assert r.rc == 1
    assert sarif_schema.problems(log) == []
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ddp-lsp" and driver["version"]
    rules = {rule["id"]: rule for rule in driver["rules"]}
    rule = rules["DDP201"]
    assert rule["name"] == "clip-without-unscale"
    assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
    assert rule["helpUri"].endswith("DDP201.md")
    assert rule["defaultConfiguration"]["level"] == "error"
    assert "## Why is this bad?" in rule["help"]["markdown"]
    (result,) = run["results"]
    assert result["ruleId"] == "DDP201" and result["level"] == "error"
    assert driver["rules"][result["ruleIndex"]]["id"] == "DDP201"
    loc = result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    region = loc["region"]
    assert (region["startLine"], region["startColumn"], region["endLine"]) == (
        BUGGY_LINE,
        9,
        BUGGY_LINE,
    )
    assert region["endColumn"] == 9 + len("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.resolve().as_uri() + "/"
    assert run["invocations"][0]["executionSuccessful"] is True
    (fix,) = result["fixes"]
    (rep,) = fix["artifactChanges"][0]["replacements"]
    assert rep["insertedContent"]["text"] == "        scaler.unscale_(opt)\n"


def test_sarif_uri_relative_to_repo_root_from_a_subdirectory(
    cli_run, project: Path, monkeypatch
) -> None:
    write(project / "pkg" / "sub" / "train.py", BUGGY)
    monkeypatch.chdir(project / "pkg")
    _, log = _sarif(cli_run, "sub", "--select", "DDP201")
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"][
        "uri"
    ]
    assert uri == "pkg/sub/train.py"


def test_sarif_columns_are_code_points(cli_run, project: Path) -> None:
    code = BUGGY.replace("        torch.nn.utils.clip", "        ñ = 1; torch.nn.utils.clip")
    write(project / "train.py", code)
    _, log = _sarif(cli_run, "train.py", "--select", "DDP201")
    region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region["startColumn"] == 9 + len("ñ = 1; ")


def test_sarif_with_no_findings_is_valid(cli_run, project: Path) -> None:
    write(project / "ok.py", "x = 1\n")
    r, log = _sarif(cli_run, "ok.py")
    assert r.rc == 0 and log["runs"][0]["results"] == []
    assert sarif_schema.problems(log) == []


def test_every_rule_has_a_descriptor(cli_run, project: Path) -> None:
    from ddp_lsp.core.registry import all_meta

    write(project / "ok.py", "x = 1\n")
    _, log = _sarif(cli_run, "ok.py")
    ids = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert ids == [m.id for m in all_meta()]
    levels = {r["defaultConfiguration"]["level"] for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert levels <= sarif_schema.LEVELS


def test_sarif_of_the_buggy_example_is_valid(cli_run, project: Path) -> None:
    """Every implemented rule's output (multi-line spans, related locations, unsafe fixes)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "train_buggy.py"
    write(project / "train.py", example.read_bytes())
    r, log = _sarif(cli_run, "train.py", "--unsafe-fixes")
    assert r.rc == 1
    assert sarif_schema.problems(log) == []
    results = log["runs"][0]["results"]
    assert len(results) >= 10
    assert all(
        res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "train.py"
        for res in results
    )
