"""The framework tables (``ddp_lsp.core.frameworks``) are valid data, and the user's
``[tool.ddp-lsp]`` entries reach the analysis.

The tables are the one place where framework knowledge lives: each entry must be well formed,
no key may be listed twice (across tables too: two tables claiming one API would make the
answer depend on their order), every meaning must be used by a table and read by the analysis
(a meaning nothing reads is a silent no-op for the user who configures it), and a table module
is pure data: it imports the schema and nothing else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ddp_lsp
from ddp_lsp.config import ConfigError, settings_from_mapping
from ddp_lsp.core import facts as fact_model
from ddp_lsp.core import frameworks as framework_tables
from ddp_lsp.core.document import Document
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.settings import Settings

PKG = Path(framework_tables.__file__).parent
ROOT = Path(ddp_lsp.__file__).parent


def test_every_entry_is_well_formed() -> None:
    for name, table in framework_tables.TABLES.items():
        assert table, name
        for api in table:
            assert framework_tables.check_entry(api) is None, (
                name,
                api,
                framework_tables.check_entry(api),
            )


def test_no_key_is_listed_twice_across_tables() -> None:
    assert framework_tables.duplicates(framework_tables.BUILTIN.apis) == []


def test_every_meaning_is_used_by_a_table_and_read_by_the_analysis() -> None:
    used = {m for api in framework_tables.BUILTIN.apis for m in api.means}
    assert used == set(framework_tables.Meaning)
    readers = [p for p in ROOT.rglob("*.py") if PKG not in p.parents and p.name != "config.py"]
    text = "\n".join(p.read_text() for p in readers)
    for meaning in framework_tables.Meaning:
        assert re.search(rf"Meaning\.{meaning.name}\b", text), meaning


@pytest.mark.parametrize("module", sorted(p.name for p in PKG.glob("*.py")))
def test_table_modules_are_pure_data(module: str) -> None:
    if module in ("__init__.py", "schema.py"):
        return
    tree = ast.parse((PKG / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module in ("__future__", "ddp_lsp.core.frameworks.schema"), module
        assert not isinstance(node, (ast.Import, ast.FunctionDef, ast.ClassDef, ast.Lambda))
    names = {
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }
    assert {"NAME", "TABLE"} <= names


def test_every_table_module_is_registered() -> None:
    modules = {p.stem for p in PKG.glob("*.py")} - {"__init__", "schema"}
    registered = {
        name
        for name in modules
        if getattr(getattr(framework_tables, name, None), "TABLE", None)
        in framework_tables.TABLES.values()
    }
    assert registered == modules


# -- the model's lookups ------------------------------------------------------------------------


def test_lookup_by_qualified_name_method_and_bare_name() -> None:
    m = framework_tables.BUILTIN
    C = framework_tables.Meaning.COLLECTIVE
    assert m.matches(C, "dist.barrier", "torch.distributed.barrier")
    assert m.matches(C, "self.accelerator.wait_for_everyone", None)
    assert m.matches(C, "MPI.COMM_WORLD.bcast", "mpi4py.MPI.COMM_WORLD.bcast")
    assert not m.matches(C, "accelerator.backward", None)
    assert m.matches(framework_tables.Meaning.SILENCES_PRINT, "utils.setup_for_distributed", None)
    api = m.match_of(framework_tables.Meaning.SEEDS, "set_seed", "accelerate.utils.set_seed")
    assert api is not None and m.keyword(api) == "device_specific"


def test_receiver_and_argument_entries() -> None:
    """The two built-in-only match kinds: a receiver word and a string argument."""
    Api, Match, Meaning = framework_tables.Api, framework_tables.Match, framework_tables.Meaning
    m = framework_tables.FrameworkModel(
        (
            Api(Match.RECEIVER, "engine", (Meaning.SAVES_UNWRAPPED,)),
            Api(Match.ARGUMENT, "ddp_x", (Meaning.FINDS_UNUSED_PARAMETERS,), keyword="strategy"),
        )
    )
    assert m.receivers(Meaning.SAVES_UNWRAPPED) == {"engine"}
    assert m.arguments(Meaning.FINDS_UNUSED_PARAMETERS) == {("strategy", "ddp_x")}
    assert m.receivers(Meaning.COLLECTIVE) == frozenset() == m.arguments(Meaning.COLLECTIVE)
    check = framework_tables.check_entry
    assert check(Api(Match.RECEIVER, "a.b", (Meaning.SAVES_UNWRAPPED,))) is not None
    assert check(Api(Match.ARGUMENT, "ddp_x", (Meaning.FINDS_UNUSED_PARAMETERS,))) is not None
    assert (
        check(Api(Match.ARGUMENT, "ddp_x", (Meaning.FINDS_UNUSED_PARAMETERS,), keyword="s")) is None
    )


def test_user_entries_cannot_use_builtin_only_match_kinds() -> None:
    with pytest.raises(ConfigError, match="unknown key 'receiver'"):
        settings_from_mapping({"framework": [{"receiver": "engine", "means": ["collective"]}]})


# -- the user's entries ---------------------------------------------------------------------------

USER_COLLECTIVE = """\
import torch.distributed as dist
from mylib.comm import sync_all


