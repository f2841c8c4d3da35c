"""GPU probes through injected facts: a fake ``torch.cuda`` (two GPUs, P2P copies that return
zeros), fake ``nvidia-smi`` / ``dcgmi`` scripts on PATH, a fake sysfs for NUMA nodes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ddp_lsp.preflight.probes.gpu import (
    parse_topo,
    probe_cuda_basic,
    probe_dcgm,
    probe_env_versions,
    probe_gpu_p2p,
    probe_gpu_topo,
)
from ddp_lsp.preflight.schema import PreflightOptions, Status

from .conftest import FakeRoot, fake_exe, make_ctx

GiB = 1 << 30


class FakeCuda:
    """Two (or n) GPUs; ``broken`` pairs return zeros from a device-to-device copy."""

    def __init__(
        self,
        count: int = 2,
        *,
        build: str | None = "12.8",
        available: bool = True,
        broken: frozenset[tuple[int, int]] = frozenset(),
        used: dict[int, int] | None = None,
    ) -> None:
        self.count, self._build, self.available, self.broken = count, build, available, broken
        self.used = used or {}

    def build(self) -> str | None:
        return self._build

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return self.count

    def name(self, index: int) -> str:
        return "NVIDIA L40S"

    def mem_info(self, index: int) -> tuple[int, int]:
        return 48 * GiB - self.used.get(index, 0), 48 * GiB

    def can_access_peer(self, src: int, dst: int) -> bool:
        return True

    def pattern(self, index: int, nbytes: int) -> Any:
        return (index, bytes(range(256)) * (nbytes // 256))

    def copy_to(self, buf: Any, index: int) -> Any:
        src, data = buf
        return (index, bytes(len(data)) if (src, index) in self.broken else data)

    def to_host(self, buf: Any) -> bytes:
        return bytes(buf[1])

    def synchronize(self, index: int) -> None:
        pass


def gpu_ctx(
    cuda: FakeCuda, root: FakeRoot | None = None, env: dict[str, str] | None = None, **opts: Any
) -> Any:
    return make_ctx(root, env, options=PreflightOptions(**opts), cuda_ops=lambda: cuda)


def test_two_gpus_for_two_ranks_pass() -> None:
    out = probe_cuda_basic(gpu_ctx(FakeCuda(2)))
    assert out.status is Status.PASS
    assert out.values["device_count"] == 2 and out.values["local_world_size"] == 2


def test_two_gpus_for_four_ranks_fail_with_nproc_fix() -> None:
    out = probe_cuda_basic(gpu_ctx(FakeCuda(2), world_size=4))
    assert out.status is Status.FAIL
    assert "invalid device ordinal" in out.message
    assert "--nproc-per-node=2" in (out.fix or "")


def test_memory_already_used_on_gpu0_warns() -> None:
    out = probe_cuda_basic(gpu_ctx(FakeCuda(2, used={0: 40 * GiB})))
    assert out.status is Status.WARN
    assert "cuda:0" in out.message and "set_device(local_rank)" in (out.fix or "")


def test_duplicate_visible_devices_fail() -> None:
    out = probe_cuda_basic(gpu_ctx(FakeCuda(2), env={"PATH": "", "CUDA_VISIBLE_DEVICES": "0,0"}))
    assert out.status is Status.FAIL and "twice" in out.message


def test_cpu_build_is_skipped_with_reason_unless_nccl_asked() -> None:
    out = probe_cuda_basic(gpu_ctx(FakeCuda(0, build=None)))
    assert out.status is Status.SKIP and "CPU-only" in out.message
    assert probe_cuda_basic(gpu_ctx(FakeCuda(0, build=None), backend="nccl")).status is Status.FAIL


def test_p2p_copy_returning_zeros_fails_with_p2p_disable_fix() -> None:
    out = probe_gpu_p2p(gpu_ctx(FakeCuda(2, broken=frozenset({(0, 1)}))))
    assert out.status is Status.FAIL
    assert "GPU0->GPU1 returned zeros (P2P enabled)" in out.message
    assert "NCCL_P2P_DISABLE=1" in (out.fix or "")
    pairs = {(p["src"], p["dst"]): p["match"] for p in out.values["pairs"]}
    assert pairs == {(0, 1): False, (1, 0): True}


def test_p2p_copies_correct_pass() -> None:
    out = probe_gpu_p2p(gpu_ctx(FakeCuda(2)))
    assert out.status is Status.PASS and "2 GPU pairs copy correctly" in out.message


def test_p2p_single_gpu_skips() -> None:
    assert probe_gpu_p2p(gpu_ctx(FakeCuda(1))).status is Status.SKIP


TOPO_SYS = (
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tSYS\tNODE\t0-15\t0\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\t16-31\t1\t\tN/A\n"
    "NIC0\tNODE\tSYS\t X \t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
)
TOPO_NVLINK = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n"
)


def smi_script(topo: str, driver: str = "570.86.15", cuda: str = "12.8") -> str:
    return (
        'case "$1" in\n'
        f"  topo) printf '%s' '{topo}' ;;\n"
        f"  --query-gpu=*) printf '{driver}, NVIDIA L40S, 00000000:17:00.0\\n{driver}, NVIDIA L40S, 00000000:65:00.0\\n' ;;\n"
        f"  *) printf '| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda}     |\\n' ;;\n"
        "esac\n"
    )


def test_topology_parser_reads_links_and_affinity() -> None:
    topo = parse_topo(TOPO_SYS)
    assert topo.gpus == ("GPU0", "GPU1")
    assert topo.links == {(0, 1): "SYS", (1, 0): "SYS"}
    assert topo.cpu_affinity == {0: "0-15", 1: "16-31"}
    assert topo.numa_affinity == {0: "0", 1: "1"}


def test_sys_topology_and_numa_mismatch_warn(tmp_path: Path, root: FakeRoot) -> None:
    fake_exe(tmp_path / "bin", "nvidia-smi", smi_script(TOPO_SYS))
    root.write("sys/bus/pci/devices/0000:17:00.0/numa_node", "0\n").write(
        "sys/bus/pci/devices/0000:65:00.0/numa_node", "1\n"
    )
    ctx = make_ctx(root, {"PATH": str(tmp_path / "bin")}, cpu_affinity=lambda: set(range(16)))
    out = probe_gpu_topo(ctx)
    assert out.status is Status.WARN
    assert "SYS" in out.message and "GPU1" in out.message  # CPUs 0-15 are outside GPU1's 16-31
    assert "--numa-binding" in (out.fix or "")
    assert out.values["numa_node"] == {"GPU0": 0, "GPU1": 1}
    assert out.values["interconnect"] == "PCIe across CPU"


def test_nvlink_topology_passes(tmp_path: Path, root: FakeRoot) -> None:
    fake_exe(tmp_path / "bin", "nvidia-smi", smi_script(TOPO_NVLINK))
    out = probe_gpu_topo(
        make_ctx(root, {"PATH": str(tmp_path / "bin")}, cpu_affinity=lambda: set(range(32)))
    )
    assert out.status is Status.PASS and "NVLink" in out.message


def test_topo_without_nvidia_smi_skips(root: FakeRoot) -> None:
    out = probe_gpu_topo(make_ctx(root, {"PATH": ""}))
    assert out.status is Status.SKIP and "nvidia-smi not found" in out.message


def _fake_torch(cuda: str | None) -> Any:
    dist = SimpleNamespace(
        is_available=lambda: True,
        is_gloo_available=lambda: True,
        is_nccl_available=lambda: cuda is not None,
    )
    return SimpleNamespace(
        __version__="2.13.0",
        version=SimpleNamespace(cuda=cuda),
        distributed=dist,
        cuda=SimpleNamespace(nccl=SimpleNamespace(version=lambda: (2, 27, 7))),
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 91000)),
    )


@pytest.mark.parametrize(
    ("driver_cuda", "status"), [("12.8", Status.PASS), ("12.2", Status.WARN), ("11.8", Status.FAIL)]
)
def test_driver_too_old_for_the_wheel(tmp_path: Path, driver_cuda: str, status: Status) -> None:
    fake_exe(tmp_path / "bin", "nvidia-smi", smi_script(TOPO_NVLINK, cuda=driver_cuda))
    ctx = make_ctx(None, {"PATH": str(tmp_path / "bin")}, import_torch=lambda: _fake_torch("12.8"))
    out = probe_env_versions(ctx)
    assert out.status is status, out.message
    assert out.values["nccl"] == "2.27.7" and out.values["driver"] == "570.86.15"
    if status is Status.FAIL:
        assert "upgrade the NVIDIA driver" in (out.fix or "")


def test_torch_missing_fails_with_install_fix() -> None:
    def no_torch() -> Any:
        raise ImportError("No module named 'torch'")

    out = probe_env_versions(make_ctx(None, import_torch=no_torch))
    assert out.status is Status.FAIL and "pip install torch" in (out.fix or "")


DCGM_JSON = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "Denylist", "results": [{"status": "Pass"}]},
                    {
                        "name": "Persistence Mode",
                        "results": [
                            {"status": "Fail", "info": "Persistence mode for GPU 0 is disabled"}
                        ],
                    },
                ],
            }
        ]
    }
}


def test_dcgm_failure_is_mapped(tmp_path: Path) -> None:
    fake_exe(tmp_path / "bin", "dcgmi", f"printf '%s' '{json.dumps(DCGM_JSON)}'\n")
    out = probe_dcgm(make_ctx(None, {"PATH": str(tmp_path / "bin")}))
    assert out.status is Status.FAIL
    assert "Persistence Mode" in out.message


def test_dcgm_absent_skips() -> None:
    assert probe_dcgm(make_ctx(None, {"PATH": ""})).status is Status.SKIP


@pytest.mark.torch
def test_real_ops_read_device_bytes_without_numpy() -> None:
    """TorchCudaOps.to_host on a real tensor (a view of a bigger one, too) gives exactly its
    bytes, through the storage rather than numpy (which torch does not depend on)."""
    import torch

    from ddp_lsp.preflight.probes.gpu import TorchCudaOps

    ops = TorchCudaOps(torch)
    base = (torch.arange(16, dtype=torch.int32) * 2654435761) ^ 0x5BD1E995
    view = base[4:9]
    assert ops.to_host(base) == b"".join(int(v).to_bytes(4, "little", signed=True) for v in base)
    assert ops.to_host(view) == b"".join(int(v).to_bytes(4, "little", signed=True) for v in view)
