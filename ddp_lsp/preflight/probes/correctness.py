"""dist.correctness: DDP on this machine trains exactly like one process would.

In the spirit of ``accelerate test``: real ranks (NCCL on GPUs, gloo on CPU), each starting from
*different* weights and buffers (as ranks do when the model is built before seeding), are
wrapped in ``DistributedDataParallel``; then the probe checks what DDP promises:

- after the wrap every rank holds rank 0's parameters and buffers (DDP's constructor broadcast);
- the RNG state, seeded alike, is still alike on every rank after the wrap;
- a ``DistributedSampler`` gives each rank a shard, and the shards are disjoint (beyond the
  padding DDP documents) and together cover the dataset;
- a few SGD steps of DDP on those shards end at the parameters that one process reaches
  training on the union of the shards (the mean of per-rank mean losses is the global mean
  loss, so the two must agree to rounding), and every rank ends with the same parameters.

Broken collectives (P2P copies that return zeros, a NIC that corrupts), a DDP build whose
broadcast does not reach a rank, or a rank whose weights drift all show up as a named rank and
a measured difference. Fault injection for tests (``DDP_LSP_PREFLIGHT_INJECT``): ``weights:<rank>``
(that rank's weights change after the wrap), ``rng:<rank>`` (it draws one extra random number),
``sampler:<rank>`` (it shards with another seed).
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from typing import Any

from ddp_lsp.preflight.probes.base import Outcome, Probe, ProbeContext, ok, skip
from ddp_lsp.preflight.probes.ranks import RankEnv, injected, plan_ranks, run_ranks
from ddp_lsp.preflight.schema import Status

SEED = 1234
SAMPLES = 37  # odd: the sampler has to pad, as it does for most real dataset sizes
FEATURES = 8
BATCH_PER_RANK = 4
STEPS = 3
LR = 0.1
#: float32 with TF32 off: DDP's bucketed average and one process's mean differ by rounding only
#: (~1e-7 here); a rank that drifted is off by its drift (the injected one by 1e-2).
TOLERANCE = 1e-4


def _model(torch: Any) -> Any:
    nn = torch.nn
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.BatchNorm1d(16), nn.Linear(16, 1))
    bn = model[2]
    with torch.no_grad():
        # Non-trivial buffers, used in forward (eval mode), so a buffer that DDP failed to
        # broadcast changes the outputs and the check below sees it.
        bn.running_mean.copy_(torch.linspace(-0.5, 0.5, 16))
        bn.running_var.copy_(torch.linspace(0.5, 1.5, 16))
    # Eval-mode BatchNorm: per-rank batch statistics would make DDP differ from one process by
    # design (that is what SyncBatchNorm is for), which is not what this probe measures.
    bn.eval()
    return model


def _flat(torch: Any, tensors: Any, device: Any) -> Any:
    parts = [t.detach().reshape(-1).to(device=device, dtype=torch.float32) for t in tensors]
    return torch.cat(parts) if parts else torch.zeros(1, device=device)


def _gather(env: RankEnv, tensor: Any) -> list[Any]:
    out = [env.torch.empty_like(tensor) for _ in range(env.world_size)]
    env.dist.all_gather(out, tensor)
    return out


def _diff_to_rank0(env: RankEnv, tensor: Any) -> list[float]:
    """Max |tensor_q - tensor_0| for every rank q (the same list on every rank)."""
    everyone = _gather(env, tensor)
    return [float((t - everyone[0]).abs().max().item()) for t in everyone]


def _float_buffers(module: Any) -> list[Any]:
    # num_batches_tracked is an integer counter; the float buffers are what forward uses.
    return [b for b in module.buffers() if b.is_floating_point()]


def _correctness_body(env: RankEnv) -> dict[str, Any]:
    torch, dist = env.torch, env.dist
    rank, world, device = env.rank, env.world_size, env.device
    inject: dict[str, set[int]] = env.extra["inject"]
    cuda = env.backend == "nccl"
    if cuda:
        # TF32 rounds matmuls to 10 mantissa bits: DDP (batch 4) and one process (batch 4n)
        # would differ by 1e-3 for reasons that have nothing to do with communication.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))

    # The reference: what one process trains, from the weights rank 0 builds.
    torch.manual_seed(SEED)
    reference = _model(torch).to(device)
    model = copy.deepcopy(reference)
    if rank != 0:
        # As if this rank had built its model before seeding: other weights and buffers.
        gen = torch.Generator().manual_seed(SEED + rank)
        with torch.no_grad():
            for t in itertools.chain(model.parameters(), _float_buffers(model)):
                t.add_((torch.rand(t.shape, generator=gen) - 0.5).to(device))

    torch.manual_seed(SEED + 1)
    if cuda:
        torch.cuda.manual_seed(SEED + 1)
    if rank in inject["rng"]:
        torch.rand(1)  # a rank that consumed randomness the others did not
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if cuda else None
    )
    if rank in inject["weights"]:
        with torch.no_grad():
            next(model.parameters()).add_(1e-2)  # weights that differ after the wrap

    out: dict[str, Any] = {
        "wrap_param_diff": _diff_to_rank0(env, _flat(torch, model.parameters(), device)),
        "wrap_buffer_diff": _diff_to_rank0(env, _flat(torch, _float_buffers(model), device)),
    }
    states = [torch.get_rng_state()]
    if cuda:
        states.append(torch.cuda.get_rng_state(device))
    rng = torch.cat([s.to(torch.float32) for s in states]).to(device)
    out["rng_equal"] = [d == 0.0 for d in _diff_to_rank0(env, rng)]

    # The sampler: this rank's shard of SAMPLES indices, one epoch in.
    from torch.utils.data.distributed import DistributedSampler

    sampler: Any = DistributedSampler(
        range(SAMPLES),  # type: ignore[arg-type]  # any Sized works: only len() is used
        num_replicas=world,
        rank=rank,
        shuffle=True,
        seed=SEED + (1 if rank in inject["sampler"] else 0),
    )
    sampler.set_epoch(1)
    mine = torch.tensor(list(sampler), dtype=torch.int64, device=device)
    shards = [s.cpu().tolist() for s in _gather(env, mine)]
    flat_idx = [i for shard in shards for i in shard]
    covered = set(flat_idx)
    out["sampler"] = {
        "samples": SAMPLES,
        "per_rank": len(shards[0]),
        "padding": len(flat_idx) - SAMPLES,
        "missing": sorted(set(range(SAMPLES)) - covered),
        # Indices on more than one rank beyond the padding DDP documents (drop_last=False pads
        # the permutation with its first few indices so every rank gets as many).
        "extra_overlap": len(flat_idx) - len(covered) - (len(flat_idx) - SAMPLES),
    }

    # Training: DDP on each rank's shard vs one process on the union, same steps.
    gen = torch.Generator().manual_seed(SEED + 2)
    x = torch.randn(SAMPLES, FEATURES, generator=gen).to(device)
    y = torch.randn(SAMPLES, 1, generator=gen).to(device)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    loss_fn = torch.nn.functional.mse_loss
    steps = min(STEPS, len(shards[0]) // BATCH_PER_RANK)
    for step in range(steps):
        window = slice(step * BATCH_PER_RANK, (step + 1) * BATCH_PER_RANK)
        local = torch.tensor(shards[rank][window], device=device)
        union = torch.tensor([i for shard in shards for i in shard[window]], device=device)
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x[local]), y[local]).backward()
        opt.step()
        ref_opt.zero_grad(set_to_none=True)
        loss_fn(reference(x[union]), y[union]).backward()
        ref_opt.step()
    mine_final = _flat(torch, model.parameters(), device)
    ref_diff = (mine_final - _flat(torch, reference.parameters(), device)).abs().max()
    out["steps"] = steps
    out["reference_diff"] = [float(t.item()) for t in _gather(env, ref_diff.reshape(1))]
    out["final_param_diff"] = _diff_to_rank0(env, mine_final)
    dist.barrier()
    return out


def _ranks_over(values: list[float], tol: float) -> list[int]:
    return [q for q, v in enumerate(values) if not (math.isfinite(v) and v <= tol)]


def judge(values: dict[str, Any], world: int, backend: str) -> Outcome:
    """The verdict from rank 0's gathered numbers (pure: tests feed it numbers directly)."""
    problems: list[str] = []
    fixes: list[str] = []
    for key, what in (("wrap_param_diff", "parameters"), ("wrap_buffer_diff", "buffers")):
        bad = _ranks_over(values[key], TOLERANCE)
        if bad:
            worst = max(values[key][q] for q in bad)
            problems.append(
                f"{what} of rank(s) {', '.join(map(str, bad))} differ from rank 0's after the "
                f"DDP wrap (max |Δ| {worst:.2e})"
            )
            fixes.append(
                "DDP's constructor broadcasts rank 0's parameters and buffers: a rank that still "
                "differs means broken collectives (see gpu.p2p, dist.handshake; try "
                "NCCL_P2P_DISABLE=1) or weights changed after wrapping (load checkpoints before "
                "DistributedDataParallel(...))"
            )
    rng_bad = [q for q, same in enumerate(values["rng_equal"]) if not same]
    if rng_bad:
        problems.append(
            f"RNG state of rank(s) {', '.join(map(str, rng_bad))} differs from rank 0's after "
            "seeding alike and wrapping"
        )
        fixes.append("seed every rank the same way before building the model and before the wrap")
    sampler = values["sampler"]
    if sampler["missing"] or sampler["extra_overlap"]:
        parts = []
        if sampler["extra_overlap"]:
            parts.append(f"{sampler['extra_overlap']} index(es) on several ranks")
        if sampler["missing"]:
            parts.append(f"{len(sampler['missing'])} index(es) on no rank")
        problems.append(
            f"DistributedSampler shards of {sampler['samples']} samples are not a partition: "
            + ", ".join(parts)
        )
        fixes.append(
            "every rank must build DistributedSampler with the same seed and dataset length "
            "(and call set_epoch(epoch) on all of them)"
        )
    ref_bad = _ranks_over(values["reference_diff"], TOLERANCE)
    if ref_bad:
        worst = max(values["reference_diff"][q] for q in ref_bad)
        problems.append(
            f"after {values['steps']} SGD steps rank(s) {', '.join(map(str, ref_bad))} differ from "
            f"single-process training on the same data (max |Δ| {worst:.2e}, tolerance "
            f"{TOLERANCE:g})"
        )
    final_bad = _ranks_over(values["final_param_diff"], TOLERANCE)
    if final_bad:
        problems.append(
            f"ranks end training with different parameters (rank(s) "
            f"{', '.join(map(str, final_bad))} vs rank 0)"
        )
    if (ref_bad or final_bad) and not fixes:
        fixes.append(
            "gradients are not averaged correctly: check gpu.p2p and dist.busbw, rerun with "
            "NCCL_DEBUG=INFO; try NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1 to isolate the transport"
        )
    if problems:
        return Outcome(
            Status.FAIL,
            f"{world} ranks ({backend}): " + "; ".join(problems),
            values,
            "; ".join(dict.fromkeys(fixes)),
            ("https://docs.pytorch.org/docs/stable/notes/ddp.html",),
        )
    return ok(
        f"{world} ranks ({backend}): {values['steps']} DDP steps = single-process steps "
        f"(max |Δ| {max(values['reference_diff']):.1e}); parameters, buffers and RNG alike "
        f"after the wrap; DistributedSampler shards of {sampler['samples']} samples disjoint "
        f"and complete ({sampler['padding']} padded)",
        **values,
    )


