"""Import resolution: aliases, relative imports, package re-exports, src layouts, bases."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lsp.project import Resolver

from .helpers import FIXTURES, build


@pytest.fixture(scope="module")
def deit() -> Resolver:
    return Resolver(build(FIXTURES / "deit"))


@pytest.fixture(scope="module")
def trainer() -> Resolver:
    return Resolver(build(FIXTURES / "trainer"))


def test_module_alias_and_from_import(deit: Resolver) -> None:
    # import util.misc as utils / from engine import train_one_epoch
    assert deit.resolve("main", "utils.save_on_master") == ("util.misc", "save_on_master")
    assert deit.resolve("main", "train_one_epoch") == ("engine", "train_one_epoch")
    assert deit.resolve("main", "utils") == ("util.misc", "")
    # from util.misc import all_reduce_mean as arm / from util import misc
    assert deit.resolve("engine", "arm") == ("util.misc", "all_reduce_mean")
    assert deit.resolve("engine", "misc.is_main_process") == ("util.misc", "is_main_process")


def test_package_reexport(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("from .misc import save_on_master\n")
    (tmp_path / "util" / "misc.py").write_text("def save_on_master(x):\n    pass\n")
    (tmp_path / "main.py").write_text(
        "import util\nfrom util import save_on_master as som\nsom(1)\nutil.save_on_master(2)\n"
    )
    r = Resolver(build(tmp_path))
    assert r.resolve("main", "som") == ("util.misc", "save_on_master")
    assert r.resolve("main", "util.save_on_master") == ("util.misc", "save_on_master")


def test_local_names_and_unknown_names(deit: Resolver) -> None:
    assert deit.resolve("engine", "log_stats") == ("engine", "log_stats")
    assert deit.resolve("main", "torch.save") is None  # not a project module
    assert deit.resolve("main", "nowhere") is None
    assert deit.resolve("no.such.module", "x") is None


def test_relative_imports_with_levels_in_a_src_layout(trainer: Resolver) -> None:
    # from .. import dist as tdist (in trainer/core/base.py)
    assert trainer.resolve("trainer.core.base", "tdist.reduce_all") == (
        "trainer.dist",
        "reduce_all",
    )
    # from . import dist (in trainer/launch.py)
    assert trainer.resolve("trainer.launch", "dist.setup") == ("trainer.dist", "setup")
    # from .base import BaseTrainer (in trainer/core/ddp_trainer.py)
    assert trainer.resolve("trainer.core.ddp_trainer", "BaseTrainer") == (
        "trainer.core.base",
        "BaseTrainer",
    )
    # from trainer import DDPTrainer: the package __init__ re-exports it
    assert trainer.resolve("trainer.launch", "DDPTrainer") == (
        "trainer.core.ddp_trainer",
        "DDPTrainer",
    )


def test_methods_through_bases_in_other_modules(trainer: Resolver) -> None:
    assert trainer.resolve("trainer.core.ddp_trainer", "DDPTrainer.sync") == (
        "trainer.core.base",
        "BaseTrainer.sync",
    )
    assert trainer.resolve("trainer.core.ddp_trainer", "DDPTrainer.fit") == (
        "trainer.core.ddp_trainer",
        "DDPTrainer.fit",
    )
    init = trainer.function("trainer.launch", "DDPTrainer")
    assert init is not None and init[0] == "trainer.core.base"
    assert init[1].qualname == "BaseTrainer.__init__"


def test_script_directory_imports(tmp_path: Path) -> None:
    # tools/train.py run as a script imports its sibling tools/engine.py as `engine`.
    (tmp_path / ".git").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "engine.py").write_text("def step():\n    pass\n")
    (tmp_path / "tools" / "train.py").write_text("import engine\nengine.step()\n")
    r = Resolver(build(tmp_path))
    assert r.resolve("tools.train", "engine.step") == ("tools.engine", "step")
    assert r.imported_modules("tools.train") == ["tools.engine"]


def test_imports_from_an_enclosing_folder_put_on_sys_path(tmp_path: Path) -> None:
    # app/training/main.py does `sys.path.append(<app>)` then `from utils.io import save`
    # for app/utils/io.py: the nearest enclosing folder that holds the module.
    (tmp_path / ".git").mkdir()
    for rel in ("app/utils", "app/training", "utils"):
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
    (tmp_path / "app" / "utils" / "io.py").write_text("def save(x):\n    pass\n")
    (tmp_path / "utils" / "other.py").write_text("def save(x):\n    pass\n")
    (tmp_path / "app" / "training" / "main.py").write_text(
        "import sys, os\n"
        "sys.path.append(os.path.join(os.path.dirname(__file__), os.path.pardir))\n"
        "from utils.io import save\nimport utils.other\nimport json\n"
    )
    r = Resolver(build(tmp_path))
    assert r.resolve("app.training.main", "save") == ("app.utils.io", "save")
    # A module of the top level still wins, as Python's own path does.
    assert r.resolve("app.training.main", "utils.other.save") == ("utils.other", "save")
    # The standard library is never looked for in the project.
    assert r.resolve("app.training.main", "json.dumps") is None


def test_reexport_cycles_terminate(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text("from b import f\n")
    (tmp_path / "b.py").write_text("from a import f\n")
    r = Resolver(build(tmp_path))
    assert r.resolve("a", "f") is None


def test_monorepo_absolute_imports_resolve_by_the_longest_project_suffix(tmp_path: Path) -> None:
    # The checkout root is `vision/fair/slowfast` of a larger tree, and its code imports
    # itself by that longer path; the root also holds a package named like the tree's folder.
    (tmp_path / ".git").mkdir()
    (tmp_path / "slowfast").mkdir()
    (tmp_path / "slowfast" / "__init__.py").write_text("")
    (tmp_path / "slowfast" / "dist.py").write_text("def init(cfg):\n    pass\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    (tmp_path / "tools" / "train_net.py").write_text("def train(cfg):\n    pass\n")
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "data.py").write_text("class DataLoader:\n    pass\n")
    (tmp_path / "run_net.py").write_text(
        "from vision.fair.slowfast.tools.train_net import train\n"
        "import vision.fair.slowfast.slowfast.dist as du\n"
        "from torch.utils.data import DataLoader\n"
        "from somelib.utils import data\n"
        "train(None)\ndu.init(None)\n"
    )
    r = Resolver(build(tmp_path))
    assert r.resolve("run_net", "train") == ("tools.train_net", "train")
    assert r.resolve("run_net", "du.init") == ("slowfast.dist", "init")
    # A framework's path never names the project's module of the same spelling, and one
    # name inside an unknown package's path is no evidence.
    assert r.resolve("run_net", "DataLoader") is None
    assert r.resolve("run_net", "data") is None
    assert r.imported_modules("run_net") == [
        "slowfast",
        "slowfast.dist",
        "tools",
        "tools.train_net",
    ]


def test_one_name_next_to_importers_of_different_folders(tmp_path: Path) -> None:
    # `import engine` in a/train.py is a/engine.py, in b/train.py b/engine.py, and next to an
    # enclosing folder in a/sub/tool.py (a/engine.py): one resolver answers for all of them
    # (find_module keeps its answers by the importer's package, not by the name alone).
    (tmp_path / ".git").mkdir()
    for pkg in ("a", "b"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "engine.py").write_text(f"def run_{pkg}(x):\n    pass\n")
        (tmp_path / pkg / "train.py").write_text(f"import engine\nengine.run_{pkg}(1)\n")
    (tmp_path / "a" / "sub").mkdir()
    (tmp_path / "a" / "sub" / "tool.py").write_text("import engine\nengine.run_a(1)\n")
    r = Resolver(build(tmp_path))
    assert r.resolve("a.train", "engine.run_a") == ("a.engine", "run_a")
    assert r.resolve("b.train", "engine.run_b") == ("b.engine", "run_b")
    assert r.resolve("b.train", "engine.run_a") is None
    assert r.resolve("a.sub.tool", "engine.run_a") == ("a.engine", "run_a")
    assert r.find_module("b.train", "engine") == "b.engine"
    assert r.find_module("a.train", "engine") == "a.engine"


def test_an_untracked_resolver_resolves_an_absolute_name_once_per_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ddp-lsp check`'s resolver (no tracking): what `engine.run_a` names is the same from
    # every module of a package (find_module reads the importer's package only), so it is
    # resolved once per package; the answers are the tracking resolver's, per folder.
    (tmp_path / ".git").mkdir()
    for pkg in ("a", "b"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "engine.py").write_text(f"def run_{pkg}(x):\n    pass\n")
        for m in ("train", "evaluate"):
            (tmp_path / pkg / f"{m}.py").write_text(f"import engine\nengine.run_{pkg}(1)\n")
    index = build(tmp_path)
    calls: list[str] = []
    full = Resolver._resolve_full

    def counted(self: Resolver, module: str, name: str, depth: int) -> object:
        calls.append(name)
        return full(self, module, name, depth)

    monkeypatch.setattr(Resolver, "_resolve_full", counted)
    untracked, tracked = Resolver(index, track=False), Resolver(index, track=True)
    for r in (untracked, tracked):
        for m in ("train", "evaluate"):
            assert r.resolve(f"a.{m}", "engine.run_a") == ("a.engine", "run_a")
            assert r.resolve(f"b.{m}", "engine.run_b") == ("b.engine", "run_b")
            assert r.resolve(f"b.{m}", "engine.run_a") is None
        if r is untracked:
            assert sorted(calls) == ["engine.run_a", "engine.run_a", "engine.run_b"]
    assert len(calls) == 3 + 6  # the tracking resolver: once per module and name
