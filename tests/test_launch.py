"""Launch configuration read from the files next to a training script."""

from __future__ import annotations

import json
from pathlib import Path

from ddp_lsp.launch import launch_info


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_torchrun_in_shell_script(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", "print('hi')\n")
    write(
        tmp_path / "run.sh",
        "#!/bin/bash\nset -e\ntorchrun --nnodes=2 \\\n  --nproc_per_node 8 train.py --epochs 3 --nproc_per_node 1\n",
    )
    info = launch_info(script)
    assert info is not None
    assert (info.nproc_per_node, info.num_nodes, info.world_size, info.launcher) == (
        8,
        2,
        16,
        "torchrun",
    )
    assert info.sources == ("run.sh",)


def test_command_for_another_script_is_ignored(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", "")
    write(tmp_path / "run.sh", "torchrun --nproc-per-node=4 finetune.py\n")
    assert launch_info(script) is None


def test_slurm_header_and_srun(tmp_path: Path) -> None:
    script = write(tmp_path / "src" / "train.py", "")
    write(
        tmp_path / "job.sbatch",
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:a100:8\n#SBATCH --cpus-per-task=32\n"
        "srun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=8 src/train.py\n",
    )
    info = launch_info(script, root=tmp_path)
    assert info is not None
    assert info.nproc_per_node == 8 and info.num_nodes == 4 and info.world_size == 32
    assert info.sources == ("job.sbatch",)


def test_accelerate_config_and_deepspeed_json(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", "")
    write(
        tmp_path / "accelerate_config.yaml",
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: bf16\n"
        "num_machines: 1\nnum_processes: 4\ngradient_accumulation_steps: 8\n",
    )
    write(
        tmp_path / "ds_config.json",
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 4,
                "gradient_accumulation_steps": 2,
                "fp16": {"enabled": True},
            }
        ),
    )
    info = launch_info(script)
    assert info is not None
    assert (info.nproc_per_node, info.grad_accum_steps, info.mixed_precision) == (4, 8, "bf16")
    assert "accelerate_config.yaml" in info.sources


def test_accelerate_launch_command(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", "")
    write(
        tmp_path / "Makefile",
        "train:\n\taccelerate launch --num_processes 2 --mixed_precision fp16 --gradient_accumulation_steps 4 train.py\n",
    )
    info = launch_info(script)
    assert info is not None
    assert (info.nproc_per_node, info.world_size, info.grad_accum_steps, info.mixed_precision) == (
        2,
        2,
        4,
        "fp16",
    )


def test_garbage_is_skipped(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", "")
    write(tmp_path / "broken.json", "{not json")
    write(tmp_path / "weird.sh", "torchrun --nproc-per-node='unterminated train.py\n")
    (tmp_path / "binary.sh").write_bytes(b"\xff\xfe\x00torchrun train.py")
    info = launch_info(script)
    assert info is None or info.nproc_per_node is None
