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
from ddp_lsp.project import build, filekeys, snapshot
from ddp_lsp.project.index import ProjectIndex

from .helpers import facts_of, fixture_copy


@pytest.fixture
def deit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fixture_copy("deit", tmp_path, monkeypatch)


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


def test_a_file_not_read_must_still_have_its_key(deit: Path, reads: list[Path]) -> None:
    """Bytes read later than their stat are those of the key, or the caller is told: Stale
    when the file changed meanwhile, ReadError when it went."""
    _file_keys(deit)
    index = ProjectIndex(deit, Settings())
    _, files, _ = filekeys.file_keys(index, list(index.files()), {})
    changed, gone, *_ = list(files)
    files._path[changed].write_text("x = 1\n")  # saved after its stat was taken
    files._path[gone].unlink()
    with pytest.raises(filekeys.Stale):
        files[changed]
    with pytest.raises(filekeys.ReadError):
        files[gone]


def _project(root: Path, helper: str) -> Path:
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (root / "pkg/__init__.py").write_text("")
    (root / "pkg/helpers.py").write_text(helper)
    (root / "pkg/train.py").write_text(
        "import torch.distributed as dist\nfrom pkg.helpers import sync\n\n"
        "def train(t):\n    if dist.get_rank() == 0:\n        sync(t)\n"
    )
    return root


SYNCS = "import torch.distributed as dist\n\ndef sync(t):\n    dist.all_reduce(t)\n"
LOCAL = "import torch.distributed as dist\n\ndef sync(t):\n    return t\n"


def test_a_full_build_summarises_the_bytes_its_state_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Path]
) -> None:
    """A file saved between its stat and the build that summarises it (a file added forces a
    full build; helpers.py's key comes from its stat): the state stored names the bytes
    summarised, so when the save is undone the stored facts are not taken for the old file's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = _project(tmp_path / "p", SYNCS)
    build.project_view(root, Settings(), workers=1)
    (root / "pkg/new.py").write_text("y = 2\n")
    helpers = root / "pkg/helpers.py"
    real = snapshot.project_key
    saved: list[bool] = []

    def saving_meanwhile(*args: object) -> str:
        if not saved:
            saved.append(True)
            time.sleep(0.05)  # past the file system clock's tick
            helpers.write_text(LOCAL)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot, "project_key", saving_meanwhile)
    build.project_view(root, Settings(), workers=1)
    monkeypatch.setattr(snapshot, "project_key", real)
    assert saved
    time.sleep(0.05)
    helpers.write_text(SYNCS)  # the save undone
    warm = build.project_view(root, Settings(), workers=1)
    shutil.rmtree(tmp_path / "cache")
    fresh = build.project_view(root, Settings(), workers=1)
    assert warm.facts == fresh.facts
    assert "pkg/helpers.py" in fresh.facts  # (what the test is about: sync's collective)


def test_a_file_gone_before_an_early_cutoff_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Path]
) -> None:
    """An early cutoff reads every other file (a function added that nothing names): one that
    went since its stat was taken leaves the cutoff to a full build, which says it is unread,
    instead of failing the project index."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = _project(tmp_path / "p", SYNCS)
    other = root / "pkg/other.py"
    other.write_text("z = 3\n")
    build.project_view(root, Settings(), workers=1)
    time.sleep(0.05)
    with (root / "pkg/helpers.py").open("a") as f:
        f.write("\ndef _unused_helper():\n    return 0\n")
    real = snapshot.project_key

    def deleting_meanwhile(*args: object) -> str:
        other.unlink(missing_ok=True)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot, "project_key", deleting_meanwhile)
    view = build.project_view(root, Settings(), workers=1)
    assert [(Path(p).name, kind) for p, kind, _ in view.unread] == [("other.py", "missing")]
    assert "pkg/train.py" in view.facts
