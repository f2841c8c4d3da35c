"""The seeding operators of bench/seed_bugs.py and the pure helpers of bench/triage.py, on
snippets of our own (the corpus itself is not part of the test suite: no network in CI)."""

from __future__ import annotations

import ast
import io
import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from bench import seed_bugs, triage

LOOP = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader


    def train(args, model, loader, opt, scaler, train_sampler, train_set):
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl")
        model = DDP(model, device_ids=[args.local_rank])
        train_loader = DataLoader(train_set, sampler=train_sampler, batch_size=4)
        torch.manual_seed(args.seed + dist.get_rank())
        for epoch in range(3):
            train_sampler.set_epoch(epoch)
            for i, (x, y) in enumerate(loader):
                with model.no_sync():
                    loss = model(x)
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
            dist.barrier()
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "ckpt.pt")
            if args.rank == 0:
                print("epoch", epoch)
        ckpt = torch.load("x.pt", map_location="cpu")
        dist.destroy_process_group()
    """
)


def changed(before: str, after: str) -> list[tuple[str, str]]:
    """The (old, new) line pairs that differ, for rewrites that keep the line count."""
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b)
    return [(x.strip(), y.strip()) for x, y in zip(a, b, strict=True) if x != y]


def only(operator: str, text: str = LOOP) -> list[seed_bugs.Site]:
    return list(seed_bugs.sites(text, [operator]))


EXPECTED = {
    "drop-scaler-update": [("scaler.update()", "pass")],
    "drop-unscale": [("scaler.unscale_(opt)", "pass")],
    "scaler-step-to-optimizer-step": [("scaler.step(opt)", "opt.step()")],
    "update-before-step": [
        ("scaler.step(opt)", "scaler.update()"),
        ("scaler.update()", "scaler.step(opt)"),
    ],
    "drop-no-sync": [("with model.no_sync():", "if True:")],
    "barrier-under-rank0": [("dist.barrier()", "if dist.get_rank() == 0: dist.barrier()")],
    "drop-set-epoch": [("train_sampler.set_epoch(epoch)", "pass")],
    "add-shuffle": [
        (
            "train_loader = DataLoader(train_set, sampler=train_sampler, batch_size=4)",
            "train_loader = DataLoader(train_set, sampler=train_sampler, shuffle=True, batch_size=4)",
        )
    ],
    "drop-sampler": [
        (
            "train_loader = DataLoader(train_set, sampler=train_sampler, batch_size=4)",
            "train_loader = DataLoader(train_set, shuffle=True, batch_size=4)",
        )
    ],
    "unguard-save": [("if dist.get_rank() == 0:", "if True:")],
    "unguard-print": [("if args.rank == 0:", "if True:")],
    "forward-under-rank0": [("loss = model(x)", "if dist.get_rank() == 0: loss = model(x)")],
    "drop-set-device": [("torch.cuda.set_device(args.local_rank)", "pass")],
    "drop-destroy": [("dist.destroy_process_group()", "pass")],
    "drop-map-location": [
        (
            'ckpt = torch.load("x.pt", map_location="cpu")',
            'ckpt = torch.load("x.pt")',
        )
    ],
    "wrapper-state-dict": [
        (
            'torch.save(model.module.state_dict(), "ckpt.pt")',
            'torch.save(model.state_dict(), "ckpt.pt")',
        )
    ],
    "drop-seed-offset": [
        ("torch.manual_seed(args.seed + dist.get_rank())", "torch.manual_seed(args.seed)")
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_operator_rewrites_one_site_in_place(name: str) -> None:
    (site,) = only(name)
    assert site.rule == seed_bugs.OPERATORS[name][0]
    assert changed(LOOP, site.text) == EXPECTED[name]
    ast.parse(site.text)


def test_every_operator_has_a_case() -> None:
    assert set(seed_bugs.OPERATORS) == set(EXPECTED) | {"append-loss", "hardcode-device"}


def test_append_loss_keeps_the_loss_past_the_iteration() -> None:
    (site,) = only("append-loss")
    lines = site.text.splitlines()
    assert (
        lines[site.line - 1].strip() == "scaler.scale(loss).backward(); seeded_history.append(loss)"
    )
    # The list is made once, before the outermost loop of the function.
    assert lines.index("    seeded_history = []") == LOOP.splitlines().index(
        "    for epoch in range(3):"
    )


def test_drop_map_location_skips_memory_mapped_loads() -> None:
    # mmap=True only makes sense for a file of host tensors: without map_location nothing
    # lands on a GPU, so dropping it seeds no bug (docs/accuracy.md F32).
    mapped = LOOP.replace('map_location="cpu")', 'mmap=True, map_location="cpu")')
    assert mapped != LOOP
    assert only("drop-map-location", mapped) == []
    assert len(only("drop-map-location")) == 1


def test_drop_map_location_skips_loads_under_a_rank_test() -> None:
    # Rank 0 (or local rank 0 of each node) restores onto its own device: no bug to seed.
    guarded = LOOP.replace(
        '    ckpt = torch.load("x.pt", map_location="cpu")',
        '    if args.local_rank == 0:\n        ckpt = torch.load("x.pt", map_location="cpu")\n'
        '    else:\n        ckpt = torch.load("x.pt", map_location="meta")',
    )
    assert guarded != LOOP
    assert only("drop-map-location", guarded) == []


def test_forward_under_rank0_seeds_only_torchs_ddp() -> None:
    # apex's DistributedDataParallel makes no collective in its forward: not a DDP104 site.
    apex = LOOP.replace(
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "from apex.parallel import DistributedDataParallel as DDP",
    )
    assert only("forward-under-rank0", apex) == []
    assert len(only("forward-under-rank0")) == 1


def test_hardcode_device_covers_set_device_and_device_ids() -> None:
    got = [changed(LOOP, s.text) for s in only("hardcode-device")]
    assert got == [
        [("torch.cuda.set_device(args.local_rank)", "torch.cuda.set_device(0)")],
        [
            (
                "model = DDP(model, device_ids=[args.local_rank])",
                "model = DDP(model, device_ids=[0])",
            )
        ],
    ]


def test_operators_leave_code_without_the_idiom_alone() -> None:
    plain = textwrap.dedent(
        """\
        import torch

        def fit(model, loader, opt):
            for x, y in loader:
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            if model.training:
                torch.save(model.state_dict(), "m.pt")
        """
    )
    kinds = {s.operator for s in seed_bugs.sites(plain)}
    # Only the loss-keeping operator applies: there is no scaler, no_sync, collective, rank
    # guard or sampler to remove.
    assert kinds <= {"append-loss"}
    assert not list(
        seed_bugs.sites(plain, ["drop-scaler-update", "unguard-save", "barrier-under-rank0"])
    )


def test_drop_sampler_turns_a_conditional_shuffle_on() -> None:
    text = "loader = DataLoader(train_ds, shuffle=(train_sampler is None), sampler=train_sampler)\n"
    (site,) = only("drop-sampler", text)
    assert site.text == "loader = DataLoader(train_ds, shuffle=True, sampler=None)\n"


def test_logging_outside_a_loop_is_not_a_per_step_site() -> None:
    text = "def f(rank):\n    if rank == 0:\n        print('done')\n"
    assert only("unguard-print", text) == []


def test_found_new_compares_messages_not_counts() -> None:
    before = Counter({("DDP103", "t.py", "runs only where `ddp` holds"): 1})
    same = Counter({("DDP103", "t.py", "runs only where `ddp` holds"): 1})
    other = Counter({("DDP103", "t.py", "runs only on rank 0"): 1})
    assert not seed_bugs.found_new(before, same, "DDP103")
    assert seed_bugs.found_new(before, other, "DDP103")
    assert not seed_bugs.found_new(before, Counter({("DDP501", "t.py", "x"): 1}), "DDP103")


def test_neighbourhood_follows_project_imports_two_levels(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text("from .build import build_loader\n")
    (tmp_path / "data" / "build.py").write_text("import torch\n")
    (tmp_path / "utils.py").write_text("")
    main = "import os\nimport utils\nfrom data import build_loader\n"
    (tmp_path / "main.py").write_text(main)
    got = seed_bugs.neighbourhood(tmp_path, "main.py", main)
    assert got == ["main.py", "utils.py", "data/__init__.py", "data/build.py"]


def test_distributed_only_rules_are_measured_in_distributed_files() -> None:
    single = "import torch\nckpt = torch.load('x.pt')\n"
    assert not seed_bugs.counts("DDP303", single)
    assert seed_bugs.counts("DDP303", "import torch.distributed as dist\n" + single)
    assert seed_bugs.counts("DDP202", single)  # AMP rules apply to any module
    # A comment naming a framework does not make a tool distributed code; a string may.
    assert not seed_bugs.counts("DDP303", "# adapted from pytorch-lightning snippets\n" + single)
    assert seed_bugs.counts("DDP303", "import os\nr = os.environ['LOCAL_RANK']\n" + single)


def test_no_sampler_or_seed_site_in_test_code() -> None:
    dist = "import torch.distributed as dist\ntorch.manual_seed(seed + rank)\n"
    assert seed_bugs.counts("DDP503", dist, "train.py")
    assert not seed_bugs.counts("DDP503", dist, "pkg/gpu_tests/ckpt_test.py")
    assert not seed_bugs.counts("DDP401", dist, "tests/shampoo_test_utils.py")
    assert seed_bugs.counts("DDP402", dist, "tests/test_loader.py")  # not silent in tests


def test_merge_replaces_an_operators_rows(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    row = {"repo": "a/b", "path": "t.py", "line": 1, "rule": "DDP401", "note": ""}
    first.write_text(
        json.dumps(
            {
                "sites": [
                    row | {"operator": "drop-sampler", "found": False},
                    row | {"operator": "add-shuffle", "rule": "DDP403", "found": True},
                ]
            }
        )
    )
    second.write_text(json.dumps({"sites": [row | {"operator": "drop-sampler", "found": True}]}))
    rows = seed_bugs.merge([first, second])
    assert sorted((r["operator"], r["found"]) for r in rows) == [
        ("add-shuffle", True),
        ("drop-sampler", True),
    ]
    out = io.StringIO()
    result = seed_bugs.summarize(rows, out)
    assert result["drop-sampler"] == (1, 1) and result["drop-unscale"] == (0, 0)
    assert "| all | | 2 | 2 | 1.00 |" in out.getvalue()


def test_collective_of_another_module_is_not_guarded() -> None:
    text = "import helpers\n\ndef f():\n    helpers.barrier()\n"
    assert only("barrier-under-rank0", text) == []


def test_scaler_update_without_a_step_in_scope_is_left() -> None:
    text = "def f(meter):\n    meter.update()\n"
    assert only("drop-scaler-update", text) == []


def test_replace_span_counts_columns_in_utf8_bytes() -> None:
    text = 'x = "é"; dist.barrier()\n'
    call = ast.parse(text).body[1]
    assert seed_bugs.replace_span(text, call, "pass") == 'x = "é"; pass\n'


def test_unparsable_input_gives_no_sites() -> None:
    assert list(seed_bugs.sites("def f(:\n")) == []


# -- triage helpers --------------------------------------------------------------------------


def test_manifest_and_labels_load(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[repo]]\nname = "a/b"\ncommit = "' + "0" * 40 + '"\npaths = ["src"]\ntags = ["raw-ddp"]\n'
    )
    (repo,) = triage.load_manifest(manifest)
    assert (repo.slug, repo.paths, repo.tags) == ("a+b", ("src",), ("raw-ddp",))
    labels = tmp_path / "l.json"
    labels.write_text(
        json.dumps(
            {
                "findings": [
                    {
                        "repo": "a/b",
                        "path": "t.py",
                        "line": 3,
                        "rule": "DDP103",
                        "verdict": "true",
                        "reason": "r",
                    },
                    {
                        "repo": "a/b",
                        "path": "t.py",
                        "line": 9,
                        "rule": "DDP103",
                        "verdict": "false",
                        "reason": "r",
                    },
                ],
                "misses": [
                    {"repo": "a/b", "path": "t.py", "line": 20, "rule": "DDP103", "reason": "r"}
                ],
            }
        )
    )
    lab = triage.load_labels(labels)
    hits = [
        triage.Hit("a/b", "t.py", 3, "DDP103"),
        triage.Hit("a/b", "t.py", 9, "DDP103"),
        triage.Hit("a/b", "t.py", 12, "DDP103"),
    ]
    result = triage.RepoResult(repo, lines=1000, files=1, hits=hits)
    s = triage.score([result], lab)["DDP103"]
    assert (s.findings, s.true, s.false, s.misses, s.misses_found) == (3, 1, 1, 1, 0)
    assert s.precision == 0.5 and s.recall == 0.5


def test_a_marked_miss_found_later_counts_once(tmp_path: Path) -> None:
    repo = triage.Repo("a/b", "0" * 40)
    labels = triage.Labels(
        verdicts={("a/b", "t.py", 5, "DDP101"): True},
        misses={
            ("a/b", "t.py", 5, "DDP101"): "marked, now found and labelled",
            ("a/b", "t.py", 7, "DDP101"): "marked, now found",
            ("a/b", "t.py", 9, "DDP101"): "marked, still missed",
            ("c/d", "t.py", 9, "DDP101"): "a repository not checked this run",
        },
    )
    hits = [triage.Hit("a/b", "t.py", 5, "DDP101"), triage.Hit("a/b", "t.py", 7, "DDP101")]
    s = triage.score([triage.RepoResult(repo, hits=hits)], labels)["DDP101"]
    assert (s.true, s.misses_found, s.misses) == (1, 1, 1)
    assert s.recall == pytest.approx(2 / 3)


def test_saved_results_score_again(tmp_path: Path) -> None:
    repo = triage.Repo("a/b", "1" * 40)
    hits = [triage.Hit("a/b", "t.py", 3, "DDP103", "m")]
    result = triage.RepoResult(
        repo, lines=2000, files=2, hits=hits, non_distributed_files={"tok.py"}
    )
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(triage.report([result], triage.Labels(), io.StringIO())))
    (again,) = triage.load_results(saved, [repo])
    assert (again.lines, again.files, again.hits, again.non_distributed_files) == (
        2000,
        2,
        hits,
        {"tok.py"},
    )
    other = triage.Repo("a/b", "2" * 40)
    with pytest.raises(SystemExit, match="pins"):
        triage.load_results(saved, [other])


def test_bad_verdict_is_a_clear_error(tmp_path: Path) -> None:
    labels = tmp_path / "l.json"
    labels.write_text(
        json.dumps(
            {"findings": [{"repo": "a/b", "path": "t", "line": 1, "rule": "X", "verdict": "yes"}]}
        )
    )
    with pytest.raises(SystemExit, match="verdict"):
        triage.load_labels(labels)


@pytest.mark.parametrize(
    ("text", "distributed"),
    [
        ("import torch.distributed as dist\n", True),
        ("loss.backward()\n", True),
        ("from accelerate import Accelerator\n", True),
        ("def tokenize(s):\n    return s.split()\n", False),
        ("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n", False),
        ("from pkg import dist_util\n\ndef main():\n    dist_util.setup_dist()\n", True),
        ("def distance(a, b):\n    return abs(a - b)\n", False),
    ],
)
def test_distributed_markers(text: str, distributed: bool) -> None:
    assert triage.is_distributed_text(text) is distributed


def test_site_selection_skips_code_that_is_no_bug_once_seeded() -> None:
    # A streaming dataset's own set_epoch is not a sampler's (DDP402 does not cover it).
    assert [
        s.note
        for s in only(
            "drop-set-epoch",
            "def f(ds, sampler, e):\n    ds.set_epoch(e)\n    sampler.set_epoch(e)\n",
        )
    ] == ["sampler"]
    # Enabling the sync (`= True`) or restoring it outside a loop skips no all-reduce.
    trigger = (
        "def trigger(m, old):\n    m.require_backward_grad_sync = True\n"
        "    m.require_backward_grad_sync = old\n"
        "def train(m, n):\n    for i in range(n):\n        m.require_backward_grad_sync = i == n - 1\n"
    )
    assert [s.line for s in only("drop-no-sync", trigger)] == [6]
    # A no_sync around the backward alone skips nothing (DDP's forward prepared the
    # all-reduce), so removing it is no bug; around the forward it is.
    backward_only = (
        "def train(m, xs):\n    for x in xs:\n        loss = m(x)\n"
        "        with m.no_sync():\n            loss.backward()\n"
    )
    assert only("drop-no-sync", backward_only) == []
    forward_too = backward_only.replace(
        "        loss = m(x)\n        with m.no_sync():\n",
        "        with m.no_sync():\n            loss = m(x)\n",
    )
    assert [s.line for s in only("drop-no-sync", forward_too)] == [3]
    # The context chosen by name: `ctx = m.no_sync() if ... else nullcontext()`, `with ctx:`;
    # a name also bound to something else (an autocast) is not the idiom.
    chosen = (
        "import contextlib\ndef train(m, xs, k):\n    for i, x in enumerate(xs):\n"
        "        ctx = m.no_sync() if i < k else contextlib.nullcontext()\n"
        "        with ctx:\n            m(x).sum().backward()\n"
    )
    (site,) = only("drop-no-sync", chosen)
    assert changed(chosen, site.text) == [("with ctx:", "if True:")]
    called = chosen.replace(
        "ctx = m.no_sync() if i < k else contextlib.nullcontext()", "ctx = m.no_sync"
    ).replace("with ctx:", "with ctx():")
    assert [s.line for s in only("drop-no-sync", called)] == [5]
    mixed = chosen.replace("    for i", "    ctx = autocast()\n    for i")
    assert only("drop-no-sync", mixed) == []
    # A loader handed to Fabric gets its DistributedSampler from Fabric.
    fabric = (
        "from torch.utils.data import DataLoader\n"
        "def f(fabric, train_ds, s):\n    train_loader = DataLoader(train_ds, sampler=s)\n"
        "    return fabric.setup_dataloaders(train_loader)\n"
    )
    assert only("drop-sampler", fabric) == []
    assert only("drop-sampler", fabric.replace("fabric.setup_dataloaders", "list"))


def test_neighbourhood_adds_the_files_importing_the_seeded_one(tmp_path: Path) -> None:
    (tmp_path / "engine.py").write_text("def train_one_epoch(loader, sampler, epoch):\n    pass\n")
    (tmp_path / "main.py").write_text("from engine import train_one_epoch\n")
    (tmp_path / "other.py").write_text("import os\n")
    importers = seed_bugs.importer_map(tmp_path, ["engine.py", "main.py", "other.py"])
    assert importers == {"engine.py": ["main.py"]}
    text = (tmp_path / "engine.py").read_text()
    assert seed_bugs.neighbourhood(tmp_path, "engine.py", text, importers) == [
        "engine.py",
        "main.py",
    ]
    assert seed_bugs.neighbourhood(tmp_path, "engine.py", text) == ["engine.py"]


def test_drop_unscale_needs_a_clip_that_clips() -> None:
    text = (
        "def step(scaler, opt, params, clip):\n"
        "    scaler.unscale_(opt)\n"
        "    norm = clip_grad_value_(params, None)\n"
        "    scaler.step(opt)\n"
    )
    assert only("drop-unscale", text) == []
    assert only("drop-unscale", text.replace("None", "clip"))


def test_unguard_print_seeds_per_step_metric_lines_only() -> None:
    # A set-up loop over groups, a constant message, a per-rank tag and a block that also
    # writes a checkpoint (unguard-save's site) seed no logging bug; a metric in the epoch
    # loop does.
    text = textwrap.dedent(
        """\
        import torch

        def run(rank, groups, loader, model):
            for g in groups:
                if rank == 0:
                    print("group", g)
            for epoch in range(3):
                if rank == 0:
                    print("out of memory, stopping")
                if rank == 0:
                    print(f"[rank {rank}] loading", epoch)
                if rank == 0:
                    print("saving", epoch)
                    torch.save(model.state_dict(), "m.pt")
                if rank == 0:
                    print("loss", model(epoch))
        """
    )
    assert [s.line for s in only("unguard-print", text)] == [15]


def test_print_silenced_by_a_project_file(tmp_path: Path) -> None:
    (tmp_path / "misc.py").write_text(
        "import builtins\n\ndef quiet(is_master):\n    builtins.print = lambda *a, **k: None\n"
    )
    (tmp_path / "train.py").write_text("if builtins.print == print:\n    pass\n")
    assert seed_bugs.print_silenced(tmp_path, ["."])
    (tmp_path / "misc.py").write_text("import builtins\n")
    assert not seed_bugs.print_silenced(tmp_path, ["."])
    text = "def f(rank, loader, log):\n    for b in loader:\n        if rank == 0:\n            print(b)\n        if rank == 0:\n            log.info(b)\n"
    assert seed_bugs.prints_only(text, 3) and not seed_bugs.prints_only(text, 5)


def test_drop_destroy_leaves_tests_and_framework_groups_alone() -> None:
    fixture = "import pytest\nimport torch.distributed as dist\n\ndef fin():\n    dist.destroy_process_group()\n"
    assert only("drop-destroy", fixture) == []
    owned = "from accelerate import PartialState\n\ndef main():\n    state = PartialState()\n    state.destroy_process_group()\n"
    assert only("drop-destroy", owned) == []
    plain = "import torch\n\ndef main():\n    torch.distributed.destroy_process_group()\n"
    assert [s.line for s in only("drop-destroy", plain)] == [4]


def test_drop_set_device_skips_a_device_selected_before_the_group() -> None:
    text = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist

        def worker(gpu):
            torch.accelerator.set_device_index(gpu)
            dist.init_process_group("nccl")
            torch.cuda.set_device(gpu)
        """
    )
    assert only("drop-set-device", text) == []
    assert (
        len(
            only("drop-set-device", text.replace("torch.accelerator.set_device_index(gpu)", "pass"))
        )
        == 1
    )


