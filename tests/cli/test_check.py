"""``ddp-lsp check``: exit statuses, output formats, selection, configuration, stdin."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli.conftest import BUGGY, BUGGY_LINE, CLEAN, write


def test_findings_exit_1_and_text_line(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--select", "DDP201")
    assert r.rc == 1
    assert f"train.py:{BUGGY_LINE}:9: DDP201 [error] [*] " in r.out
    assert "Found 1 finding (1 error)." in r.out
    assert "[*] 1 fixable with `ddp-lsp check --fix`." in r.out
    assert r.err == ""


def test_clean_file_exit_0(cli_run, project: Path) -> None:
    write(project / "ok.py", CLEAN)
    r = cli_run("check", "ok.py")
    assert (r.rc, r.out) == (0, "All checks passed!\n")


def test_directory_is_walked_and_default_excludes_apply(cli_run, project: Path) -> None:
    write(project / "pkg" / "a.py", BUGGY)
    write(project / "pkg" / "deep" / "b.py", BUGGY)
    write(project / "pkg" / "notes.txt", BUGGY)
    write(project / ".venv" / "lib" / "c.py", BUGGY)
    write(project / "build" / "d.py", BUGGY)
    write(project / "pkg" / "__pycache__" / "e.py", BUGGY)
    r = cli_run("check", "--select", "DDP201", "-q")
    files = sorted({line.split(":")[0] for line in r.out.splitlines()})
    assert files == ["pkg/a.py", "pkg/deep/b.py"]
    assert r.rc == 1


def test_config_exclude_and_explicit_file_and_force_exclude(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nexclude = ["legacy", "gen_*.py"]\n')
    write(project / "legacy" / "old.py", BUGGY)
    write(project / "gen_x.py", BUGGY)
    write(project / "main.py", BUGGY)
    r = cli_run("check", ".", "--select", "DDP201", "-q")
    assert [line.split(":")[0] for line in r.out.splitlines()] == ["main.py"]
    # Named on the command line: checked anyway (ruff's habit), unless --force-exclude.
    assert cli_run("check", "gen_x.py", "-q", "--select", "DDP201").rc == 1
    r = cli_run("check", "gen_x.py", "--force-exclude", "--select", "DDP201")
    assert r.rc == 0 and "DDP201" not in r.out


def test_project_under_a_directory_named_build_is_not_excluded(
    cli_run, tmp_path, monkeypatch
) -> None:
    root = tmp_path / "build" / "proj"
    write(root / "a.py", BUGGY)
    monkeypatch.chdir(root)
    r = cli_run("check", str(root), "--select", "DDP201", "-q")
    assert r.rc == 1 and "a.py" in r.out


def test_select_and_ignore_override_config(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nignore = ["DDP201"]\n')
    write(project / "train.py", BUGGY)
    assert "DDP201" not in cli_run("check", "train.py").out
    r = cli_run("check", "train.py", "--ignore", "DDP5", "--select", "DDP2")
    assert r.rc == 1 and "DDP201" in r.out
    r = cli_run("check", "train.py", "--ignore", "DDP201,DDP5")
    assert "DDP201" not in r.out


def test_unknown_selector_is_a_usage_error(cli_run, project: Path) -> None:
    """A typo in --select must not make CI check nothing and pass."""
    write(project / "ok.py", CLEAN)
    r = cli_run("check", "ok.py", "--select", "DDP999")
    assert r.rc == 2
    assert "'DDP999' matches no rule" in r.err and "Traceback" not in r.err


def test_bad_config_value_exit_2_without_traceback(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nassume-distributed = "yes"\n')
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py")
    assert r.rc == 2
    assert "assume-distributed" in r.err and "true or false" in r.err
    assert "Traceback" not in r.err and r.out == ""


def test_bad_select_on_command_line_exit_2(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--select", "E501")
    assert r.rc == 2 and "'E501' is not a rule id" in r.err and "Traceback" not in r.err


def test_explicit_config_file(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    cfg = write(project / "conf" / "pyproject.toml", '[tool.ddp-lsp]\nignore = ["DDP2"]\n')
    assert cli_run("check", "train.py", "--config", str(cfg)).out.count("DDP201") == 0
    r = cli_run("check", "train.py", "--config", "missing.toml")
    assert r.rc == 2 and "missing.toml" in r.err


def test_usage_errors_exit_2(cli_run, project: Path) -> None:
    r = cli_run("check", "--format", "xml")
    assert r.rc == 2 and "invalid choice" in r.err
    r = cli_run("check", "--no-such-flag")
    assert r.rc == 2 and "--no-such-flag" in r.err
    assert cli_run("check", "--jobs", "0").rc == 2


def test_help_exit_0(cli_run) -> None:
    r = cli_run("check", "--help")
    assert r.rc == 0 and "--unsafe-fixes" in r.out and "--stdin-filename" in r.out


def test_exit_zero(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--exit-zero")
    assert r.rc == 0 and "DDP201" in r.out


def test_quiet_prints_findings_only(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "-q", "--select", "DDP201")
    assert r.out.splitlines() == [
        line for line in r.out.splitlines() if line.startswith("train.py:")
    ]
    assert len(r.out.splitlines()) == 1


def test_statistics(cli_run, project: Path) -> None:
    write(project / "a.py", BUGGY)
    write(project / "b.py", BUGGY)
    r = cli_run("check", ".", "--statistics", "--select", "DDP201")
    assert r.rc == 1
    assert r.out == "2\tDDP201\t[*] clip-without-unscale\n"
    r = cli_run("check", ".", "--statistics", "--format", "json", "--select", "DDP201")
    assert json.loads(r.out) == [
        {"code": "DDP201", "name": "clip-without-unscale", "count": 2, "fixable": 2}
    ]


def test_json_format_is_ruff_shaped(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--format", "json", "--select", "DDP201")
    assert r.rc == 1
    (item,) = json.loads(r.out)
    assert set(item) >= {
        "code",
        "message",
        "severity",
        "filename",
        "location",
        "end_location",
        "fix",
        "url",
    }
    assert item["code"] == "DDP201" and item["severity"] == "error"
    assert item["filename"] == str((project / "train.py").resolve())
    assert item["location"] == {"row": BUGGY_LINE, "column": 9}
    assert item["end_location"]["row"] == BUGGY_LINE and item["end_location"]["column"] > 9
    assert item["url"].endswith("/DDP201.md")
    fix = item["fix"]
    assert fix["applicability"] == "safe" and "unscale_" in fix["message"]
    (edit,) = fix["edits"]
    assert edit["content"] == "        scaler.unscale_(opt)\n"
    assert edit["location"] == edit["end_location"] == {"row": BUGGY_LINE, "column": 1}


def test_json_no_findings_is_empty_list(cli_run, project: Path) -> None:
    write(project / "ok.py", CLEAN)
    r = cli_run("check", "ok.py", "--format", "json")
    assert (r.rc, json.loads(r.out)) == (0, [])


def test_github_format(cli_run, project: Path) -> None:
    write(project / "src" / "train.py", BUGGY)
    r = cli_run("check", "src", "--format", "github", "--select", "DDP201")
    assert r.rc == 1
    (line,) = r.out.splitlines()
    assert line.startswith(
        f"::error file=src/train.py,line={BUGGY_LINE},col=9,endLine={BUGGY_LINE},endColumn="
    )
    assert ",title=DDP201::" in line
    message = line.split("::", 2)[2]
    assert "scaler.unscale_(opt)" in message and "\n" not in message


def test_github_escapes_properties_and_data() -> None:
    from ddp_lsp.reporters.github import escape_data, escape_property

    assert escape_property("a,b:c%\n") == "a%2Cb%3Ac%25%0A"
    assert escape_data("50% done\r\nnext: x") == "50%25 done%0D%0Anext: x"


def test_github_warning_for_non_error_severity(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nseverity = { DDP201 = "hint" }\n')
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--format", "github", "--select", "DDP201")
    assert r.out.startswith("::warning file=train.py,")


def test_stdin(cli_run, project: Path) -> None:
    r = cli_run("check", "-", "--select", "DDP201", stdin=BUGGY.encode())
    assert r.rc == 1 and r.out.startswith(f"-:{BUGGY_LINE}:9: DDP201")
    r = cli_run(
        "check", "-", "--stdin-filename", "pkg/t.py", "--select", "DDP201", stdin=BUGGY.encode()
    )
    assert r.out.startswith(f"pkg/t.py:{BUGGY_LINE}:9: DDP201")


def test_stdin_filename_picks_up_config(cli_run, project: Path) -> None:
    write(project / "sub" / "pyproject.toml", '[tool.ddp-lsp]\nignore = ["DDP201"]\n')
    r = cli_run("check", "-", "--stdin-filename", "sub/t.py", stdin=BUGGY.encode())
    assert "DDP201" not in r.out


def test_stdin_fix_prints_fixed_code(cli_run, project: Path) -> None:
    r = cli_run("check", "-", "--fix", "--select", "DDP201", stdin=BUGGY.encode())
    assert r.rc == 0
    assert "scaler.unscale_(opt)\n        torch.nn.utils.clip_grad_norm_" in r.out
    assert "Fixed 1 finding." in r.err


def test_missing_path_reported_others_checked(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "nope.py", "train.py", "--select", "DDP201")
    assert r.rc == 2
    assert "error: nope.py: no such file or directory" in r.err
    assert "train.py:" in r.out


def test_no_python_files_warns(cli_run, project: Path) -> None:
    (project / "empty").mkdir()
    r = cli_run("check", "empty")
    assert r.rc == 0 and "no Python files" in r.err


def test_suppression_comment_respected(cli_run, project: Path) -> None:
    code = BUGGY.replace("1.0)\n", "1.0)  # ddp-lsp: ignore[DDP201]\n")
    write(project / "train.py", code)
    assert cli_run("check", "train.py", "--select", "DDP201").rc == 0


def test_explicit_directory_with_a_default_excluded_name_is_checked(cli_run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nexclude = ["skip_me"]\n')
    write(project / "build" / "gen" / "a.py", BUGGY)
    write(project / "build" / "skip_me" / "b.py", BUGGY)
    assert cli_run("check", ".", "--select", "DDP201").out.count("DDP201 ") == 0
    r = cli_run("check", "build", "--select", "DDP201", "-q")
    assert r.out.splitlines()[0].startswith("build/gen/a.py:") and len(r.out.splitlines()) == 1


def test_unlistable_directory_is_reported(cli_run, project: Path, monkeypatch) -> None:
    from ddp_lsp.project import discover

    write(project / "pkg" / "a.py", BUGGY)
    real_walk = discover.os.walk

    def walk(top, onerror=None, **kw):  # type: ignore[no-untyped-def]
        onerror(PermissionError(13, "Permission denied", str(project / "pkg" / "secret")))
        yield from real_walk(top, onerror=onerror, **kw)

    monkeypatch.setattr(discover.os, "walk", walk)
    r = cli_run("check", ".", "--select", "DDP201")
    assert r.rc == 2
    assert "error: pkg/secret: cannot list: Permission denied" in r.err
    assert "pkg/a.py:" in r.out


def test_verbose_reports_timing_and_output_format_alias(cli_run, project: Path) -> None:
    write(project / "train.py", BUGGY)
    r = cli_run("check", "train.py", "--output-format", "json", "--verbose", "--select", "DDP201")
    assert r.rc == 1 and json.loads(r.out)[0]["code"] == "DDP201"
    assert re.search(r"^checked 1 file\(s\) in \d+\.\d\ds$", r.err, re.M)


def test_launch_config_and_preflight_report_reach_the_rules(tmp_path, capsys) -> None:
    """DDP405 compares workers x processes per node with the CPUs: the processes come from the
    torchrun line in run.sh next to the script, the CPUs from a preflight report."""
    import json

    from ddp_lsp.cli import main

    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n\n"
        "def main(ds):\n    loader = DataLoader(ds, batch_size=8, num_workers=6)\n"
        "    for x in loader:\n        x.cuda()\n",
        encoding="utf-8",
    )
    (tmp_path / "run.sh").write_text("torchrun --nproc-per-node=4 train.py\n", encoding="utf-8")
    report = {
        "schema": "ddp-lsp-preflight/1",
        "host": "gpu01",
        "created": "2026-11-29T10:00:00+00:00",
        "python": "/usr/bin/python3",
        "torch": "2.13.0",
        "probes": [
            {
                "id": "cpu.workers",
                "title": "CPU",
                "status": "pass",
                "message": "",
                "values": {"cpus": 16, "cpu_count": 16},
                "fix": "",
                "references": [],
                "duration_s": 0.0,
            }
        ],
    }
    pf = tmp_path / "pf.json"
    pf.write_text(json.dumps(report), encoding="utf-8")
    rc = main(
        [
            "check",
            str(tmp_path / "train.py"),
            "--select",
            "DDP405",
            "--preflight",
            str(pf),
            "--format",
            "json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1, out
    message = out[0]["message"]
    assert "run.sh" in message and "gpu01" in message, message


def test_code_that_contradicts_the_measured_machine(tmp_path, capsys) -> None:
    """With a preflight report of a 2-GPU node without NCCL: `cuda:3` (DDP507) and
    backend="nccl" (DDP508) are errors; without the report both rules stay silent."""
    import json

    from ddp_lsp.cli import main

    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n"
        "def setup():\n"
        '    dist.init_process_group(backend="nccl")\n'
        '    return torch.device("cuda:3")\n',
        encoding="utf-8",
    )

    def probe(pid: str, status: str, values: dict) -> dict:
        return {
            "id": pid,
            "title": pid,
            "status": status,
            "message": "",
            "values": values,
            "fix": "",
            "references": [],
            "duration_s": 0.0,
        }

    report = {
        "schema": "ddp-lsp-preflight/1",
        "host": "gpu01",
        "created": "2026-11-29T10:00:00+00:00",
        "python": "/usr/bin/python3",
        "torch": "2.13.0",
        "probes": [
            probe("cuda.basic", "pass", {"device_count": 2}),
            probe("env.versions", "pass", {"nccl_available": False}),
        ],
    }
    pf = tmp_path / "pf.json"
    pf.write_text(json.dumps(report), encoding="utf-8")
    args = ["check", str(tmp_path / "train.py"), "--select", "DDP507,DDP508", "--format", "json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main([*args, "--preflight", str(pf)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert sorted(f["code"] for f in out) == ["DDP507", "DDP508"]
    assert all("gpu01" in f["message"] for f in out)
