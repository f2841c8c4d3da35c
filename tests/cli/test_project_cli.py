"""``ddp-lsp check`` with the project view: each file is analysed with what the other files of
its project say (``main.py`` wraps the model in DDP and passes it to ``engine.py``).

The projects are copies of the fixtures of ``tests/project`` inside the CLI tests' temporary
repository. The index cache goes to a temporary ``$XDG_CACHE_HOME``, never the user's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ddp_lsp import config
from ddp_lsp.cli import collect
from ddp_lsp.cli import jobs as cli_jobs
from ddp_lsp.cli import settings as cli_settings
from ddp_lsp.project import ProjectIndex, build, compute
from tests.cli import sarif_schema
from tests.cli.conftest import Result, write

FIXTURES = Path(__file__).parent.parent / "project" / "fixtures"
Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def copy_fixture(name: str, dest: Path) -> Path:
    shutil.copytree(FIXTURES / name, dest, dirs_exist_ok=True)
    return dest


def findings(r: Result) -> list[tuple[str, str, int]]:
    """(file name relative to the working directory, code, row) of a JSON run."""
    cwd = Path.cwd()
    return sorted(
        (Path(f["filename"]).relative_to(cwd).as_posix(), f["code"], f["location"]["row"])
        for f in json.loads(r.out)
    )


def codes(r: Result, name: str) -> list[str]:
    return [c for f, c, _ in findings(r) if f == name]


# -- the same findings for a file checked alone and inside its whole project -----------------


def test_file_alone_equals_its_part_of_the_project(cli_run: Run, project: Path) -> None:
    copy_fixture("deit", project)
    whole = cli_run("check", ".", "--format", "json")
    one = cli_run("check", "engine.py", "--format", "json")
    assert "DDP101" in codes(whole, "engine.py")
    assert findings(one) == [f for f in findings(whole) if f[0] == "engine.py"]
    # The whole finding, message and related locations included, not only its code.
    mine = [f for f in json.loads(whole.out) if f["filename"].endswith("/engine.py")]
    assert json.loads(one.out) == mine


def test_from_a_subdirectory_the_root_is_still_found(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_fixture("deit", project)
    monkeypatch.chdir(project / "util")
    r = cli_run("check", "../engine.py", "--format", "json")
    assert "DDP101" in [f["code"] for f in json.loads(r.out)]


def test_no_project_flag_and_config(cli_run: Run, project: Path) -> None:
    copy_fixture("shared", project)
    assert codes(cli_run("check", "engine.py", "--format", "json"), "engine.py") == ["DDP101"]
    assert codes(cli_run("check", "--no-project", ".", "--format", "json"), "engine.py") == []
    config = project / "pyproject.toml"
    config.write_text(config.read_text() + "\n[tool.ddp-lsp]\nproject = false\n")
    assert codes(cli_run("check", ".", "--format", "json"), "engine.py") == []
    # The command line wins over the configuration, both ways.
    r = cli_run("check", "--project", "engine.py", "--format", "json")
    assert codes(r, "engine.py") == ["DDP101"]
    config.write_text(config.read_text().replace("project = false", "project = true"))
    r = cli_run("check", "--no-project", "engine.py", "--format", "json")
    assert codes(r, "engine.py") == []
    assert cli_run("check", "--no-project", "engine.py").rc == 0


def test_project_setting_is_validated(cli_run: Run, project: Path) -> None:
    write(project / "pyproject.toml", '[tool.ddp-lsp]\nproject = "yes"\n')
    write(project / "a.py", "x = 1\n")
    r = cli_run("check", "a.py")
    assert r.rc == 2 and "project" in r.err


# -- roots ------------------------------------------------------------------------------------


def test_one_index_per_root(cli_run: Run, project: Path) -> None:
    copy_fixture("deit", project / "one")
    copy_fixture("resume", project / "two")
    r = cli_run("check", "one/engine.py", "two", "--format", "json", "-v")
    assert "DDP101" in codes(r, "one/engine.py")
    assert "DDP103" in codes(r, "two/train.py")  # resume_from's collective, in utils/
    assert r.err.count("indexed ") == 2
    assert "indexed one: 5 files" in r.err and "indexed two: 2 files" in r.err


def test_outside_any_project_the_folder_is_the_project_and_bare_stdin_is_alone(
    cli_run: Run, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose = copy_fixture("shared", tmp_path / "loose")
    (loose / "pyproject.toml").unlink()
    if build.project_root(loose) is not None:
        pytest.skip("the temporary directory is inside a project")
    monkeypatch.chdir(loose)
    # No pyproject.toml or .git: the working directory is the project (ruff's fallback), so
    # engine.py learns that main_ddp.py passes it a DDP model.
    r = cli_run("check", ".", "--format", "json", "-v")
    assert "DDP101" in codes(r, "engine.py") and "indexed .: 3 files" in r.err
    assert cli_run("check", ".", "--format", "json", "--no-project").out.count("DDP101") == 0

    copy_fixture("shared", project)
    monkeypatch.chdir(project)
    source = (project / "engine.py").read_bytes()
    r = cli_run("check", "-", "--format", "json", stdin=source)
    assert r.rc == 0 and json.loads(r.out) == []


def test_stdin_with_a_filename_in_a_project_uses_the_project(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An editor piping its buffer (unsaved) through the CLI: the buffer's text is what the
    # project sees of that file.
    copy_fixture("shared", project)
    monkeypatch.chdir(project)
    source = (project / "engine.py").read_bytes()
    r = cli_run("check", "-", "--stdin-filename", "engine.py", "--format", "json", stdin=source)
    assert r.rc == 1 and codes(r, "engine.py") == ["DDP101"]
    # The buffer renames the parameter: only the buffer's own summary in the index (not the
    # file on disk) gives `net` the DDP model main_ddp.py passes.
    edited = source.decode().replace("model", "net")
    r = cli_run(
        "check", "-", "--stdin-filename", "engine.py", "--format", "json", stdin=edited.encode()
    )
    assert codes(r, "engine.py") == ["DDP101"] and "`net`" in r.out
    r = cli_run(
        "check",
        "-",
        "--stdin-filename",
        "engine.py",
        "--no-project",
        "--format",
        "json",
        stdin=source,
    )
    assert r.rc == 0 and json.loads(r.out) == []


# -- fixes use the project too ------------------------------------------------------------------


def test_fix_and_diff_use_the_project(cli_run: Run, project: Path) -> None:
    copy_fixture("shared", project)
    before = (project / "engine.py").read_text()
    assert cli_run("check", "--diff", "--no-project", "engine.py").rc == 0
    d = cli_run("check", "--diff", "engine.py")
    assert d.rc == 1 and "no_sync" in d.out and (project / "engine.py").read_text() == before
    f = cli_run("fix", "engine.py", "--format", "json")
    assert "no_sync" in (project / "engine.py").read_text()
    assert "DDP101" not in [x["code"] for x in json.loads(f.out)]
    # The single-GPU entry point is untouched: it gains nothing from the project.
    assert cli_run("check", "train_single.py").rc == 0


# -- broken files ------------------------------------------------------------------------------


def test_broken_files_do_not_break_the_index(cli_run: Run, project: Path) -> None:
    copy_fixture("deit", project)
    write(project / "syntax.py", "def broken(:\n    pass\n")
    write(project / "latin.py", b"x = '\xe9'\n")
    (project / "gone.py").symlink_to(project / "nowhere.py")  # listed, cannot be read
    r = cli_run("check", ".", "--format", "json")
    assert r.rc == 2
    assert "error: latin.py: cannot decode as utf-8" in r.err
    assert "error: gone.py: is a broken symlink (to " in r.err
    assert "DDP000" in codes(r, "syntax.py")
    assert "DDP101" in codes(r, "engine.py")
    alone = cli_run("check", "engine.py", "--format", "json")
    assert alone.rc == 1 and codes(alone, "engine.py") == codes(r, "engine.py")


def test_a_file_the_index_cannot_summarise_costs_only_itself(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddp_lsp.project import index

    real = index.summarise_with_facts

    def poisoned(rel, text, *args):  # type: ignore[no-untyped-def]
        if "POISON" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(rel, text, *args)

    monkeypatch.setattr(index, "summarise_with_facts", poisoned)
    copy_fixture("deit", project)
    write(project / "poison.py", "POISON = 1\n")
    r = cli_run("check", ".", "--format", "json", "-v")
    assert "DDP101" in codes(r, "engine.py")
    assert "warning: poison.py: not in the project index" in r.err
    assert r.rc == 1  # the file itself is still checked, without findings


def test_a_failing_cross_file_step_leaves_files_analysed_alone(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ddp_lsp.project

    def broken(index):  # type: ignore[no-untyped-def]
        raise ValueError("bug in compute")

    monkeypatch.setattr(ddp_lsp.project, "compute", broken)
    copy_fixture("deit", project)
    r = cli_run("check", ".", "--format", "json", "--select", "DDP,DDP304")
    assert "the project index failed (ValueError: bug in compute)" in r.err
    assert codes(r, "engine.py") == [] and "DDP304" in codes(r, "main.py")
    assert r.rc == 1


# -- the index cache ---------------------------------------------------------------------------


def test_index_cache_lives_under_xdg_cache_home(
    cli_run: Run, project: Path, cache_home: Path
) -> None:
    copy_fixture("deit", project)
    cold = cli_run("check", ".", "-v")
    assert "indexed .: 5 files (5 parsed, 0 from the cache)" in cold.err
    assert list((cache_home / "ddp-lsp" / "index").rglob("*.json"))
    warm = cli_run("check", ".", "-v")
    assert "indexed .: 5 files (0 parsed, 5 from the cache)" in warm.err
    assert warm.out == cold.out


def test_an_unwritable_cache_costs_only_speed(
    cli_run: Run, project: Path, cache_home: Path
) -> None:
    cache_home.write_text("a file where the cache directory should be")
    copy_fixture("deit", project)
    r = cli_run("check", "engine.py", "--format", "json")
    assert r.rc == 1 and codes(r, "engine.py") == ["DDP101"]


# -- the process pool --------------------------------------------------------------------------


def _project_jobs(root: Path) -> list[cli_jobs.Job]:
    resolver = cli_settings.SettingsResolver(None, {}, root)
    jobs = [
        cli_jobs.Job(p.relative_to(root).as_posix(), str(p), config.Settings(), "check", False)
        for p in sorted(root.rglob("*.py"))
    ]
    return collect.with_project(jobs, resolver, sys.stderr)


def test_each_job_carries_only_its_own_module_facts(project: Path) -> None:
    copy_fixture("deit", project)
    jobs = {j.path: j for j in _project_jobs(project)}
    engine = jobs["engine.py"].project
    assert engine is not None and engine.path == "engine.py" and engine.extra_kinds
    # Nothing flows into it but what the project says of its functions: single-process code.
    unused = jobs["tools_unused.py"].project
    assert unused is not None and not unused.extra_kinds and not unused.callee_props
    assert unused.distributed is None and "standalone" in unused.single_process


def test_module_facts_pickle_round_trip(project: Path) -> None:
    copy_fixture("deit", project)
    facts = compute(ProjectIndex(project, cache_dir=False).build())
    assert facts.modules
    for m in facts.modules.values():
        back = pickle.loads(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == m and hash(back) == hash(m) and back.key == m.key
        assert back.callee_props.keys() == m.callee_props.keys()
        rebuilt = dataclasses.replace(back)
        assert rebuilt == m and hash(rebuilt) == hash(m)


def test_worker_rehashes_facts_under_another_hash_seed(project: Path) -> None:
    """A spawned worker hashes strings with its own seed; the stored hash must follow."""
    copy_fixture("deit", project)
    jobs = [j for j in _project_jobs(project) if j.project is not None]
    code = (
        "import pickle, sys\n"
        "from ddp_lsp.cli import jobs\n"
        "for job in pickle.loads(sys.stdin.buffer.read()):\n"
        "    p = job.project\n"
        "    assert hash(p) == hash(p.key), job.path\n"
        "    assert p == type(p)(p.module, p.path, p.extra_kinds, p.callee_props,\n"
        "        p.distributed, p.only_called_guarded, p.root, p.single_process), job.path\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    root = Path(cli_jobs.__file__).resolve().parent.parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(jobs),
        capture_output=True,
        env=env,
        cwd=root,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the pool test forks")
def test_pool_equals_sequential_with_project(cli_run: Run, project: Path) -> None:
    copy_fixture("trainer", project / "trainer")
    copy_fixture("deit", project / "deit")
    seq = cli_run("check", ".", "--jobs", "1", "--format", "json")
    par = cli_run("check", ".", "--jobs", "2", "--format", "json")
    assert par.out == seq.out and "DDP101" in codes(seq, "deit/engine.py")


def test_spawned_workers_get_the_project_facts(project: Path) -> None:
    import multiprocessing

    copy_fixture("deit", project)
    jobs = _project_jobs(project)
    seq = [cli_jobs.check_job(j).report for j in jobs]
    par = cli_jobs._run_pool(jobs, 2, multiprocessing.get_context("spawn"))
    assert [o.report for o in par] == seq
    assert "DDP101" in [f.rule_id for r in seq if r.path == "engine.py" for f in r.findings]


# -- reporters ---------------------------------------------------------------------------------


def test_json_and_sarif_point_into_other_files(cli_run: Run, project: Path) -> None:
    copy_fixture("deit", project)
    (item,) = json.loads(cli_run("check", "engine.py", "--format", "json").out)
    main = str((project / "main.py").resolve())
    wrap = [r for r in item["related"] if r["filename"] == main]
    assert [r["location"]["row"] for r in wrap] == [12, 18]  # the wrap, then the call
    assert "wrapped in DistributedDataParallel" in wrap[0]["message"]
    here = [r for r in item["related"] if r["filename"] == item["filename"]]
    assert here and here[0]["message"] == "the optimizer steps here"

    log = json.loads(cli_run("check", "engine.py", "--format", "sarif").out)
    assert sarif_schema.problems(log) == []
    (result,) = log["runs"][0]["results"]
    related = result["relatedLocations"]
    assert [r["id"] for r in related] == list(range(len(related)))
    places = [
        (
            r["physicalLocation"]["artifactLocation"]["uri"],
            r["physicalLocation"]["artifactLocation"]["uriBaseId"],
            r["physicalLocation"]["region"]["startLine"],
        )
        for r in related
    ]
    assert ("main.py", "%SRCROOT%", 12) in places and ("engine.py", "%SRCROOT%", 13) in places


def test_sarif_related_uris_are_relative_to_the_repository_root(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_fixture("deit", project / "sub" / "deit")
    monkeypatch.chdir(project / "sub")
    log = json.loads(cli_run("check", "deit/engine.py", "--format", "sarif").out)
    (result,) = log["runs"][0]["results"]
    uris = {r["physicalLocation"]["artifactLocation"]["uri"] for r in result["relatedLocations"]}
    assert uris == {"sub/deit/engine.py", "sub/deit/main.py"}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "sub/deit/engine.py"
    )


# -- a cold index in worker processes ------------------------------------------------------------


def _big_project(root: Path, files: int = 40) -> None:
    copy_fixture("deit", root)
    filler = "".join(f"def helper_{k}(x):\n    return x + {k}\n\n\n" for k in range(400))
    for i in range(files):
        write(root / "pkg" / f"m{i}.py", f"# module {i}\n{filler}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the pool test forks")
def test_cold_index_in_workers_equals_the_serial_one(
    cli_run: Run, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _big_project(project)
    serial = cli_run("check", ".", "--jobs", "1", "--format", "json", "-v")
    assert "45 files (45 parsed, 0 from the cache)" in serial.err
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-cache"))
    real, parsed = build._prefill, []

    def spy(root, settings, paths, workers):  # type: ignore[no-untyped-def]
        parsed.append(real(root, settings, paths, workers))
        return parsed[-1]

    monkeypatch.setattr(build, "_prefill", spy)
    pooled = cli_run("check", ".", "--jobs", "2", "--format", "json", "-v")
    assert parsed == [45 - build.INDEX_SAMPLE]  # the workers parsed all but the sample
    assert "45 files (45 parsed, 0 from the cache)" in pooled.err
    assert pooled.out == serial.out and "DDP101" in codes(pooled, "engine.py")


def _dies(task: object) -> int:
    os._exit(1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the pool test forks")
def test_a_dead_index_worker_costs_only_time(
    cli_run: Run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _big_project(project)
    monkeypatch.setattr(build, "_summarise_batch", _dies)
    r = cli_run("check", ".", "--jobs", "2", "--format", "json", "-v")
    assert "45 files (45 parsed, 0 from the cache)" in r.err
    assert "DDP101" in codes(r, "engine.py")


def test_warm_or_small_projects_index_without_a_pool(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _big_project(project)
    settings = config.Settings()
    build.project_view(project, settings, workers=1)  # fills the cache

    def no_pool(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a warm cache must not start a pool")

    monkeypatch.setattr(build, "_prefill", no_pool)
    view = build.project_view(project, settings, workers=2)
    assert view.files == 45 and view.parsed == 0