def test_neighbourhood_reaches_importers_through_a_package_init(tmp_path: Path) -> None:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("from .train_utils import setup, cleanup\n")
    (tmp_path / "utils" / "train_utils.py").write_text("def cleanup():\n    pass\n")
    (tmp_path / "main.py").write_text("from utils import setup, cleanup\n")
    rels = ["main.py", "utils/__init__.py", "utils/train_utils.py"]
    importers = seed_bugs.importer_map(tmp_path, rels)
    text = (tmp_path / "utils" / "train_utils.py").read_text()
    got = seed_bugs.neighbourhood(tmp_path, "utils/train_utils.py", text, importers)
    assert got == ["utils/train_utils.py", "utils/__init__.py", "main.py"]


def test_a_destroy_in_a_helper_nothing_calls_is_no_site(tmp_path: Path) -> None:
    utils = (
        "import torch.distributed as dist\n\ndef teardown():\n    dist.destroy_process_group()\n"
    )
    (tmp_path / "utils.py").write_text(utils)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_utils.py").write_text("from utils import teardown\nteardown()\n")
    (tmp_path / "train.py").write_text("import utils\n\ndef main():\n    pass\n")
    assert seed_bugs.unused_holder(tmp_path, ["."], utils, 4)
    (tmp_path / "train.py").write_text("import utils\n\ndef main():\n    utils.teardown()\n")
    assert not seed_bugs.unused_holder(tmp_path, ["."], utils, 4)


