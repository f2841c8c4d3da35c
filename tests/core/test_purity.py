"""The core and the rules stay pure (DESIGN.md): they load neither pygls, lsprotocol, torch nor
numpy, depend on nothing above them (settings arrive as ``ddp_lsp.core.settings.Settings``,
never through ``ddp_lsp.config``), and never read the host they run on (machine facts arrive
from a preflight report passed in by the front ends, as ``ddp_lsp.core.env.MachineInfo``).

Two checks: a fresh interpreter that imports the core and every rule and analyses a module
must not have loaded anything forbidden, and every module of ``core/`` and ``rules/`` is read
statically for forbidden imports and host probes (a probe in a branch no test reaches still
counts). Both checkers are themselves tested on planted violations.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ddp_lsp.core
import ddp_lsp.rules

PURE_PACKAGES = ("ddp_lsp.core", "ddp_lsp.rules")
HEAVY = ("pygls", "lsprotocol", "torch", "numpy")
# What sits above the core (front ends, loaders, the project index) or reads configuration.
ABOVE = ("ddp_lsp.config", "ddp_lsp.lsp", "ddp_lsp.cli", "ddp_lsp.checker", "ddp_lsp.project")
# Standard-library (and common) modules whose job is to ask the host or the outside world.
HOST_MODULES = frozenset(
    {
        "platform",
        "socket",
        "psutil",
        "subprocess",
        "multiprocessing",
        "resource",
        "shutil",
        "getpass",
        "pwd",
        "grp",
        "ctypes",
        "tomllib",
        "tomli",
    }
)
# ``os`` functions that read this machine: CPUs, environment, load, file system.
HOST_OS_NAMES = frozenset(
    {
        "cpu_count",
        "process_cpu_count",
        "sched_getaffinity",
        "environ",
        "environb",
        "getenv",
        "getenvb",
        "uname",
        "getloadavg",
        "sysconf",
        "confstr",
        "statvfs",
        "getcwd",
        "listdir",
        "scandir",
        "walk",
        "stat",
        "lstat",
    }
)
FILE_READS = frozenset({"read_text", "read_bytes", "open"})  # method calls on a path
HOST_PATHS = ("/proc", "/sys")


def violations(source: str, module: str) -> list[str]:
    """Why ``source`` (the module ``module``) is not pure; empty when it is.

    Only code counts: a rule's cases are strings, so the ``import os`` and
    ``os.environ["RANK"]`` inside them are not seen."""
    tree = ast.parse(source)
    found: list[str] = []
    os_aliases: set[str] = set()
    package = module.rsplit(".", 1)[0]

    def imported(name: str, line: int) -> None:
        top = name.split(".")[0]
        if top in HEAVY:
            found.append(f"line {line}: imports {name} (heavy)")
        elif top == "ddp_lsp" and not name.startswith(PURE_PACKAGES):
            found.append(f"line {line}: imports {name} (above the core)")
        elif top in HOST_MODULES:
            found.append(f"line {line}: imports {name} (reads the host)")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported(alias.name, line)
                if alias.name == "os":
                    os_aliases.add(alias.asname or "os")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            if base == "ddp_lsp" or (node.level and not node.module):
                for alias in node.names:
                    imported(f"{base}.{alias.name}", line)
            else:
                imported(base, line)
            if base == "os":
                for alias in node.names:
                    if alias.name in HOST_OS_NAMES:
                        found.append(f"line {line}: imports os.{alias.name} (reads the host)")
        elif isinstance(node, ast.Attribute):
            if (
                isinstance(node.value, ast.Name)
                and node.value.id in os_aliases
                and node.attr in HOST_OS_NAMES
            ):
                found.append(f"line {line}: uses os.{node.attr} (reads the host)")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"line {line}: calls open() (reads files)")
            elif isinstance(func, ast.Attribute) and func.attr in FILE_READS:
                found.append(f"line {line}: calls .{func.attr}() (reads files)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(node.value == p or node.value.startswith(p + "/") for p in HOST_PATHS):
                found.append(f"line {line}: names {node.value!r} (reads the host)")
    return found


def pure_modules() -> list[tuple[str, Path]]:
    out = []
    for package in (ddp_lsp.core, ddp_lsp.rules):
        directory = Path(package.__file__).parent
        # Subpackages too (core/frameworks: the framework tables are core).
        for path in sorted(directory.rglob("*.py")):
            rel = path.relative_to(directory).with_suffix("")
            name = ".".join((package.__name__, *rel.parts))  # __init__ too: its package
            out.append((name, path))
    return out


def test_core_and_rules_neither_import_above_them_nor_read_the_host() -> None:
    modules = pure_modules()
    assert len(modules) > 40  # every rule module is read, not just the core
    bad = {
        name: problems
        for name, path in modules
        if (problems := violations(path.read_text(encoding="utf-8"), name))
    }
    assert bad == {}


CLEAN = '''
"""A rule whose cases mention os.environ, open() and /proc: strings are not code."""
import ast
import re
from ddp_lsp.core.rule import ChunkContext
from ddp_lsp.rules import _data as D
from . import _patterns
CASE = """import os\\nrank = int(os.environ["RANK"])\\nopen("/proc/meminfo")\\nos.cpu_count()"""
def check(ctx: ChunkContext, environ: dict[str, str]) -> str:
    return environ.get("RANK", "") + "/procs"
'''


@pytest.mark.parametrize(
    ("planted", "needle"),
    [
        ("from ddp_lsp.config import Settings", "ddp_lsp.config (above the core)"),
        ("import ddp_lsp.config", "ddp_lsp.config (above the core)"),
        ("from ddp_lsp import config", "ddp_lsp.config (above the core)"),
        ("from .. import config", "ddp_lsp.config (above the core)"),
        ("from ddp_lsp.lsp.state import ServerState", "ddp_lsp.lsp.state (above the core)"),
        ("from ddp_lsp.cli import main", "ddp_lsp.cli (above the core)"),
        ("from ddp_lsp.checker import check_paths", "ddp_lsp.checker (above the core)"),
        ("from ddp_lsp.project import ProjectIndex", "ddp_lsp.project (above the core)"),
        ("def f():\n    from ddp_lsp.preflight import report", "ddp_lsp.preflight"),
        ("import torch", "torch (heavy)"),
        ("import os\nn = os.cpu_count()", "os.cpu_count (reads the host)"),
        ("import os as o\nn = len(o.sched_getaffinity(0))", "os.sched_getaffinity"),
        ("import os\nrank = os.environ['RANK']", "os.environ (reads the host)"),
        ("import os\nrank = os.getenv('RANK')", "os.getenv (reads the host)"),
        ("from os import environ", "os.environ (reads the host)"),
        ("from os import sched_getaffinity", "os.sched_getaffinity (reads the host)"),
        ("import platform", "platform (reads the host)"),
        ("import socket", "socket (reads the host)"),
        ("import multiprocessing\nn = multiprocessing.cpu_count()", "multiprocessing"),
        ("meminfo = open('/proc/meminfo').read()", "calls open() (reads files)"),
        ("from pathlib import Path\nn = Path('/sys/fs/cgroup/cpu.max').read_text()", "'/sys/fs"),
        ("MEMINFO = '/proc/meminfo'", "'/proc/meminfo' (reads the host)"),
    ],
)
def test_the_purity_check_catches_a_planted_violation(planted: str, needle: str) -> None:
    assert violations(CLEAN, "ddp_lsp.rules.ddp999_planted") == []
    found = violations(CLEAN + planted + "\n", "ddp_lsp.rules.ddp999_planted")
    assert any(needle in f for f in found), found


# -- in a fresh interpreter: what importing and running the core really loads --------------------

CODE = """
import sys
import ddp_lsp.core
from ddp_lsp.core.engine import analyze
from ddp_lsp.core.registry import all_rules
import ddp_lsp.docs
assert all_rules()
analyze("import torch.distributed as dist\\nx = 1\\n")
{planted}
forbidden = {forbidden!r}
loaded = sorted(
    m for m in sys.modules
    if m.split(".")[0] in {heavy!r} or m == "tomllib" or m.startswith(forbidden)
)
print(",".join(loaded))
"""


def loaded_by_the_core(planted: str = "") -> str:
    code = CODE.format(planted=planted, forbidden=ABOVE, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_core_and_rules_load_nothing_heavy_or_above_them() -> None:
    assert loaded_by_the_core() == ""


def test_the_fresh_interpreter_check_catches_a_planted_import() -> None:
    assert "ddp_lsp.config" in loaded_by_the_core("import ddp_lsp.config").split(",")
