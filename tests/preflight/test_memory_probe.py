"""host.memory: pinned batch buffers against RAM, the cgroup limit and memlock (fake /proc, /sys)."""

from __future__ import annotations

import resource

from ddp_lsp.preflight.probes.memory import pow2ceil, probe_host_memory
from ddp_lsp.preflight.schema import PreflightOptions, Status
from tests.preflight.conftest import FakeRoot, limits, make_ctx

GiB = 1 << 30
MiB = 1 << 20


def _meminfo(root: FakeRoot, total: int, available: int) -> FakeRoot:
    return root.write(
        "proc/meminfo",
        f"MemTotal:       {total // 1024} kB\nMemFree:        {available // 2048} kB\n"
        f"MemAvailable:   {available // 1024} kB\nSwapTotal:      0 kB\n",
    )


def _gpu_host(root: FakeRoot) -> FakeRoot:
    return root.write("proc/driver/nvidia/gpus/0000:17:00.0/information", "Model: fake\n")


def _options(**kw: object) -> PreflightOptions:
    base: dict[str, object] = {"world_size": 8, "num_workers": 8, "batch_bytes": 96 * MiB}
    base.update(kw)
    return PreflightOptions(**base)  # type: ignore[arg-type]


def test_pow2ceil_is_the_caching_host_allocators_rounding() -> None:
    assert [pow2ceil(n) for n in (0, 1, 2, 3, 96 * MiB, 128 * MiB)] == [
        0,
        1,
        2,
        4,
        128 * MiB,
        128 * MiB,
    ]


def test_pinned_buffers_beyond_available_ram_fail_with_the_formula(root: FakeRoot) -> None:
    _gpu_host(_meminfo(root, 64 * GiB, 40 * GiB))
    # 8 ranks x 8 workers x 2 prefetch x 128 MiB (96 MiB rounded up) = 16 GiB: fine;
    # with prefetch_factor=8 it is 64 GiB > 40 GiB available.
    out = probe_host_memory(make_ctx(root, options=_options(prefetch_factor=8)))
    assert out.status is Status.FAIL, out.message
    assert out.values["pinned_bytes"] == 8 * 8 * 8 * 128 * MiB
    assert "8 ranks x 8 workers x 8 prefetch x 128.0 MiB" in out.message
    assert "(assumed pin_memory)" in out.message
    assert "prefetch_factor" in (out.fix or "")
    ok = probe_host_memory(make_ctx(root, options=_options(prefetch_factor=1)))
    assert ok.status is Status.PASS, ok.message


def test_the_container_limit_is_the_room_when_smaller(root: FakeRoot) -> None:
    _gpu_host(_meminfo(root, 512 * GiB, 500 * GiB))
    root.write("sys/fs/cgroup/memory.max", f"{24 * GiB}\n").write(
        "sys/fs/cgroup/memory.current", f"{4 * GiB}\n"
    )
    out = probe_host_memory(make_ctx(root, options=_options(pin_memory=True)))
    # 16 GiB pinned of 20 GiB left under the cgroup limit: over half.
    assert out.status is Status.WARN, out.message
    assert out.values["room_bytes"] == 20 * GiB
    assert "the container's memory limit" in out.message
    root.write("sys/fs/cgroup/memory.max", "max\n")
    assert probe_host_memory(make_ctx(root, options=_options())).status is Status.PASS


def test_pin_memory_off_or_no_gpu_pins_nothing(root: FakeRoot) -> None:
    _meminfo(root, 8 * GiB, 1 * GiB)
    cpu = probe_host_memory(make_ctx(root, options=_options()))
    assert cpu.status is Status.PASS and cpu.values["pinned_bytes"] == 0
    assert "no NVIDIA driver" not in cpu.message  # pin_memory unknown: assumed off on CPU
    _gpu_host(root)
    off = probe_host_memory(make_ctx(root, options=_options(pin_memory=False)))
    assert off.status is Status.PASS and "pin_memory=False" in off.message


def test_memlock_fails_only_where_infiniband_registers_memory(root: FakeRoot) -> None:
    _gpu_host(_meminfo(root, 512 * GiB, 500 * GiB))
    small = limits(memlock=(8 * MiB, 8 * MiB))
    out = probe_host_memory(make_ctx(root, options=_options(), getrlimit=small))
    assert out.status is Status.PASS, out.message
    assert "bounds mlock/RDMA registration, not CUDA pinning" in out.message
    root.infiniband()
    ib = probe_host_memory(make_ctx(root, options=_options(), getrlimit=small))
    assert ib.status is Status.WARN and "memlock 8.0 MiB is below them" in ib.message
    assert (
        probe_host_memory(
            make_ctx(
                root, options=_options(), getrlimit=limits(memlock=(resource.RLIM_INFINITY,) * 2)
            )
        ).status
        is Status.PASS
    )


def test_unreadable_meminfo_is_a_skip_the_gpu_job_needs(root: FakeRoot) -> None:
    _gpu_host(root)
    out = probe_host_memory(make_ctx(root, options=_options(pin_memory=True)))
    assert out.status is Status.SKIP and out.needed
