"""Data-parallel RL steps: several processes, each with its share of every batch (torch.distributed).

A run launched by ``torchrun --nproc_per_node N`` or ``accelerate launch`` (which starts the
processes through torchrun, or through mpirun for ``distributed_type: MULTI_CPU`` with
``--mpirun_hostfile``) finds its place in the environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` or MPI's equivalents, ``MASTER_ADDR``/``MASTER_PORT``); :func:`process_group` joins
the processes (gloo on CPUs, nccl on GPUs). The RL step itself (:func:`llmrl.rl.step.rl_step`) is not changed:
a data-parallel run plugs these wrappers into its seams.

**Shares.** A run's batch of ``n_prompts`` prompt groups is split into ``S`` shares of whole groups
(:class:`Shares`), and a process of an ``N``-process run holds ``S / N`` of them. What a share
gets is fixed by the run's settings alone, never by how many processes run it:

* collect: every process draws the whole batch of prompts from the run's one random stream (the
  same stream, so the same prompts, in every process) and keeps its shares (:class:`ShareTask`);
  each share is sampled with a random stream of its own, seeded from one draw of the run's stream
  (:class:`ShareSampler`);
* advantages: the rewards of all shares are gathered, so a batch-wide normalisation sees the
  whole batch (:func:`gathered_advantages`);
* update: one permutation of the whole batch per epoch (the student's ``iter_minibatches`` draws it
  from the run's stream), each minibatch takes ``minibatch_size / S`` rows of every share
  (:func:`share_minibatches`), and the loss of a minibatch is the mean of its shares' losses
  (:func:`share_loss` within a process; across processes, :class:`DataParallelOptimizer` averages
  the gradients before clipping, so the clip sees the gradient of the whole minibatch);
* metrics: each process's record holds its shares' statistics; :func:`reduce_records` combines
  them (means of equal-sized shares, the batch's standard deviation, token-weighted entropy), per
  minibatch for the loss's statistics (:class:`ReducingHooks`).

So a 1-process run with ``S = 2`` draws the same prompts and samples, takes the same steps and
logs the same numbers as a 2-process run (to float rounding: the gradient of a minibatch is a sum
of two half-batch gradients in a different order), and a run can be resumed on another number of
processes that divides ``S``. ``S = 1`` is the ordinary 1-process run, unchanged.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from typing import Callable, Sequence

import torch

from .losses import LossBatch, clip_stats
from ..lm.sampling import Rollout
from .run import Hooks

# ----------------------------------------------------------------------------- the process group


class Group:
    """This process's place in a data-parallel run (rank, world size) and the collectives it uses.

    With ``world_size == 1`` every collective returns its input: code written for N processes runs
    unchanged in one."""

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0,
                 device: torch.device | str = "cpu"):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.rank, self.world_size, self.local_rank = int(rank), int(world_size), int(local_rank)
        self.device = torch.device(device)  # where collectives run (cpu for gloo, the GPU for nccl)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def __repr__(self) -> str:
        return f"Group(rank={self.rank}, world_size={self.world_size}, device={self.device})"

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the processes, in place; returns it."""
        if self.active:
            import torch.distributed as dist
            if tensor.device != self.device:
                moved = tensor.to(self.device)
                dist.all_reduce(moved)
                tensor.copy_(moved)
            else:
                dist.all_reduce(tensor)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` (the same shape everywhere), concatenated along dim 0 in rank order."""
        if not self.active:
            return tensor
        import torch.distributed as dist
        t = tensor.detach().to(self.device).contiguous()
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t)
        return torch.cat(parts, 0).to(tensor.device)

    def all_gather_objects(self, obj) -> list:
        """Every process's picklable ``obj``, in rank order."""
        if not self.active:
            return [obj]
        import torch.distributed as dist
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj, src: int = 0):
        """``obj`` of process ``src``, in every process."""
        if not self.active:
            return obj
        import torch.distributed as dist
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def broadcast_(self, tensors: Sequence[torch.Tensor], src: int = 0) -> None:
        """Overwrite ``tensors`` with process ``src``'s values (in place)."""
        if not self.active:
            return
        import torch.distributed as dist
        with torch.no_grad():
            for t in tensors:
                moved = t.data.to(self.device)
                dist.broadcast(moved, src=src)
                if moved is not t.data:
                    t.data.copy_(moved)

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist
            dist.barrier()


SINGLE = Group()


# where launchers put a process's place: torchrun / accelerate launch, then MPI (accelerate launch with
# distributed_type MULTI_CPU and --mpirun_hostfile runs mpirun: Open MPI, Intel MPI / MPICH, MVAPICH)
LAUNCH_ENV = {"world_size": ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_SIZE"),
              "rank": ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_RANK"),
              "local_rank": ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK")}


def launch_env() -> dict:
    """This process's ``world_size``, ``rank`` and ``local_rank`` as its launcher set them (each
    from the first variable of :data:`LAUNCH_ENV` that is set; 1, 0, 0 without a launcher)."""
    out = {}
    for key, names in LAUNCH_ENV.items():
        name = next((n for n in names if os.environ.get(n, "") != ""), None)
        try:
            out[key] = int(os.environ[name]) if name else (1 if key == "world_size" else 0)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {os.environ[name]!r}") from None
    out["world_size"] = max(1, out["world_size"])
    return out


def process_group(backend: str | None = None) -> Group:
    """This process's :class:`Group`: the single-process group, or, under ``torchrun``,
    ``accelerate launch`` or ``mpirun`` (a world size > 1 in the environment, :func:`launch_env`),
    the processes joined through torch.distributed (``backend``: gloo on the CPU, nccl when CUDA is
    available; the rendezvous at ``MASTER_ADDR``:``MASTER_PORT``)."""
    import torch.distributed as dist

    env = launch_env()
    world = env["world_size"]
    if world == 1 and not (dist.is_available() and dist.is_initialized()):
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_PORT" in os.environ:
            # accelerate's simple launcher sets the rendezvous only when asked for several processes
            raise RuntimeError("accelerate launch asked for several CPU processes but started one: with "
                               "distributed_type MULTI_CPU (or --cpu) accelerate starts several only through "
                               "mpirun (--mpirun_hostfile FILE, configs/accelerate/multi_cpu.yaml); without MPI use "
                               "accelerate launch --config_file configs/accelerate/ddp.yaml or torchrun "
                               "(docs/hw4_gpu.md)")
        return SINGLE
    if not dist.is_available():
        raise RuntimeError("the launcher started several processes but this torch build has no torch.distributed")
    local_rank = env["local_rank"]
    if not dist.is_initialized():
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if not any(os.environ.get(n, "") != "" for n in LAUNCH_ENV["rank"]):
            missing.insert(0, "RANK")
        if missing:
            raise RuntimeError(f"a world size of {world} is set but {missing} are not: start the processes with "
                               f"torchrun --nproc_per_node {world} or accelerate launch (docs/hw4_gpu.md)")
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        _import_world_capturing_modules()
        dist.init_process_group(backend, rank=env["rank"], world_size=world)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    return Group(dist.get_rank(), dist.get_world_size(), local_rank, device)


def _import_world_capturing_modules() -> None:
    """Import, before the process group exists, the torch modules that bind ``group.WORLD`` into
    default arguments when they are imported: ``torch.distributed.nn.functional`` (``def
    all_reduce(tensor, op=..., group=group.WORLD)`` and 9 more). torch imports it lazily (the first
    ``torch.optim`` optimizer imports torch._dynamo, which imports FSDP, which imports it); imported
    after ``init_process_group`` its defaults hold the live group, so :func:`shutdown`'s
    ``destroy_process_group`` cannot free it and the gloo backend's threads run on into interpreter
    exit. Imported first, the defaults are None (the default group at call time)."""
    import torch.distributed.nn  # noqa: F401


def _drop_references(pg) -> None:
    """Replace ``pg`` by None in the default arguments of torch.distributed's functions (a module
    imported while ``pg`` was the default group, see :func:`_import_world_capturing_modules`)."""
    import sys
    import types
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch.distributed" or name.startswith("torch.distributed.")):
            continue
        for f in list(vars(module).values()):
            if type(f) is not types.FunctionType:  # (isinstance would warn on reduce_op)
                continue
            if f.__defaults__ and any(d is pg for d in f.__defaults__):
                f.__defaults__ = tuple(None if d is pg else d for d in f.__defaults__)
            if f.__kwdefaults__ and any(d is pg for d in f.__kwdefaults__.values()):
                f.__kwdefaults__ = {k: None if d is pg else d for k, d in f.__kwdefaults__.items()}


def backend_threads() -> list[str]:
    """The names of this process's threads that belong to a torch.distributed backend (gloo's
    ``pt_gloo_runloop`` workers and ``gloo_tcp_loop``, nccl's ``pt_nccl_*`` watchdogs); Linux only
    (``[]`` elsewhere). Empty after :func:`shutdown` when the group was really freed."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    names = []
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if "gloo" in name or "nccl" in name:
            names.append(name)
    return sorted(names)


def shutdown(wait: bool = True) -> None:
    """Leave the process group at the end of a launched command; with ``wait``, after every process
    got there (none leaves while another still talks to it). After an error, ``wait=False``: the
    other processes may never arrive.

    The group is then freed here, while every process is still alive: its backend's threads are
    joined and its connections closed now, not during interpreter exit. A group that outlived
    ``destroy_process_group`` (something still referenced it) had its threads torn down at exit,
    racing the other process's exit, and the process sometimes died there with SIGABRT ("terminate
    called without an active exception") after the run had finished. A group still alive after
    this is reported with a warning."""
    import gc
    import warnings
    import weakref

    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return
    pg = dist.group.WORLD
    try:
        alive = weakref.ref(pg)
    except TypeError:  # a build whose ProcessGroup takes no weak references
        alive = None
    if wait:
        dist.barrier()
    dist.destroy_process_group()
    _drop_references(pg)
    del pg
    if alive is not None and alive() is not None:
        gc.collect()
        if alive() is not None:
            warnings.warn("the process group is still referenced after destroy_process_group: its backend's "
                          "threads stay until the interpreter exits", RuntimeWarning, stacklevel=2)


# ----------------------------------------------------------------------------- the optimizer seam

def average_gradients(params: Sequence[torch.nn.Parameter], group: Group) -> None:
    """Replace each parameter's gradient by its mean over the processes (one all-reduce per dtype
    and device, half-precision gradients summed in float32). A parameter without a gradient takes
    part with zeros (so its optimizer state moves as the other processes' does)."""
    if not group.active:
        return
    buckets: dict = {}
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for (_, dtype), grads in buckets.items():
        flat = torch.cat([g.reshape(-1) for g in grads])
        if dtype in (torch.float16, torch.bfloat16):  # sum half-precision gradients in float32
            flat = flat.float()
        group.all_reduce_(flat)
        flat.div_(group.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


class DataParallelOptimizer:
    """The update stage's optimizer (:class:`llmrl.rl.step.PolicyOptimizer`, or anything with its
    ``zero_grad`` / ``backward`` / ``step`` / ``state_dict`` protocol) in a data-parallel run:
    ``step`` averages the gradients over the processes, then lets the wrapped optimizer clip and
    step. Clipping therefore sees the gradient of the whole minibatch, and every process takes the
    same step. Gradient accumulation needs nothing more: the all-reduce happens once per step."""

    def __init__(self, inner, group: Group):
        self.inner, self.group = inner, group
        self.params = list(inner.params)

    def zero_grad(self) -> None:
        self.inner.zero_grad()

    def backward(self, loss: torch.Tensor) -> None:
        self.inner.backward(loss)

    def step(self, max_grad_norm: float | None):
        average_gradients(self.params, self.group)
        return self.inner.step(max_grad_norm)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)


# ----------------------------------------------------------------------------- shares of a batch

@dataclass(frozen=True)
class Shares:
    """``count`` shares of every batch, ``count / group.world_size`` of them in this process
    (shares ``local``, consecutive)."""

    count: int
    group: Group = SINGLE

    def __post_init__(self):
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"shares must be a positive int, got {self.count!r}")
        if self.count % self.group.world_size:
            raise ValueError(f"shares={self.count} cannot be split over {self.group.world_size} processes: "
                             f"use a multiple of {self.group.world_size}")

    @property
    def per_process(self) -> int:
        return self.count // self.group.world_size

    @property
    def local(self) -> range:
        k = self.per_process
        return range(self.group.rank * k, self.group.rank * k + k)


class ShareTask:
    """A task whose ``sample(n, generator)`` draws the whole batch (``n * world_size`` problems,
    the draw a 1-process run makes) and returns this process's shares of it, in order."""

    def __init__(self, task, shares: Shares):
        self.task, self.shares = task, shares

    def __getattr__(self, name):  # everything else is the task's
        if name in ("task", "shares"):
            raise AttributeError(name)
        return getattr(self.task, name)

    def sample(self, n: int, generator: torch.Generator | None = None):
        w = self.shares.group.world_size
        problems = self.task.sample(n * w, generator)
        if w == 1:
            return problems
        try:
            rank = self.shares.group.rank
            return problems[rank * n:(rank + 1) * n]
        except TypeError:
            raise TypeError(f"a data-parallel run needs a task whose sample() returns a list, got "
                            f"{type(problems).__name__}") from None


def concat_rollouts(parts: Sequence[Rollout], pad_token_id: int) -> Rollout:
    """One rollout from several with the same group size: prompts left-padded to the longest
    prompt width, completions right-padded to the longest completion (padding is masked)."""
    if len(parts) == 1:
        return parts[0]
    G, temp = parts[0].group_size, parts[0].temperature
    if any(p.group_size != G for p in parts):
        raise ValueError("rollouts with different group sizes cannot be concatenated")
    P = max(p.prompt_len for p in parts)
    R = max(p.input_ids.shape[1] - p.prompt_len for p in parts)
    ids, att, cmask, lps = [], [], [], []
    keep_lp = all(p.sample_logprobs is not None for p in parts)
    for p in parts:
        b, dev = p.input_ids.shape[0], p.input_ids.device
        lead, r = P - p.prompt_len, p.input_ids.shape[1] - p.prompt_len
        tail = R - r

        def pad(x, value, lead=lead, tail=tail, dev=dev, b=b):
            return torch.cat([torch.full((b, lead), value, dtype=x.dtype, device=dev), x,
                              torch.full((b, tail), value, dtype=x.dtype, device=dev)], 1)
        ids.append(pad(p.input_ids, pad_token_id))
        att.append(pad(p.attention_mask, 0))
        cm = p.completion_mask
        cmask.append(torch.cat([cm, torch.zeros((b, tail), dtype=cm.dtype, device=cm.device)], 1))
        if keep_lp:
            lp = p.sample_logprobs
            lps.append(torch.cat([lp, torch.zeros((b, R - lp.shape[1]), dtype=lp.dtype, device=lp.device)], 1))
    prompts = None if any(p.prompts is None for p in parts) else [x for p in parts for x in p.prompts]
    return Rollout(input_ids=torch.cat(ids), attention_mask=torch.cat(att), prompt_len=P,
                   completions=[c for p in parts for c in p.completions], group_size=G, prompts=prompts,
                   completion_mask=torch.cat(cmask), sample_logprobs=torch.cat(lps) if keep_lp else None,
                   temperature=temp)


class ShareSampler:
    """A policy backend whose ``generate`` samples each of this process's shares with a random
    stream of its own: one draw from the run's stream (the same in every process) seeds the
    step's share streams. Everything else is the backend's."""

    def __init__(self, backend, shares: Shares):
        self.backend, self.shares = backend, shares

    def __getattr__(self, name):
        if name in ("backend", "shares"):
            raise AttributeError(name)
        return getattr(self.backend, name)

    @staticmethod
    def share_generators(generator: torch.Generator | None, count: int) -> list[torch.Generator]:
        """The ``count`` share streams of one step (one draw from ``generator``)."""
        base = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        seeds = torch.randint(0, 2**62, (count,), generator=torch.Generator().manual_seed(base)).tolist()
        return [torch.Generator().manual_seed(int(s)) for s in seeds]

    def generate(self, prompts, group_size, max_new_tokens=None, temperature=1.0, top_p=1.0, generator=None):
        streams = self.share_generators(generator, self.shares.count)
        k = self.shares.per_process
        if len(prompts) % k:
            raise ValueError(f"{len(prompts)} prompts cannot be split into {k} equal shares")
        n = len(prompts) // k
        parts = [self.backend.generate(list(prompts[j * n:(j + 1) * n]), group_size, max_new_tokens, temperature,
                                       top_p, streams[s]) for j, s in enumerate(self.shares.local)]
        return concat_rollouts(parts, self.backend.pad_token_id)


def gathered_advantages(advantage_fn: Callable, group: Group) -> Callable:
    """advantage_fn(rewards [B], G) applied to the rewards of the whole batch (gathered from every
    process); each process keeps its rows."""
    if not group.active:
        return advantage_fn

    def advantages(rewards, group_size):
        whole = group.all_gather(torch.as_tensor(rewards))
        adv = torch.as_tensor(advantage_fn(whole, group_size)).reshape(-1)
        if adv.numel() != whole.numel():
            return adv  # the step's own shape check names the problem
        n = rewards.shape[0]
        return adv[group.rank * n:(group.rank + 1) * n]
    return advantages


def share_minibatches(iter_minibatches: Callable, shares: Shares, minibatch_size: int) -> Callable:
    """The update stage's minibatch iterator ``(fields, generator) -> [dict]`` of a shared batch.

    ``iter_minibatches(fields, size, generator)`` (the student's, or :func:`llmrl.rl.step.minibatches`)
    draws one permutation of the whole batch's rows per epoch (the same draw a 1-process run makes);
    each share takes its rows in that order, and minibatch i holds rows i * m .. (i + 1) * m - 1 of
    every share, m = ``minibatch_size / shares`` (a whole share when the minibatch is the batch)."""

    def minibatches(fields: dict, generator: torch.Generator | None = None) -> list[dict]:
        n_local = next(iter(fields.values())).shape[0]
        k, S = shares.per_process, shares.count
        if n_local % k:
            raise ValueError(f"{n_local} rows cannot be split into {k} equal shares")
        b = n_local // k
        B = b * S
        m = b if minibatch_size >= B else minibatch_size // S
        if m < 1:
            raise ValueError(f"minibatch_size={minibatch_size} is smaller than shares={S}")
        perm = torch.cat([mb["row"].reshape(-1) for mb in iter_minibatches({"row": torch.arange(B)}, B, generator)])
        if perm.numel() != B or not torch.equal(perm.sort().values, torch.arange(B)):
            raise ValueError("iter_minibatches must yield every row exactly once")
        orders = [perm[(perm >= s * b) & (perm < (s + 1) * b)] - s * b + j * b for j, s in enumerate(shares.local)]
        out = []
        for start in range(0, b, m):
            rows = torch.cat([o[start:start + m] for o in orders])
            out.append({key: v[rows.to(v.device)] for key, v in fields.items()})
        return out
    return minibatches


_ROW_FIELDS = tuple(f.name for f in fields(LossBatch) if f.name not in ("eps_low", "eps_high", "rare_prob"))


def _nanmean(values) -> float:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else float("nan")


def share_loss(loss_fn: Callable, per_process: int, clip_statistics: bool) -> Callable:
    """policy_loss_fn(LossBatch) of a minibatch holding ``per_process`` shares (equal row blocks, in
    order): the mean of ``loss_fn`` over the shares, and each statistic's mean over them. With
    ``clip_statistics`` (the clipped policy-gradient loss) each share also reports the library's
    clip statistics, as the update stage would for the whole minibatch."""
    if per_process == 1:
        return loss_fn

    def loss(b: LossBatch):
        rows = b.logprobs.shape[0]
        if rows % per_process:
            raise ValueError(f"a minibatch of {rows} rows cannot hold {per_process} equal shares")
        size = rows // per_process
        values, stats = [], []
        for j in range(per_process):
            sl = slice(j * size, (j + 1) * size)
            part = replace(b, **{f: getattr(b, f)[sl] for f in _ROW_FIELDS if getattr(b, f) is not None})
            res = loss_fn(part)
            value, st = res if isinstance(res, tuple) else (res, {})
            st = dict(st or {})
            if clip_statistics and "clip_fraction" not in st:
                lp = part.logprobs.detach()
                st.update(clip_stats((lp - part.old_logprobs).exp(), part.advantages[:, None].expand_as(lp),
                                     part.mask, part.old_logprobs, part.eps_low, part.eps_high, part.rare_prob))
            values.append(value)
            stats.append(st)
        keys = list(dict.fromkeys(k for st in stats for k in st))
        return torch.stack(values).mean(), {k: _nanmean(st.get(k) for st in stats) for k in keys}
    return loss


# ----------------------------------------------------------------------------- metrics

# how a record's metric combines over processes holding equal-sized shares (the default: the mean)
FIRST = ("step", "grad_norm_mean")      # the same in every process (the step; the global gradient's norm)
LONGEST = ("step_seconds",)             # the slowest process


def reduce_records(records: Sequence[dict]) -> dict:
    """One record from the records of processes holding equal-sized shares of a batch.

    Means over the batch (``_mean``, shares, accuracies, ``_sum`` means, the loss, and the loss's
    statistics) are the mean over the processes; ``reward_std`` is the whole batch's (from each
    share's mean and standard deviation); ``entropy_token_mean_nats`` is weighted by each process's
    completion tokens; ``grad_norm_mean`` (the norm of the averaged gradient) and the evaluation
    (``eval_*``, already reduced) are the first process's; ``step_seconds`` the slowest one's.
    A metric that is None in some processes is the mean over the others."""
    records = list(records)
    if len(records) == 1:
        return dict(records[0])
    first = records[0]
    out = {}
    for key in dict.fromkeys(k for r in records for k in r):
        vals = [r.get(key) for r in records]
        if key in FIRST or key.startswith("eval_") or not all(v is None or isinstance(v, (int, float)) for v in vals):
            out[key] = first.get(key)
        elif key in LONGEST:
            out[key] = max(v for v in vals if v is not None)
        elif key == "reward_std" and all(r.get("reward_mean") is not None and v is not None
                                         for r, v in zip(records, vals)):
            means = [r["reward_mean"] for r in records]
            mean = sum(means) / len(means)
            second = sum(s * s + m * m for s, m in zip(vals, means)) / len(means)
            out[key] = math.sqrt(max(second - mean * mean, 0.0))
        elif key == "entropy_token_mean_nats" and all(r.get("completion_tokens_mean") and v is not None
                                                      for r, v in zip(records, vals)):
            w = [r["completion_tokens_mean"] for r in records]
            out[key] = sum(v * x for v, x in zip(vals, w)) / sum(w)
        else:
            m = _nanmean(vals)
            out[key] = None if math.isnan(m) else m
    return out


class ReducingHooks:
    """The :class:`llmrl.rl.run.Hooks` of a data-parallel run, around an experiment's own
    (``inner``): ``after_minibatch`` keeps each minibatch's statistics; ``after_step`` gathers every
    process's record and statistics (one collective per step), and replaces the record, in place,
    by its reduction (:func:`reduce_records`), each loss statistic being the mean over minibatches
    of its mean over the processes, as a 1-process run averages its shares' statistics per
    minibatch. The run manager then logs the reduced record."""

    def __init__(self, group: Group, inner=None):
        self.group, self.inner = group, inner if inner is not None else Hooks()
        self._stats: list[dict] = []

    def hooks(self):
        return Hooks(after_score=self.inner.after_score, after_minibatch=self.after_minibatch,
                     after_step=self.after_step)

    def after_minibatch(self, epoch, stats):
        extra = (self.inner.after_minibatch(epoch, stats) or {}) if self.inner.after_minibatch is not None else {}
        self._stats.append({k: float("nan") if v is None else float(v) for k, v in {**stats, **extra}.items()})
        return extra

    def after_step(self, record, batch):
        if self.inner.after_step is not None:
            self.inner.after_step(record, batch)
        mine, self._stats = self._stats, []
        everyone = self.group.all_gather_objects((dict(record), mine))
        reduced = reduce_records([r for r, _ in everyone])
        lists = [m for _, m in everyone]
        if len({len(m) for m in lists}) == 1:  # the same minibatches everywhere (equal shares)
            for key in dict.fromkeys(k for m in lists for mb in m for k in mb):
                per_minibatch = [_nanmean(m[i].get(key) for m in lists) for i in range(len(lists[0]))]
                value = _nanmean(per_minibatch)
                reduced[key] = None if math.isnan(value) else value
        record.clear()
        record.update(reduced)