def probe_correctness(ctx: ProbeContext) -> Outcome:
    plan = plan_ranks(ctx)
    if isinstance(plan, Outcome):
        return plan
    _, backend, world = plan
    if world < 2:
        return skip("one rank: nothing for DDP to keep in sync")
    inject = {kind: injected(ctx.env, kind) for kind in ("weights", "rng", "sampler")}

    def body(env: RankEnv) -> dict[str, Any]:
        env.extra["inject"] = inject
        return _correctness_body(env)

    # DistributedDataParallel.__init__ imports torch._dynamo (~800 modules, seconds): once here,
    # inherited by the forked ranks, instead of once per rank in parallel.
    import torch._dynamo  # noqa: F401

    res = run_ranks(ctx, world, backend, body, max(ctx.options.handshake_timeout_s, 60.0))
    errors = res.errors()
    if errors or res.unfinished or 0 not in res.results:
        return Outcome(
            Status.FAIL,
            "DDP correctness run failed: "
            + next(iter(errors.values()), f"rank(s) {list(res.unfinished)} did not finish")[:300],
            {"errors": {str(k): v for k, v in errors.items()}, "unfinished": list(res.unfinished)},
            "see dist.handshake",
        )
    values = {k: v for k, v in res.results[0].items() if k not in ("ok", "init_s")}
    values.update(backend=backend, world_size=world, tolerance=TOLERANCE)
    return judge(values, world, backend)


CORRECTNESS_PROBES: tuple[Probe, ...] = (
    Probe(
        "dist.correctness",
        "DDP trains like one process",
        120.0,
        probe_correctness,
        needs_torch=True,
        quick=False,
        references=("https://docs.pytorch.org/docs/stable/notes/ddp.html",),
    ),
)