def finish(rank, model):
    if rank == 0:
        sync_all(model)
"""

HELPER_CALLS_IT = """\
import torch.distributed as dist
from mylib import comm


def wrap_up(model):
    comm.sync_all(model)


def finish(rank, model):
    if rank == 0:
        wrap_up(model)
"""


def _ids(text: str, settings: Settings) -> list[str]:
    return [f.rule_id for f in analyze(text, settings).findings]


def test_a_user_collective_is_a_collective() -> None:
    entry = [{"call": "mylib.comm.sync_all", "means": ["collective"]}]
    assert "DDP103" not in _ids(USER_COLLECTIVE, Settings())
    assert "DDP103" in _ids(USER_COLLECTIVE, settings_from_mapping({"framework": entry}))
    # ...also through a helper that calls it (the function's collective property).
    assert "DDP103" not in _ids(HELPER_CALLS_IT, Settings())
    assert "DDP103" in _ids(HELPER_CALLS_IT, settings_from_mapping({"framework": entry}))


def test_a_user_rank_zero_predicate_guards() -> None:
    text = (
        "import torch.distributed as dist\n\n\n"
        "def finish(model):\n    if leads_the_job():\n        dist.barrier()\n"
    )
    entry = [{"function": "leads_the_job", "means": ["rank-zero"]}]
    assert "DDP103" not in _ids(text, Settings())
    assert "DDP103" in _ids(text, settings_from_mapping({"framework": entry}))


BAD = {
    "not-an-array": (5, "'framework' must be an array of tables"),
    "two-kinds": (
        [{"call": "a.b", "method": "x.y", "means": ["collective"]}],
        "'framework'[0] needs exactly one of call, method, function (got call, method)",
    ),
    "no-means": ([{"call": "a.b"}], "'framework'[0] ('a.b') needs `means`"),
    "unknown-meaning": (
        [{"call": "a.b", "means": ["colective"]}],
        "'framework'[0].means: 'colective' is not a meaning; expected one of collective,",
    ),
    "method-shape": (
        [{"method": "a.b.c", "means": ["backward"]}],
        "'framework'[0]: 'a.b.c': a method is written `receiver.method`",
    ),
    "unknown-key": (
        [{"call": "a.b", "means": ["collective"], "mean": "x"}],
        "'framework'[0]: unknown key 'mean'",
    ),
    "duplicate": (
        [{"call": "a.b", "means": ["collective"]}, {"call": "a.b", "means": ["rank"]}],
        "'framework': call 'a.b' is listed twice",
    ),
    "built-in-only": (
        [{"function": "Amp", "means": ["scaler-wrapper"]}],
        "'framework'[0].means: 'scaler-wrapper' is known to the built-in framework tables only",
    ),
    "keyword-elsewhere": (
        [{"call": "a.b", "means": ["collective"], "keyword": "x"}],
        "`keyword` only applies to `seeds` and `writes-checkpoint`",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_invalid_entries_name_the_key_and_the_file(case: str) -> None:
    value, message = BAD[case]
    with pytest.raises(ConfigError) as exc:
        settings_from_mapping({"framework": value}, "/p/pyproject.toml [tool.ddp-lsp]")
    assert str(exc.value).startswith("/p/pyproject.toml [tool.ddp-lsp]: ")
    assert message in str(exc.value)


SAVES = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from infra.io import dump_weights, shard_path


def save(model, out):
    model = DDP(model)
    dump_weights(model.module.state_dict(), "weights/last.ckpt")
    torch.save(model.module.state_dict(), shard_path(out))
"""


