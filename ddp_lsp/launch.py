"""Read how a training script is launched, from the files next to it.

What is read (only files in the training file's directory and its parents up to the project
root, never the user's home directory):

- **torchrun / python -m torch.distributed.run** command lines in ``*.sh``, ``*.bash``,
  ``*.slurm``, ``*.sbatch``, ``Makefile`` and ``*.yaml`` job specs: ``--nproc-per-node`` /
  ``--nproc_per_node``, ``--nnodes`` (a single number or ``MIN:MAX``).
- **accelerate launch** command lines: ``--num_processes``, ``--num_machines``,
  ``--gradient_accumulation_steps``, ``--mixed_precision``.
- **deepspeed** command lines: ``--num_gpus``, ``--num_nodes``.
- **SLURM** ``#SBATCH`` lines: ``--ntasks-per-node``, ``--gres=gpu:N`` /
  ``--gpus-per-node``, ``--nodes`` / ``-N``.
- **Accelerate config** YAML (``accelerate_config.yaml``, ``default_config.yaml``, any
  ``*.yaml`` with ``distributed_type:``): ``num_processes``, ``num_machines``,
  ``gradient_accumulation_steps``, ``mixed_precision``.
- **DeepSpeed config** JSON (``ds_config*.json``, ``deepspeed*.json``, any JSON with
  ``zero_optimization`` or ``train_micro_batch_size_per_gpu``): ``gradient_accumulation_steps``,
  ``fp16.enabled`` / ``bf16.enabled``.

A command line counts only when it names the training file (or a module path to it), so one
repository with several scripts gets the right launch for each. The first source that sets a
value wins, in the order: command line naming the script, SLURM header of that script file,
Accelerate config, DeepSpeed config. Unreadable or odd files are skipped: this never raises.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ddp_lsp.core.env import LaunchInfo

_SCRIPT_SUFFIXES = {".sh", ".bash", ".slurm", ".sbatch", ".job", ".yaml", ".yml"}
_MAX_BYTES = 256 * 1024
_MAX_FILES = 200
_LAUNCHERS = (
    "torchrun",
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate",
    "deepspeed",
)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip().strip("'\"")
    if ":" in value:  # torchrun --nnodes=MIN:MAX: the job may run on MAX nodes
        value = value.rsplit(":", 1)[1]
    return int(value) if value.isdigit() else None


def _read(path: Path) -> str | None:
    from ddp_lsp.sources import ReadError, check_source

    try:  # a FIFO or a device named run.sh is never opened (it could hang the check)
        st = check_source(path, _MAX_BYTES)
    except ReadError:
        return None
    return _read_cached(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _read_cached(path: str, mtime_ns: int, size: int) -> str | None:
    """A launch file's text, read once per version (the key changes when the file does): a
    directory of 300 training scripts shares one run.sh."""
    from ddp_lsp.sources import ReadError, read_source

    try:
        return read_source(path, _MAX_BYTES).decode("utf-8", errors="replace")
    except ReadError:
        return None


def _options(tokens: list[str]) -> dict[str, str]:
    """``--a=1 --b 2 -N 3`` -> {"a": "1", "b": "2", "N": "3"} (dashes and underscores alike)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-") and len(tok) > 1:
            key, eq, value = tok.lstrip("-").partition("=")
            key = key.replace("_", "-")
            if eq:
                out.setdefault(key, value)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                out.setdefault(key, tokens[i + 1])
                i += 1
            else:
                out.setdefault(key, "true")
        i += 1
    return out


def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()


def _command_launch(line: str, script: Path) -> LaunchInfo | None:
    if not any(name in line for name in _LAUNCHERS):
        return None
    if script.name not in line and script.stem not in line:
        return None
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        tokens = line.split()
    # Only the launcher's own options: those before the script path.
    upto = next(
        (i for i, t in enumerate(tokens) if t.endswith(script.name) or t.endswith(script.stem)),
        len(tokens),
    )
    head = tokens[:upto]
    opts = _options(head)
    joined = " ".join(head)
    if (
        "torchrun" in joined
        or "torch.distributed.run" in joined
        or "torch.distributed.launch" in joined
    ):
        nproc = _int(opts.get("nproc-per-node"))
        nnodes = _int(opts.get("nnodes"))
        return LaunchInfo(
            nproc_per_node=nproc,
            num_nodes=nnodes,
            world_size=nproc * nnodes if nproc and nnodes else None,
            launcher="torchrun",
        )
    if "accelerate" in joined:
        nproc_total = _int(opts.get("num-processes"))
        machines = _int(opts.get("num-machines"))
        per_node = nproc_total // machines if nproc_total and machines else nproc_total
        mp = opts.get("mixed-precision")
        return LaunchInfo(
            nproc_per_node=per_node,
            num_nodes=machines,
            world_size=nproc_total,
            grad_accum_steps=_int(opts.get("gradient-accumulation-steps")),
            mixed_precision=mp,
            launcher="accelerate",
        )
    if "deepspeed" in joined:
        nproc = _int(opts.get("num-gpus"))
        nodes = _int(opts.get("num-nodes"))
        return LaunchInfo(
            nproc_per_node=nproc,
            num_nodes=nodes,
            world_size=nproc * nodes if nproc and nodes else None,
            launcher="deepspeed",
        )
    return None


