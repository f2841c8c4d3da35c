"""Each file's summary key kept with its stat (project/filekeys.py): an unchanged file is not
read again, and any change of a file (even of the same size, its modification time set back)
or of the module path its key names reads it again; a file changed just before the run is not
stored; stored keys of another shape are ignored."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from ddp_lsp.config import Settings
from ddp_lsp.project import build, filekeys
from ddp_lsp.project.index import ProjectIndex

from .helpers import FIXTURES, facts_of


@pytest.fixture
def deit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "deit"
    shutil.copytree(FIXTURES / "deit", root)
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files filekeys reads, in order; nothing counts as changed too recently."""
    monkeypatch.setattr(filekeys, "RACY_NS", 0)
    got: list[Path] = []
    real = filekeys.read_source

    def counting(path: Path | str, *args: object) -> bytes:
        got.append(Path(path))
        return real(path)

    monkeypatch.setattr(filekeys, "read_source", counting)
    return got


def _keys(root: Path) -> list[tuple[str, str]]:
    """Every file's (path, summary key), each file read and hashed (as before filekeys)."""
    index = ProjectIndex(root, Settings())
    return [index.content_key(p, p.read_bytes()) for p in index.files()]


def _file_keys(root: Path) -> list[tuple[str, str]]:
    index = ProjectIndex(root, Settings())
    return filekeys.file_keys(index, list(index.files()), {})[0]


def test_an_unchanged_file_is_not_read_again(deit: Path, reads: list[Path]) -> None:
    assert _file_keys(deit) == _keys(deit)
    assert len(reads) == len(_keys(deit)) > 2
    reads.clear()
    assert _file_keys(deit) == _keys(deit)
    assert reads == []
    # The whole view, as `ddp-lsp check` builds it: the snapshot answers, nothing is read.
    build.project_view(deit, Settings(), workers=1)
    reads.clear()
    view = build.project_view(deit, Settings(), workers=1)
    assert reads == [] and view.parsed == 0


def test_a_file_changed_in_place_is_read_again(deit: Path, reads: list[Path]) -> None:
    _file_keys(deit)
    main = deit / "main.py"
    before = main.stat()
    time.sleep(0.05)  # past the file system clock's tick (the change time must move)
    text = main.read_bytes()
    edited = text.replace(b"DistributedDataParallel(", b"DistributedDataParallex(")
    assert len(edited) == len(text) and edited != text
    main.write_bytes(edited)
    os.utime(main, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same size and mtime
    reads.clear()
    assert _file_keys(deit) == _keys(deit)
    assert reads == [main]
    # And the facts follow the edit.
    view = build.project_view(deit, Settings(), workers=1)
    assert view.facts == {p: f for p, f in facts_of(deit).by_path.items() if p in view.facts}


def test_a_new_nested_project_reads_its_files_again(deit: Path, reads: list[Path]) -> None:
    """The key names the module path, which a pyproject.toml in a folder changes."""
    sub = deit / "util"
    _file_keys(deit)
    (sub / "pyproject.toml").write_text("[project]\nname = 'models'\n")
    reads.clear()
    assert _file_keys(deit) == _keys(deit)
    assert reads and all(p.parent == sub for p in reads)


def test_a_file_changed_just_before_the_run_is_not_stored(
    deit: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filekeys, "RACY_NS", 3600 * 10**9)  # everything is recent
    _file_keys(deit)
    reads.clear()
    assert _file_keys(deit) == _keys(deit)
    assert len(reads) == len(_keys(deit))


@pytest.mark.parametrize("damage", ["format", "row", "json", "root"])
def test_stored_keys_of_another_shape_are_ignored(
    deit: Path, reads: list[Path], damage: str
) -> None:
    _file_keys(deit)
    index = ProjectIndex(deit, Settings())
    assert index.cache.directory is not None
    stored = filekeys._file(index.cache.directory, index.root, index.ranks_key)
    entry = json.loads(stored.read_bytes())
    if damage == "format":
        entry["format"] = "ddp-lsp-file-keys/0"
    elif damage == "row":
        rel = next(iter(entry["files"]))
        entry["files"][rel] = entry["files"][rel].split()
    elif damage == "root":
        entry["root"] = "/elsewhere"
    stored.write_text("{" if damage == "json" else json.dumps(entry))
    reads.clear()
    assert _file_keys(deit) == _keys(deit)
    assert len(reads) == len(_keys(deit))


def test_a_file_not_read_is_read_when_asked_for(deit: Path, reads: list[Path]) -> None:
    """An early cutoff looks for a function's name in every file (build._isolated_change)."""
    _file_keys(deit)
    index = ProjectIndex(deit, Settings())
    reads.clear()
    _, files, contents = filekeys.file_keys(index, list(index.files()), {})
    assert reads == [] and contents == {}
    rel = next(iter(files))
    path, data = files[rel]
    assert data == path.read_bytes() and reads == [path]
    assert dict(files.items()).keys() == files.keys()