def test_drop_set_device_skips_a_group_given_its_device_through_kwargs() -> None:
    text = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist

        def worker(local_rank):
            kwargs = dict(backend="nccl")
            kwargs["device_id"] = torch.device("cuda", local_rank)
            dist.init_process_group(**kwargs)
            torch.cuda.set_device(local_rank)
        """
    )
    assert only("drop-set-device", text) == []
    assert len(only("drop-set-device", text.replace('kwargs["device_id"]', "other"))) == 1


def test_importers_are_followed_through_a_re_exporting_package(tmp_path: Path) -> None:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("from .train_utils import train\n")
    helper = "def train(sampler):\n    pass\n"
    (tmp_path / "utils" / "train_utils.py").write_text(helper)
    (tmp_path / "main.py").write_text("from utils import train\n")
    rels = ["main.py", "utils/__init__.py", "utils/train_utils.py"]
    got = seed_bugs.neighbourhood(
        tmp_path, "utils/train_utils.py", helper, seed_bugs.importer_map(tmp_path, rels)
    )
    assert got == ["utils/train_utils.py", "utils/__init__.py", "main.py"]


def test_unguard_save_leaves_a_call_of_a_helper_that_guards_itself() -> None:
    # Dropping the caller's rank test leaves correct code: the helper saves on rank 0 only.
    text = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist

        def save_model(model, step):
            if dist.get_rank() == 0:
                torch.save(model.state_dict(), f"model{step}.pt")

        def train(model, steps):
            for step in range(steps):
                pass
            if dist.get_rank() == 0:
                save_model(model, steps)
        """
    )
    assert [s.line for s in only("unguard-save", text)] == [5]  # the helper's own guard
    unguarded = text.replace(
        '    if dist.get_rank() == 0:\n        torch.save(model.state_dict(), f"model{step}.pt")',
        '    torch.save(model.state_dict(), f"model{step}.pt")',
    )
    assert [s.line for s in only("unguard-save", unguarded)] == [10]


def test_rules_off_by_default_are_in_the_baseline_and_selected_by_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # DDP501 is off by default: the untouched file's baseline must still hold its findings
    # (or a finding already there would count as found), and the seeded file selects it.
    seen: list[list[str]] = []

    def fake(checkout: Path, paths: list[str], extra: list[str] = ()) -> list[dict]:  # type: ignore[assignment]
        seen.append(list(extra))
        return []

    monkeypatch.setattr(triage, "run_check", fake)
    seed_bugs.messages(Path("."), ["a.py"])
    seed_bugs.messages(Path("."), ["a.py"], "DDP501")
    assert seen[0][0] == "--select" and "DDP501" in seen[0][1].split(",")
    assert "DDP" in seen[0][1].split(",")
    assert seen[1] == ["--select", "DDP501"]
