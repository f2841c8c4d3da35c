"""Real-code triage loop: run ``ddp-lsp check`` over a corpus of public training repositories
and measure it against a reviewer's labels (docs/accuracy.md).

    .venv/bin/python bench/triage.py                       # every repository of the manifest
    .venv/bin/python bench/triage.py --repo karpathy/nanoGPT --list   # one, with each finding
    .venv/bin/python bench/triage.py --unlabelled --select DDP103     # what is left to triage
    .venv/bin/python bench/triage.py --json results.json   # machine-readable results
    .venv/bin/python bench/triage.py --rescore results.json   # new labels, same findings

The corpus is bench/corpus/manifest.toml (repository, pinned commit, paths to check, style
tags). Third-party code never enters this repository: each repository is laid out as a
checkout under ``--workdir`` (default /work/corpus/<owner>+<name>) from a local snapshot folder
``--snapshots`` (default /work/.mirror) that holds, per repository, a bare git directory at
``<owner>+<name>/repo`` or ``<owner>+<name>`` (the files of ``<commit>`` are written out; a layout
already at the right commit is reused). Nothing here touches the network and nothing from the
checkouts is executed: they are only read by ``ddp-lsp check``.

The labels (bench/corpus/labels.json) are a reviewer's verdicts:

- ``findings``: ``{repo, path, line, rule, verdict, reason[, pattern]}`` with ``verdict``
  ``"true"`` (a real problem a senior DDP engineer would want reported) or ``"false"`` (a false
  alarm, with the false-alarm pattern of docs/accuracy.md it belongs to, "F2"), ``line``
  1-based as the JSON reporter prints it;
- ``misses``: ``{repo, path, line, rule, reason[, pattern]}``, a real problem that the rule
  should report at that line and does not.

Printed: per-rule findings, labelled counts, precision (true / labelled), recall against the
marked misses ((true findings + marked misses found now) / (those + marked misses still
missed)), findings per 1,000 lines of Python checked, the serious rules together, and the
findings that land in modules of a distributed project that are not distributed code themselves (a tokenizer, a
plotting script: no distributed, launcher or training-loop marker in the file, or marked
``non_distributed`` in the manifest), leaving out the rules that apply to any module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from ddp_lsp.core.registry import all_rules, off_by_default

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "corpus" / "manifest.toml"
LABELS = ROOT / "bench" / "corpus" / "labels.json"
DEFAULT_SNAPSHOTS = Path("/work/.mirror")
DEFAULT_WORKDIR = Path("/work/corpus")
MARKER = ".ddp-lsp-triage-commit"

#: The rules issue 14 holds to precision >= 0.95 together.
SERIOUS = ("DDP101", "DDP103", "DDP104", "DDP201", "DDP202", "DDP203", "DDP204", "DDP301")
#: Rules whose bug is a bug in any module, distributed or not (a scaler misuse, a graph kept
#: alive, a deprecated API, a data-loading cost): the engine runs them in every module, and
#: their findings in non-distributed modules are not counted against the "0 findings in
#: non-distributed modules" goal. The rules' own ``RuleMeta.any_module`` is the single source.
ANY_MODULE = frozenset(r.meta.id for r in all_rules() if r.meta.any_module)
# Rules off by default (RuleMeta.default_on) are still measured: selected by their ids.
SELECT_ALL = ("--select", ",".join(("DDP", *sorted(off_by_default()))))

#: A module is distributed (or training) code on its own when its text says so: collectives,
#: ranks, launchers, wrappers, framework entry points, a backward pass or an optimizer.
_DIST_MARKERS = re.compile(
    r"torch\.distributed|DistributedDataParallel|\bDDP\b|init_process_group|LOCAL_RANK|"
    r"\bRANK\b|WORLD_SIZE|get_rank|get_world_size|is_main_process|is_master|master_process|"
    r"rank_zero|global_rank|local_rank|\brank\b|accelerate|lightning|deepspeed|\bFabric\b|"
    r"FullyShardedDataParallel|fully_shard|DistributedSampler|mpi4py|\bMPI\b|barrier|"
    r"all_reduce|all_gather|broadcast|no_sync|GradScaler|\.backward\(|mp\.spawn|"
    r"multiprocessing\.spawn|torchrun|horovod|\bdist\b|\boptimizer\b|loss_scaler|"
    # A process group started through the project's own helper (`dist_util.setup_dist()`,
    # `init_dist(launcher)`): a reader sees distributed set-up as plainly as `dist.` itself.
    r"\b(?:setup|init|initialize)_dist|\bdist_utils?\b"
)


@dataclass(frozen=True)
class Repo:
    name: str
    commit: str
    paths: tuple[str, ...] = (".",)
    tags: tuple[str, ...] = ()
    non_distributed: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        return self.name.replace("/", "+")


@dataclass(frozen=True)
class Hit:
    """One finding, relative to its checkout."""

    repo: str
    path: str
    line: int
    rule: str
    message: str = ""

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.repo, self.path, self.line, self.rule)


@dataclass
class RepoResult:
    repo: Repo
    lines: int = 0
    files: int = 0
    hits: list[Hit] = field(default_factory=list)
    non_distributed_files: set[str] = field(default_factory=set)
    error: str = ""


# -- manifest and labels ---------------------------------------------------------------------


def load_manifest(path: Path = MANIFEST) -> list[Repo]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    repos = []
    for entry in data.get("repo", []):
        repos.append(
            Repo(
                name=entry["name"],
                commit=entry["commit"],
                paths=tuple(entry.get("paths", ["."])),
                tags=tuple(entry.get("tags", ())),
                non_distributed=tuple(entry.get("non_distributed", ())),
            )
        )
    names = [r.name for r in repos]
    dupes = [n for n, c in Counter(names).items() if c > 1]
    if dupes:
        raise SystemExit(f"manifest: repositories listed twice: {', '.join(dupes)}")
    return repos


@dataclass
class Labels:
    verdicts: dict[tuple[str, str, int, str], bool] = field(default_factory=dict)
    reasons: dict[tuple[str, str, int, str], str] = field(default_factory=dict)
    misses: dict[tuple[str, str, int, str], str] = field(default_factory=dict)
    #: the false-alarm or miss pattern of docs/accuracy.md a label belongs to ("F2", "M1")
    patterns: dict[tuple[str, str, int, str], str] = field(default_factory=dict)


def load_labels(path: Path = LABELS) -> Labels:
    labels = Labels()
    if not path.exists():
        return labels
    data = json.loads(path.read_text(encoding="utf-8"))
    for item in data.get("findings", []):
        key = (item["repo"], item["path"], int(item["line"]), item["rule"])
        verdict = item["verdict"]
        if verdict not in ("true", "false"):
            raise SystemExit(f"labels: verdict must be 'true' or 'false', not {verdict!r}: {key}")
        labels.verdicts[key] = verdict == "true"
        labels.reasons[key] = item.get("reason", "")
        if item.get("pattern"):
            labels.patterns[key] = item["pattern"]
    for item in data.get("misses", []):
        key = (item["repo"], item["path"], int(item["line"]), item["rule"])
        labels.misses[key] = item.get("reason", "")
        if item.get("pattern"):
            labels.patterns[key] = item["pattern"]
    return labels


# -- checkouts -------------------------------------------------------------------------------


def snapshot_dir(snapshots: Path, repo: Repo) -> Path:
    for candidate in (snapshots / repo.slug / "repo", snapshots / repo.slug):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise FileNotFoundError(
        f"no snapshot of {repo.name} under {snapshots} (looked for {repo.slug}/repo)"
    )


def lay_out(repo: Repo, snapshots: Path, workdir: Path, fresh: bool = False) -> Path:
    """Write ``repo`` at its pinned commit into ``workdir/<owner>+<name>`` (reused if there).

    Snapshots may lack large files (data, media, LFS content): every blob the snapshot has is
    written, the missing ones are skipped (they are never Python sources of interest).
    """
    dest = workdir / repo.slug
    marker = dest / MARKER
    if not fresh and marker.is_file() and marker.read_text().strip() == repo.commit:
        if not (dest / ".git").exists():
            subprocess.run(["git", "init", "-q", str(dest)], capture_output=True, check=False)
        return dest
    git_dir = snapshot_dir(snapshots, repo)
    git = ["git", "--git-dir", str(git_dir)]
    tree = subprocess.run(
        [*git, "ls-tree", "-r", "-z", repo.commit], capture_output=True, check=False
    )
    if tree.returncode != 0:
        raise RuntimeError(
            f"{repo.name}: git ls-tree failed: {tree.stderr.decode(errors='replace').strip()}"
        )
    entries: list[tuple[str, str]] = []  # (sha, path) of regular files
    for rec in tree.stdout.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, kind, sha = meta.split()
        if kind == b"blob" and mode in (b"100644", b"100755"):
            entries.append((sha.decode(), path.decode("utf-8", errors="surrogateescape")))
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    root = dest.resolve()
    batch = subprocess.run(
        [*git, "cat-file", "--batch"],
        input="".join(f"{sha}\n" for sha, _ in entries).encode(),
        capture_output=True,
        check=False,
    )
    out = batch.stdout
    pos = 0
    for _sha, rel in entries:
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        pos = nl + 1
        if len(header) < 3 or header[1] != b"blob":
            continue  # "<sha> missing": not in the snapshot
        size = int(header[2])
        data = out[pos : pos + size]
        pos += size + 1
        target = (dest / rel).resolve()
        if root not in target.parents:
            continue  # a path that would leave the checkout
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    # A clone has a .git: it marks the project root that the project view analyses from (a
    # layout without one would measure the root fallback, not what users get).
    subprocess.run(["git", "init", "-q", str(dest)], capture_output=True, check=False)
    marker.write_text(repo.commit + "\n")
    return dest


def python_files(checkout: Path, paths: Iterable[str]) -> list[Path]:
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox"}
    found: list[Path] = []
    for rel in paths:
        base = (checkout / rel).resolve()
        if base.is_file() and base.suffix == ".py":
            found.append(base)
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
            found.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return found


def is_distributed_text(text: str) -> bool:
    return _DIST_MARKERS.search(text) is not None


# -- running the linter ----------------------------------------------------------------------


def ddp_lsp_command() -> list[str]:
    exe = Path(sys.executable).with_name("ddp-lsp")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ddp_lsp"]


def run_check(checkout: Path, paths: Sequence[str], extra: Sequence[str] = ()) -> list[dict]:
    """``ddp-lsp check --format json`` over ``paths`` of ``checkout``, with the project view."""
    cmd = [
        *ddp_lsp_command(),
        "check",
        "--format",
        "json",
        "--exit-zero",
        "--project",
        *extra,
        *paths,
    ]
    proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise RuntimeError(
            f"ddp-lsp check failed ({proc.returncode}) in {checkout}: {proc.stderr[-2000:]}"
        )
    out = proc.stdout.strip()
    return json.loads(out) if out else []


def to_hits(repo: Repo, checkout: Path, raw: Iterable[dict]) -> list[Hit]:
    hits = []
    root = checkout.resolve()
    for item in raw:
        path = Path(item["filename"])
        if not path.is_absolute():
            path = root / path
        try:
            rel = path.resolve().relative_to(root).as_posix()
        except ValueError:
            rel = path.as_posix()
        hits.append(
            Hit(repo.name, rel, int(item["location"]["row"]), item["code"], item.get("message", ""))
        )
    return hits


def check_repo(repo: Repo, snapshots: Path, workdir: Path, fresh: bool = False) -> RepoResult:
    result = RepoResult(repo)
    try:
        checkout = lay_out(repo, snapshots, workdir, fresh)
    except (FileNotFoundError, RuntimeError) as exc:
        result.error = str(exc)
        return result
    files = python_files(checkout, repo.paths)
    root = checkout.resolve()
    marked = tuple(p.rstrip("/") for p in repo.non_distributed)
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rel = f.relative_to(root).as_posix()
        result.files += 1
        result.lines += text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if not is_distributed_text(text) or any(
            rel == m or rel.startswith(m + "/") for m in marked
        ):
            result.non_distributed_files.add(rel)
    try:
        result.hits = to_hits(repo, checkout, run_check(checkout, repo.paths, SELECT_ALL))
    except (RuntimeError, json.JSONDecodeError) as exc:
        result.error = str(exc)
    return result


# -- scoring ---------------------------------------------------------------------------------


@dataclass
class RuleScore:
    findings: int = 0
    true: int = 0
    false: int = 0
    misses: int = 0
    misses_found: int = 0

    @property
    def labelled(self) -> int:
        return self.true + self.false

    @property
    def precision(self) -> float | None:
        return self.true / self.labelled if self.labelled else None

    @property
    def recall(self) -> float | None:
        """Real problems found over real problems known: the true findings and the marked
        misses that are found now, over those and the marked misses still missed."""
        if not (self.misses or self.misses_found):
            return None  # no marked miss: nothing to measure recall against
        found = self.true + self.misses_found
        return found / (found + self.misses)


def score(
    results: Sequence[RepoResult], labels: Labels, only: frozenset[str] | None = None
) -> dict[str, RuleScore]:
    rules: dict[str, RuleScore] = defaultdict(RuleScore)
    checked = {r.repo.name for r in results if not r.error}
    found_keys = {h.key for r in results for h in r.hits}
    for r in results:
        for h in r.hits:
            s = rules[h.rule]
            s.findings += 1
            verdict = labels.verdicts.get(h.key)
            if verdict is True:
                s.true += 1
            elif verdict is False:
                s.false += 1
    for key in labels.misses:
        if key[0] not in checked or labels.verdicts.get(key) is not None:
            continue  # a marked miss that is now found and labelled counts once, as a finding
        s = rules[key[3]]
        if key in found_keys:
            s.misses_found += 1
        else:
            s.misses += 1
    if only is not None:
        return {k: v for k, v in rules.items() if k in only}
    return dict(rules)


def combined(scores: dict[str, RuleScore], ids: Iterable[str]) -> RuleScore:
    total = RuleScore()
    for i in ids:
        s = scores.get(i)
        if s is None:
            continue
        total.findings += s.findings
        total.true += s.true
        total.false += s.false
        total.misses += s.misses
        total.misses_found += s.misses_found
    return total


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(results: Sequence[RepoResult], labels: Labels, out=sys.stdout) -> dict:
    ok = [r for r in results if not r.error]
    kloc = sum(r.lines for r in ok) / 1000.0
    scores = score(ok, labels)
    w = out.write
    w(
        f"corpus: {len(ok)} repositories checked, {sum(r.files for r in ok)} files, {kloc:.1f} kLOC\n"
    )
    for r in results:
        if r.error:
            w(f"  ERROR {r.repo.name}: {r.error}\n")
    w(
        "\n| rule | findings | per kLOC | labelled | true | false | precision | missed (marked, now found) | recall |\n"
    )
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    for rule in sorted(scores):
        s = scores[rule]
        per = s.findings / kloc if kloc else 0.0
        name = f"{rule} (off by default)" if rule in off_by_default() else rule
        w(
            f"| {name} | {s.findings} | {per:.2f} | {s.labelled} | {s.true} | {s.false} | "
            f"{_fmt(s.precision)} | {s.misses} ({s.misses_found}) | {_fmt(s.recall)} |\n"
        )
    total = combined(scores, scores)
    serious = combined(scores, SERIOUS)
    for title, s in (
        ("serious (DDP101, DDP103, DDP104, DDP201-204, DDP301)", serious),
        ("all rules", total),
    ):
        per = s.findings / kloc if kloc else 0.0
        w(
            f"| {title} | {s.findings} | {per:.2f} | {s.labelled} | {s.true} | {s.false} | "
            f"{_fmt(s.precision)} | {s.misses} ({s.misses_found}) | {_fmt(s.recall)} |\n"
        )
    # False alarms by pattern (docs/accuracy.md), counted on this run's findings.
    by_pattern: Counter[tuple[str, str]] = Counter()
    for r in ok:
        for h in r.hits:
            if labels.verdicts.get(h.key) is False:
                by_pattern[(labels.patterns.get(h.key, "?"), h.rule)] += 1
    if by_pattern:
        w("\nfalse alarms by pattern: ")
        order = sorted(by_pattern, key=lambda k: (len(k[0]), k))
        w(", ".join(f"{p} {rule} {by_pattern[(p, rule)]}" for p, rule in order) + "\n")
    # Findings in non-distributed modules of a distributed project.
    nd: Counter[str] = Counter()
    nd_any: Counter[str] = Counter()
    nd_examples: dict[str, list[str]] = defaultdict(list)
    for r in ok:
        for h in r.hits:
            if h.path in r.non_distributed_files:
                (nd_any if h.rule in ANY_MODULE else nd)[h.rule] += 1
                if len(nd_examples[h.rule]) < 3:
                    nd_examples[h.rule].append(f"{h.repo}:{h.path}:{h.line}")
    w(
        f"\nnon-distributed modules: {sum(len(r.non_distributed_files) for r in ok)} files; "
        f"{sum(nd.values())} findings of distributed-only rules"
        f" ({', '.join(f'{k} {v}' for k, v in sorted(nd.items())) or 'none'});"
        f" {sum(nd_any.values())} of any-module rules\n"
    )
    for rule in sorted(nd):
        w(f"  {rule}: e.g. {'; '.join(nd_examples[rule])}\n")
    w("\nper repository (findings, kLOC):\n")
    for r in ok:
        by_rule = Counter(h.rule for h in r.hits)
        w(
            f"  {r.repo.name}: {len(r.hits)} findings, {r.lines / 1000:.1f} kLOC"
            f"{' [' + ', '.join(f'{k}:{v}' for k, v in sorted(by_rule.items())) + ']' if by_rule else ''}\n"
        )
    return {
        "repositories": len(ok),
        "files": sum(r.files for r in ok),
        "kloc": round(kloc, 2),
        "rules": {
            k: {
                "findings": v.findings,
                "per_kloc": round(v.findings / kloc, 3) if kloc else None,
                "true": v.true,
                "false": v.false,
                "precision": v.precision,
                "misses": v.misses,
                "misses_found": v.misses_found,
                "recall": v.recall,
            }
            for k, v in sorted(scores.items())
        },
        "serious_precision": serious.precision,
        "false_alarms_by_pattern": {
            f"{p} {rule}": n for (p, rule), n in sorted(by_pattern.items())
        },
        "non_distributed_findings": dict(nd),
        "non_distributed_any_module_findings": dict(nd_any),
        "findings": [
            h.__dict__ | {"label": labels.verdicts.get(h.key)} for r in ok for h in r.hits
        ],
        "repos": {
            r.repo.name: {
                "commit": r.repo.commit,
                "lines": r.lines,
                "files": r.files,
                "non_distributed_files": sorted(r.non_distributed_files),
                "error": r.error,
            }
            for r in results
        },
    }


def load_results(path: Path, repos: Sequence[Repo]) -> list[RepoResult]:
    """The results a ``--json`` run saved, for scoring them again against newer labels."""
    data = json.loads(path.read_text(encoding="utf-8"))
    saved = data.get("repos")
    if saved is None:
        raise SystemExit(
            f"{path}: no per-repository data (written by an older triage.py): run again"
        )
    by_repo: dict[str, list[Hit]] = defaultdict(list)
    for f in data["findings"]:
        by_repo[f["repo"]].append(
            Hit(f["repo"], f["path"], int(f["line"]), f["rule"], f.get("message", ""))
        )
    results = []
    for repo in repos:
        info = saved.get(repo.name)
        if info is None:
            continue
        if info.get("commit") not in (None, repo.commit):
            raise SystemExit(
                f"{path}: {repo.name} was checked at {info['commit']}, the manifest pins {repo.commit}"
            )
        results.append(
            RepoResult(
                repo,
                lines=info["lines"],
                files=info["files"],
                hits=by_repo.get(repo.name, []),
                non_distributed_files=set(info["non_distributed_files"]),
                error=info.get("error", ""),
            )
        )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--labels", type=Path, default=LABELS)
    ap.add_argument(
        "--snapshots", type=Path, default=DEFAULT_SNAPSHOTS, help="folder of bare git snapshots"
    )
    ap.add_argument(
        "--workdir", type=Path, default=DEFAULT_WORKDIR, help="where checkouts are laid out"
    )
    ap.add_argument("--repo", action="append", default=[], help="only this repository (repeatable)")
    ap.add_argument(
        "--tag", action="append", default=[], help="only repositories with this style tag"
    )
    ap.add_argument("--fresh", action="store_true", help="lay every checkout out again")
    ap.add_argument("--list", action="store_true", help="print every finding with its label")
    ap.add_argument("--unlabelled", action="store_true", help="print the findings no label covers")
    ap.add_argument(
        "--select", default="", help="with --list/--unlabelled: only these rules (comma-separated)"
    )
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument(
        "--rescore",
        type=Path,
        metavar="JSON",
        help="score the results a --json run saved against the current labels; run nothing",
    )
    args = ap.parse_args(argv)

    repos = load_manifest(args.manifest)
    if args.repo:
        wanted = set(args.repo)
        unknown = wanted - {r.name for r in repos}
        if unknown:
            ap.error(f"not in the manifest: {', '.join(sorted(unknown))}")
        repos = [r for r in repos if r.name in wanted]
    if args.tag:
        repos = [r for r in repos if set(args.tag) & set(r.tags)]
    labels = load_labels(args.labels)
    if args.rescore:
        results = load_results(args.rescore, repos)
    else:
        results = []
        for repo in repos:
            print(f"checking {repo.name} ...", file=sys.stderr, flush=True)
            results.append(check_repo(repo, args.snapshots, args.workdir, args.fresh))
    summary = report(results, labels)
    select = {s.strip() for s in args.select.split(",") if s.strip()}
    if args.list or args.unlabelled:
        print()
        for r in results:
            for h in r.hits:
                if select and h.rule not in select:
                    continue
                verdict = labels.verdicts.get(h.key)
                if args.unlabelled and verdict is not None:
                    continue
                tag = {True: "TRUE ", False: "FALSE", None: "?    "}[verdict]
                print(f"{tag} {h.rule} {h.repo} {h.path}:{h.line}  {h.message[:160]}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