def _slurm(text: str) -> LaunchInfo | None:
    tokens: list[str] = []
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            tokens.extend(line[len("#SBATCH") :].split())
    if not tokens:
        return None
    opts = _options(tokens)
    per_node = _int(opts.get("ntasks-per-node")) or _int(opts.get("gpus-per-node"))
    gres = opts.get("gres", "")
    m = re.search(r"gpu(?::[\w-]+)?:(\d+)", gres)
    if per_node is None and m:
        per_node = int(m.group(1))
    nodes = _int(opts.get("nodes")) or _int(opts.get("N"))
    if per_node is None and nodes is None:
        return None
    return LaunchInfo(
        nproc_per_node=per_node,
        num_nodes=nodes,
        world_size=per_node * nodes if per_node and nodes else None,
        launcher="slurm",
    )


def _accelerate_yaml(text: str) -> LaunchInfo | None:
    if "distributed_type" not in text and "num_processes" not in text:
        return None
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith((" ", "\t", "#")) or ":" not in line:
            continue  # top-level keys only; nested tables (deepspeed_config...) are skipped
        key, _, value = line.partition(":")
        values[key.strip()] = value.split("#", 1)[0].strip().strip("'\"")
    total = _int(values.get("num_processes"))
    machines = _int(values.get("num_machines"))
    return LaunchInfo(
        nproc_per_node=total // machines if total and machines else total,
        num_nodes=machines,
        world_size=total,
        grad_accum_steps=_int(values.get("gradient_accumulation_steps")),
        mixed_precision=values.get("mixed_precision") or None,
        launcher="accelerate",
    )


def _deepspeed_json(text: str) -> LaunchInfo | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not (
        "zero_optimization" in data or "train_micro_batch_size_per_gpu" in data
    ):
        return None
    accum = data.get("gradient_accumulation_steps")
    mp = None
    if isinstance(data.get("bf16"), dict) and data["bf16"].get("enabled") is True:
        mp = "bf16"
    elif isinstance(data.get("fp16"), dict) and data["fp16"].get("enabled") is True:
        mp = "fp16"
    return LaunchInfo(
        grad_accum_steps=accum if isinstance(accum, int) and not isinstance(accum, bool) else None,
        mixed_precision=mp,
        launcher="deepspeed",
    )


def _merge(a: LaunchInfo | None, b: LaunchInfo | None, source: str) -> LaunchInfo | None:
    if b is None:
        return a
    b = replace(b, sources=(source,))
    if a is None:
        return b
    fields = (
        "nproc_per_node",
        "world_size",
        "num_nodes",
        "grad_accum_steps",
        "mixed_precision",
        "launcher",
    )
    updates = {
        f: getattr(b, f) for f in fields if getattr(a, f) is None and getattr(b, f) is not None
    }
    if not updates:
        return a
    sources = a.sources if source in a.sources else (*a.sources, source)
    return replace(a, sources=sources, **updates)


def launch_info(script: Path, root: Path | None = None) -> LaunchInfo | None:
    """Launch facts for a training script, or None when nothing says how it is launched."""
    try:
        script = script.resolve()
        top = (root or script.parent).resolve()
    except (OSError, RuntimeError):  # a symlink loop: nothing to read next to it
        return None
    dirs = [script.parent]
    while dirs[-1] != top and top in dirs[-1].parents:
        dirs.append(dirs[-1].parent)
    found: LaunchInfo | None = None
    configs: list[tuple[Path, str]] = []
    own = _read(script)
    if own is not None:
        found = _merge(found, _slurm(own), script.name)
    seen = 0
    for directory in dirs:
        for path in _candidates(directory):
            if seen >= _MAX_FILES or path == script:
                continue
            suffix = path.suffix.lower()
            seen += 1
            text = _read(path)
            if text is None:
                continue
            if suffix == ".json":
                configs.append((path, "json"))
                continue
            if suffix in (".yaml", ".yml"):
                configs.append((path, "yaml"))
            for line in _logical_lines(text):
                info = _command_launch(line, script)
                if info is not None:
                    found = _merge(found, info, _rel(path, top))
                    if suffix in (".slurm", ".sbatch", ".sh", ".job", ".bash"):
                        found = _merge(found, _slurm(text), _rel(path, top))
    for path, kind in configs:
        text = _read(path)
        if text is None:
            continue
        info = _accelerate_yaml(text) if kind == "yaml" else _deepspeed_json(text)
        found = _merge(found, info, _rel(path, top))
    return found


def _candidates(directory: Path) -> tuple[Path, ...]:
    """The files of a directory that may describe a launch, sorted."""
    try:
        mtime = directory.stat().st_mtime_ns
    except OSError:
        return ()
    return _candidates_cached(str(directory), mtime)


@lru_cache(maxsize=256)
def _candidates_cached(directory: str, mtime_ns: int) -> tuple[Path, ...]:
    # Keyed by the directory's mtime, which changes when files are added, removed or renamed:
    # 300 training scripts in one folder list it once.
    out = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                suffix = os.path.splitext(entry.name)[1].lower()
                if (
                    suffix not in _SCRIPT_SUFFIXES
                    and suffix != ".json"
                    and entry.name != "Makefile"
                ):
                    continue
                try:
                    if entry.is_file():
                        out.append(Path(entry.path))
                except OSError:
                    continue
    except OSError:
        return ()
    return tuple(sorted(out))


def _rel(path: Path, top: Path) -> str:
    try:
        return path.relative_to(top).as_posix()
    except ValueError:
        return path.name