def test_user_checkpoint_writers_and_per_rank_paths() -> None:
    def lines(settings: Settings) -> list[int]:
        return [
            f.span.start.line + 1
            for f in analyze(SAVES, settings).findings
            if f.rule_id == "DDP501"
        ]

    on = ("DDP", "DDP501")  # DDP501 is off by default
    assert lines(Settings(select=on)) == [10]
    writer = {"call": "infra.io.dump_weights", "means": ["writes-checkpoint"], "keyword": "path"}
    per_rank = {"function": "shard_path", "means": ["saves-per-rank"]}
    assert lines(settings_from_mapping({"framework": [writer], "select": list(on)})) == [9, 10]
    assert lines(settings_from_mapping({"framework": [writer, per_rank], "select": list(on)})) == [
        9
    ]


def test_user_print_silencers_and_rank_aware_loggers() -> None:
    text = (
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from infra.log import quiet_others\n\n\n"
        "def train(model, loader, opt, rank):\n"
        "    quiet_others(rank)\n"
        "    model = DDP(model)\n"
        "    for step, x in enumerate(loader):\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        '        print(f"step {step} loss {loss.item()}")\n'
    )
    assert "DDP502" in _ids(text, Settings())
    entry = [{"function": "quiet_others", "means": ["silences-print"]}]
    assert "DDP502" not in _ids(text, settings_from_mapping({"framework": entry}))


def test_the_docs_list_every_meaning_and_table() -> None:
    docs = (ROOT.parent / "docs" / "frameworks.md").read_text()
    for meaning in framework_tables.Meaning:
        assert f"| `{meaning.value}` |" in docs, meaning
    for name in framework_tables.TABLES:
        assert f"| `{name}` |" in docs, name


def test_a_user_rank_function_makes_a_rank_guard() -> None:
    text = (
        "import torch.distributed as dist\n\n\n"
        "def finish(model):\n    if whoami() == 0:\n        dist.barrier()\n"
    )
    entry = [{"function": "whoami", "means": ["rank"]}]
    assert "DDP103" not in _ids(text, Settings())
    assert "DDP103" in _ids(text, settings_from_mapping({"framework": entry}))


def test_a_helper_saving_to_its_path_through_a_table_writer_saves_to_the_callers_path() -> None:
    """The checkpoint writers are the tables' (`writes-checkpoint`) and torch.save: a helper
    that hands its path parameter to mmengine's save_checkpoint writes where its caller says,
    as one that hands it to torch.save does."""
    src = (
        "import torch\nfrom mmengine.runner import save_checkpoint\n\n\n"
        "def keep(state, filename):\n    save_checkpoint(state, filename)\n\n\n"
        "def keep_torch(state, filename):\n    torch.save(state, filename)\n\n\n"
        "def keep_elsewhere(state, filename):\n    save_checkpoint(state, 'last.pth')\n"
    )
    facts = Document(src, Settings().rank_model).module_facts()
    assert fact_model.SAVES_CALLER_PATH in facts.props("keep")
    assert fact_model.SAVES_CALLER_PATH in facts.props("keep_torch")
    assert fact_model.SAVES_CALLER_PATH not in facts.props("keep_elsewhere")
