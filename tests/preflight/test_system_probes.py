"""System probes with injected facts: a 64 MB /dev/shm, memlock 64 KiB with InfiniBand, nofile
1024, a cgroup CPU quota, only a loopback interface, a busy port, risky NCCL variables."""

from __future__ import annotations

import os
import socket

import pytest

from ddp_lsp.preflight.probes.system import (
    ifname_matches,
    lint_env,
    probe_cpu_workers,
    probe_env_lint,
    probe_limits,
    probe_net_iface,
    probe_rdzv_port,
    probe_shm,
)
from ddp_lsp.preflight.schema import PreflightOptions, Status

from .conftest import FakeRoot, disk, limits, make_ctx

MB = 1 << 20


def test_docker_default_shm_of_64_mb_fails_with_shm_size_fix(root: FakeRoot) -> None:
    ctx = make_ctx(
        root,
        options=PreflightOptions(world_size=2, num_workers=4, batch_bytes=32 * MB),
        disk_usage=disk(64 * MB, 64 * MB),
    )
    out = probe_shm(ctx)
    assert out.status is Status.FAIL
    assert out.values["free_bytes"] == 64 * MB
    # 2 ranks x 4 workers x 2 prefetch x 32 MiB x 1.25
    assert out.values["required_bytes"] == int(2 * 4 * 2 * 32 * MB * 1.25)
    assert "--shm-size=" in (out.fix or "") and "--ipc=host" in (out.fix or "")
    assert "Bus error" in out.message


def test_shm_with_headroom_passes_and_really_allocates(root: FakeRoot) -> None:
    ctx = make_ctx(
        root,
        options=PreflightOptions(world_size=2, num_workers=1, batch_bytes=1 * MB),
        disk_usage=disk(16 << 30, 16 << 30),
    )
    out = probe_shm(ctx)
    assert out.status is Status.PASS, out.message
    assert out.values["fallocate_bytes"] == out.values["required_bytes"]
    assert os.listdir(root.base / "dev" / "shm") == []  # the test file is gone again


def test_shm_just_enough_warns(root: FakeRoot) -> None:
    need = int(2 * 1 * 2 * MB * 1.25)
    ctx = make_ctx(
        root,
        options=PreflightOptions(world_size=2, num_workers=1, batch_bytes=MB),
        disk_usage=disk(need + MB, need + MB),
    )
    assert probe_shm(ctx).status is Status.WARN


def test_memlock_64k_with_infiniband_fails(root: FakeRoot) -> None:
    root.infiniband()
    ctx = make_ctx(root, getrlimit=limits(memlock=(64 * 1024, 64 * 1024)))
    out = probe_limits(ctx)
    assert out.status is Status.FAIL
    assert "64 KiB" in out.message and "ibv_reg_mr" in out.message
    assert "memlock=-1" in (out.fix or "")


def test_memlock_64k_without_infiniband_is_harmless(root: FakeRoot) -> None:
    ctx = make_ctx(root, getrlimit=limits(memlock=(64 * 1024, 64 * 1024)))
    out = probe_limits(ctx)
    assert out.status is Status.PASS
    assert "no InfiniBand" in out.message


def test_nofile_1024_warns_with_ulimit_fix(root: FakeRoot) -> None:
    ctx = make_ctx(root, getrlimit=limits(nofile=(1024, 1048576)))
    out = probe_limits(ctx)
    assert out.status is Status.WARN
    assert "Too many open files" in out.message
    assert "ulimit -n 1048576" in (out.fix or "")
    assert "file_system" in (out.fix or "")


def test_cgroup_quota_caps_cpus_and_workers_above_it_warn(root: FakeRoot) -> None:
    root.cpu_max("400000 100000")  # docker --cpus=4 on a host whose affinity shows 8
    ctx = make_ctx(root, options=PreflightOptions(world_size=2, num_workers=8))
    out = probe_cpu_workers(ctx)
    assert (
        out.values["cpus"] == 4
        and out.values["affinity_cpus"] == 8
        and out.values["cgroup_cpus"] == 4
    )
    assert out.status is Status.WARN
    assert out.values["recommended_num_workers"] == 1
    assert "num_workers=1" in (out.fix or "")


def test_workers_within_cpus_pass(root: FakeRoot) -> None:
    root.cpu_max("max 100000")
    ctx = make_ctx(root, options=PreflightOptions(world_size=2, num_workers=3))
    out = probe_cpu_workers(ctx)
    assert out.status is Status.PASS and out.values["cpus"] == 8


def test_only_loopback_warns_single_node_and_fails_multinode(root: FakeRoot) -> None:
    root.iface("lo").iface("docker0").iface("eth0", up=False)
    single = probe_net_iface(make_ctx(root))
    assert single.status is Status.WARN
    assert "only loopback" in single.message
    assert "NCCL_SOCKET_IFNAME" in (single.fix or "")
    multi = probe_net_iface(make_ctx(root, {"PATH": "", "SLURM_NNODES": "2"}))
    assert multi.status is Status.FAIL


def test_socket_ifname_that_matches_nothing_fails(root: FakeRoot) -> None:
    root.iface("lo").iface("ens5")
    out = probe_net_iface(make_ctx(root, {"PATH": "", "NCCL_SOCKET_IFNAME": "eth"}))
    assert out.status is Status.FAIL
    assert out.fix == "export NCCL_SOCKET_IFNAME=ens5"
    assert (
        probe_net_iface(make_ctx(root, {"PATH": "", "NCCL_SOCKET_IFNAME": "ens"})).status
        is Status.PASS
    )


@pytest.mark.parametrize(
    ("spec", "name", "hit"),
    [
        ("eth", "eth0", True),
        ("^docker,lo", "eth0", True),
        ("^docker,lo", "docker0", False),
        ("=eth0", "eth01", False),
        ("=eth0", "eth0", True),
        ("ib,ens", "ens5", True),
    ],
)
def test_ifname_syntax(spec: str, name: str, hit: bool) -> None:
    assert ifname_matches(spec, name) is hit


def test_busy_port_fails_and_names_the_holder() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = probe_rdzv_port(
            make_ctx(None, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        )
    assert out.status is Status.FAIL
    assert "already in use" in out.message
    assert f"pid {os.getpid()}" in out.message
    assert "export MASTER_PORT=" in (out.fix or "")
    free = int((out.fix or "").split("MASTER_PORT=")[1].split()[0])
    assert free != port


def test_free_port_passes() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = probe_rdzv_port(make_ctx(None, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}))
    assert out.status is Status.PASS, out.message


def test_unresolvable_master_addr_fails() -> None:
    out = probe_rdzv_port(
        make_ctx(None, {"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29500"})
    )
    assert out.status is Status.FAIL and "does not resolve" in out.message


def test_env_lint_flags_risky_settings(root: FakeRoot) -> None:
    env = {
        "NCCL_P2P_DISABLE": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "NCCL_SOCKET_IFACE": "eth0",
        "PATH": "",
    }
    found = {msg.split(":")[0].split(" ")[0]: (status, fix) for status, msg, fix in lint_env(env)}
    assert found["NCCL_P2P_DISABLE=1"][0] is Status.WARN
    assert found["TORCH_NCCL_ASYNC_ERROR_HANDLING=0"][0] is Status.WARN
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in found["TORCH_NCCL_DUMP_ON_TIMEOUT=1"][1]
    assert found["NCCL_SOCKET_IFACE"][1] == "rename NCCL_SOCKET_IFACE to NCCL_SOCKET_IFNAME"
    out = probe_env_lint(make_ctx(root, env))
    assert out.status is Status.WARN


def test_env_lint_quiet_on_sane_settings(root: FakeRoot) -> None:
    env = {
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    }
    assert lint_env(env) == []
    assert probe_env_lint(make_ctx(root, env)).status is Status.PASS
