"""hw4's trainer: GR-REINFORCE and GRPO on any PolicyBackend and any Task, as a run manager around
the library's one RL step (:func:`llmrl.rl.step.rl_step`).

The step is the labs' step; hw4 plugs the student's functions (``impl``) into its pieces:

* score: per-token log-probs of the sampled tokens under the policy that sampled them ("old") and
  under the frozen reference (``impl.compute_per_token_logprobs``, [B, T-1], ``minibatch_size``
  rows at a time) and the completion mask (``impl.build_completion_mask``);
* advantages: ``impl.compute_group_advantages`` (per group, (r - mean) / (std + 1e-6)), then
  ``impl.maybe_normalize_advantages`` (optional batch normalisation, clip to +-adv_clip);
* update, minibatches from ``impl.iter_minibatches``, loss from the student:
  GR-REINFORCE, one pass:  loss = -mean_i A_i * (1/|y_i|) sum_t log pi(y_it)  + beta KL.
  GRPO, ``ppo_epochs`` passes over the same rollouts, per-token ratio rho = pi / pi_old:
  loss = -mean_i (1/|y_i|) sum_t min(rho_it A_i, clip(rho_it, 1-eps, 1+eps) A_i)  + beta KL,
  KL = masked mean of k3 = e^d - d - 1, d = log pi_ref - log pi (``impl.approx_kl_from_logprobs``).
  The optimizer steps every ``grad_accum_steps`` minibatches (gradient clipped to ``max_grad_norm``).

Around the step, this module manages the run: one JSON line of metrics per step in
``run_dir/metrics.jsonl`` (names: :data:`llmrl.metrics.METRICS`); a group of sampled generations
with rewards and advantages in ``run_dir/generations.jsonl``; greedy eval on the task's fixed eval
set at step 0 and every ``eval_every`` steps; a checkpoint every ``ckpt_every`` steps, from which
a rerun of the same command resumes (the log is cut back to the checkpoint, so no step appears
twice and none is lost); WandB (offline by default) when ``wandb=True``.

Started by ``torchrun`` or ``accelerate launch`` the run is data-parallel: each process samples
and trains on its shares of every batch, gradients are averaged before clipping, the first process
writes the files (:mod:`llmrl.rl.data_parallel`, docs/hw4_gpu.md). ``shares`` fixes the numbers, so a
1-process run with ``shares=2`` reproduces a 2-process run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..backends.protocol import PolicyBackend
from ..backends.registry import make_backend
from ..rl import data_parallel as dp
from ..rl.config import RLConfig
from ..rl.data_parallel import SINGLE, Group
from ..rl.run import History, RLRun
from ..rl.step import PolicyOptimizer
from ..rl.train import train_loop
from ..utils import check_fields, set_threads
from .impl import Impl
from .tasks import Task, make_task, score

ALGOS = ("grpo", "reinforce")


@dataclass(frozen=True)
class HW4Config:
    task: str = "format_copy"
    """the task by name: 'format_copy', 'math_toy', 'math_hard' or a registered one"""
    algo: str = "grpo"
    """'grpo' (clipped, several epochs, KL penalty) or 'reinforce' (GR-REINFORCE: one plain pass)"""
    steps: int = 50
    """RL steps (rollout batches); the evaluation also runs at step 0"""
    n_prompts: int = 8
    """prompts per step"""
    group_size: int = 6
    """completions per prompt"""
    lr: float = 5e-5
    """AdamW's learning rate"""
    temperature: float = 0.8
    """sampling temperature of the rollouts"""
    top_p: float = 0.95
    """nucleus sampling's probability mass (1: all tokens)"""
    clip_eps: float = 0.2
    """GRPO's ratio clip: [1 - clip_eps, 1 + clip_eps]"""
    kl_coef: float = 0.05
    """weight of the KL penalty to the reference policy (GRPO)"""
    max_grad_norm: float = 0.5
    """clip the gradient's global norm to this before each optimizer step"""
    adv_clip: float = 5.0
    """advantages are clipped to +-adv_clip after the optional normalisation"""
    normalize_advantages: bool = False
    """normalise the advantages over the whole batch (your maybe_normalize_advantages)"""
    ppo_epochs: int = 2
    """GRPO's passes over each batch; GR-REINFORCE always makes one"""
    minibatch_size: int = 24
    """rows per minibatch of the update"""
    grad_accum_steps: int = 2
    """minibatches accumulated before one optimizer step"""
    max_new_tokens: int | None = None
    """completion cap (None: the task's)"""
    eval_every: int = 5
    """evaluate every N steps (and at step 0 and the last step)"""
    eval_limit: int | None = None
    """evaluate on the first N eval problems only (None: all)"""
    gen_every: int = 5
    """log one group of generations every N steps"""
    ckpt_every: int = 10
    """save the policy and the trainer state every N steps (a run resumes from the last)"""
    seed: int = 0
    """seeds the prompts, the samples and the minibatch order"""
    betas: tuple = (0.9, 0.95)
    """AdamW's (beta1, beta2)"""
    weight_decay: float = 0.0
    """AdamW's weight decay"""
    shares: int = 1
    """the batch in equal shares of whole prompt groups (data parallel: docs/hw4_gpu.md)"""
    backend: str = "char"
    """policy backend: 'char' (the character TinyLM) or 'hf' (a Hugging Face model with LoRA)"""
    backend_kwargs: dict = field(default_factory=dict)
    """keyword arguments of the backend (e.g. model, device, dtype)"""
    task_kwargs: dict = field(default_factory=dict)
    """keyword arguments of the task"""
    wandb: bool = False
    """also log to Weights & Biases (needs wandb installed)"""
    wandb_mode: str = "offline"
    """Weights & Biases mode: 'offline', 'online' or 'disabled'"""
    wandb_project: str = "llmrl-hw4"
    """Weights & Biases project name"""

    def __post_init__(self):
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        check_fields(self, ints={"steps": 1, "n_prompts": 1, "group_size": 1, "ppo_epochs": 1, "minibatch_size": 1,
                                 "grad_accum_steps": 1, "eval_every": 1, "gen_every": 1, "ckpt_every": 1, "seed": 0,
                                 "max_new_tokens": 1, "eval_limit": 1, "shares": 1},
                     floats={"lr": 0.0, "temperature": 0.0, "clip_eps": 0.0, "kl_coef": 0.0, "max_grad_norm": 0.0,
                             "adv_clip": 0.0, "weight_decay": 0.0})
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.wandb_mode not in ("offline", "online", "disabled"):
            raise ValueError(f"wandb_mode must be 'offline', 'online' or 'disabled', got {self.wandb_mode!r}")
        if self.n_prompts % self.shares:
            raise ValueError(f"n_prompts={self.n_prompts} must be a multiple of shares={self.shares} "
                             f"(each share holds whole prompt groups)")
        if self.minibatch_size < self.n_prompts * self.group_size and self.minibatch_size % self.shares:
            raise ValueError(f"minibatch_size={self.minibatch_size} must be a multiple of shares={self.shares} "
                             f"(a minibatch takes minibatch_size / shares rows of every share)")

    @property
    def epochs(self) -> int:
        return self.ppo_epochs if self.algo == "grpo" else 1

    def to_dict(self) -> dict:
        return asdict(self)

    def key(self) -> str:
        """Hash of everything that determines the run's numbers (not the logging options)."""
        d = self.to_dict()
        for k in ("steps", "eval_every", "gen_every", "ckpt_every", "wandb", "wandb_mode", "wandb_project"):
            d.pop(k)
        if d["shares"] == 1:  # the 1-process layout: keys of runs from before shares existed stay valid
            d.pop("shares")
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# CPU-sized defaults of the four required runs. The published ones (a 1.5B model with LoRA on an H100):
# 8 x 6 (format_copy) / 8 x 8 (math) rollouts, lr 3e-5, 51 / 201 / 501 steps. The character model
# trains every weight, takes lr 5e-5 for both tasks, and needs far fewer steps: format_copy's
# reward climbs to the maximum 1.3 within about 25 steps, and 30 math steps separate GRPO from GR-REINFORCE (both runs
# share batch, minibatch and learning rate; GRPO differs by its two clipped epochs).
DEFAULTS = {
    ("format_copy", "grpo"): dict(steps=40, n_prompts=8, group_size=6, lr=5e-5),
    ("format_copy", "reinforce"): dict(steps=40, n_prompts=8, group_size=6, lr=5e-5),
    ("math_toy", "grpo"): dict(steps=30, n_prompts=8, group_size=8, lr=5e-5, minibatch_size=32),
    ("math_toy", "reinforce"): dict(steps=30, n_prompts=8, group_size=8, lr=5e-5, minibatch_size=32),
    ("math_hard", "grpo"): dict(steps=501, n_prompts=8, group_size=8, lr=3e-5, backend="hf", minibatch_size=8,
                                grad_accum_steps=8, eval_every=25, ckpt_every=25),
    ("math_hard", "reinforce"): dict(steps=201, n_prompts=8, group_size=8, lr=3e-5, backend="hf",
                                     minibatch_size=8, grad_accum_steps=8, eval_every=25, ckpt_every=25),
}


def default_config(task: str = "format_copy", algo: str = "grpo", **overrides) -> HW4Config:
    """The required run's configuration for (task, algo), with ``overrides`` applied."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    base = dict(DEFAULTS.get((task, algo), {}))
    base.update(overrides)
    return HW4Config(task=task, algo=algo, **base)


# ----------------------------------------------------------------------------- logging helpers

def read_jsonl(path) -> list[dict]:
    """Records of a JSONL file (a torn last line from a crash is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _truncate_jsonl(path: Path, last_step: int) -> None:
    keep = [r for r in read_jsonl(path) if r.get("step", -1) <= last_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
    os.replace(tmp, path)


def _append(path: Path | None, record: dict) -> None:
    if path is None:
        return
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


class _WandB:
    def __init__(self, cfg: HW4Config, run_dir: Path | None):
        try:
            import wandb
        except ImportError:
            raise ImportError("wandb=True needs the wandb package (pip install wandb); the run also logs "
                              "everything to metrics.jsonl without it") from None
        self.wandb = wandb
        run_id = f"{cfg.task}-{cfg.algo}-{cfg.key()}"
        self.run = wandb.init(project=cfg.wandb_project, mode=cfg.wandb_mode, config=cfg.to_dict(),
                              dir=str(run_dir) if run_dir else None, id=run_id, resume="allow",
                              name=f"{cfg.task}-{cfg.algo}")

    def log(self, record: dict, generations: list[dict] | None):
        data = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        if generations:
            cols = ["prompt", "completion", "answer", "reward", "advantage"]
            data["generations"] = self.wandb.Table(columns=cols, data=[[g[c] for c in cols] for g in generations])
        self.run.log(data, step=record["step"])

    def finish(self):
        self.run.finish()


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def _scored(backend, impl, ids, am, chunk: int, reference: bool) -> torch.Tensor:
    """Per-token log-probs without gradient, ``chunk`` rows at a time.

    One pass over the whole batch would hold [B, T, V] logits at once: for a 1.5B model on
    math_hard (64 rows, ~700 tokens, 152k vocabulary) that is ~27 GB in fp32 before log-softmax.
    """
    parts = [impl.compute_per_token_logprobs(backend.logits(ids[i:i + chunk], am[i:i + chunk], reference=reference),
                                             ids[i:i + chunk]) for i in range(0, ids.shape[0], chunk)]
    return torch.cat(parts, 0)


def _greedy(backend: PolicyBackend, task: Task, examples, batch_size: int) -> list[str]:
    completions = []
    for i in range(0, len(examples), batch_size):
        chunk = examples[i:i + batch_size]
        rb = backend.generate([e.prompt for e in chunk], 1, task.eval_max_new_tokens, 0.0, 1.0, None)
        completions += rb.completions
    return completions


@torch.no_grad()
def evaluate(backend: PolicyBackend, task: Task, limit: int | None = None, batch_size: int = 64,
             group: Group = SINGLE) -> dict:
    """Greedy decoding on the task's eval set: exact match, mean reward, mean length, completions.

    In a data-parallel run (``group``) each process decodes a contiguous block of the eval set and
    the totals are summed over the processes; every process returns the whole set's figures."""
    examples = task.eval_examples()[:limit] if limit else task.eval_examples()
    if not group.active:
        completions = _greedy(backend, task, examples, batch_size)
        answers = [e.answer for e in examples]
        rewards, _ = score(task, completions, answers)
        em = [task.exact_match(c, a) for c, a in zip(completions, answers)]
        return {"eval_exact_match": sum(em) / len(em), "eval_reward": rewards.mean().item(),
                "eval_completions": completions}
    n, r, w = len(examples), group.rank, group.world_size
    mine = examples[r * n // w:(r + 1) * n // w]
    completions = _greedy(backend, task, mine, batch_size) if mine else []
    totals = torch.zeros(3, dtype=torch.float64)
    if mine:
        answers = [e.answer for e in mine]
        rewards, _ = score(task, completions, answers)
        totals += torch.tensor([len(mine), sum(task.exact_match(c, a) for c, a in zip(completions, answers)),
                                float(rewards.double().sum())], dtype=torch.float64)
    group.all_reduce_(totals)
    everyone = [c for part in group.all_gather_objects(completions) for c in part]
    return {"eval_exact_match": float(totals[1] / totals[0]), "eval_reward": float(totals[2] / totals[0]),
            "eval_completions": everyone}


# ----------------------------------------------------------------------------- the student's pieces

class StudentScorer:
    """The step's scorer on the student's functions: per-token log-probs ``compute_per_token_logprobs``
    and the mask ``build_completion_mask``, both [B, T-1] (column t scores token t + 1)."""

    def __init__(self, backend: PolicyBackend, impl: Impl, chunk: int):
        self.backend, self.impl, self.chunk = backend, impl, chunk

    def mask(self, rollout):
        return self.impl.build_completion_mask(rollout.attention_mask, rollout.prompt_len)

    def old_logprobs(self, rollout, sampled_here: bool):
        return _scored(self.backend, self.impl, rollout.input_ids, rollout.attention_mask, self.chunk, reference=False)

    def ref_logprobs(self, rollout):
        return _scored(self.backend, self.impl, rollout.input_ids, rollout.attention_mask, self.chunk, reference=True)

    def forward(self, minibatch: dict, rollout):
        logits = self.backend.logits(minibatch["input_ids"], minibatch["attention_mask"])
        return self.impl.compute_per_token_logprobs(logits, minibatch["input_ids"]), logits[:, :-1]


def student_advantages(impl: Impl, cfg: HW4Config):
    """advantage_fn(rewards [B], G) -> [B] float32: the student's group advantages, then their
    optional normalisation and clip."""
    B = cfg.n_prompts * cfg.group_size

    def advantages(rewards, group_size):
        adv = impl.compute_group_advantages(rewards, group_size)
        adv = impl.maybe_normalize_advantages(adv, cfg.normalize_advantages, cfg.adv_clip)
        if adv.shape != (B,):
            raise ValueError(f"advantages must have shape ({B},), got {tuple(adv.shape)}")
        return adv.float()
    return advantages


def student_loss(impl: Impl, cfg: HW4Config):
    """policy_loss_fn(LossBatch) -> (loss, stats): the student's GRPO or GR-REINFORCE loss, and the
    student's k3 estimate of the KL to the reference under the policy being updated."""

    def loss(b):
        if cfg.algo == "grpo":
            value = impl.grpo_loss(b.logprobs, b.old_logprobs, b.ref_logprobs, b.mask, b.advantages,
                                   cfg.clip_eps, cfg.kl_coef)
        else:
            value = impl.reinforce_loss(b.logprobs, b.ref_logprobs, b.mask, b.advantages, cfg.kl_coef)
        with torch.no_grad():
            kl = float(impl.approx_kl_from_logprobs(b.logprobs.detach(), b.ref_logprobs, b.mask))
        return value, {"kl_to_reference_k3_token_mean_nats": kl}
    return loss


def spine_config(cfg: HW4Config, processes: int = 1) -> RLConfig:
    """The RL step's settings of an hw4 run (in one of ``processes`` data-parallel processes: its
    share of the prompts). The KL penalty lives in the student's loss, so the step adds none; the
    clip bounds only feed its clip statistics (a bound of 1 or more cannot bind from below: the
    ratio is positive)."""
    return RLConfig(steps=cfg.steps, n_prompts=cfg.n_prompts // processes, group_size=cfg.group_size, lr=cfg.lr,
                    epochs=cfg.epochs, eps_low=cfg.clip_eps if cfg.clip_eps < 1 else None, eps_high=cfg.clip_eps,
                    kl_coef=0.0, temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                    max_grad_norm=cfg.max_grad_norm, weight_decay=cfg.weight_decay, seed=cfg.seed,
                    minibatch_size=cfg.minibatch_size, grad_accum_steps=cfg.grad_accum_steps, betas=tuple(cfg.betas),
                    track_reference_kl=True, loss="pg")


# ----------------------------------------------------------------------------- the run manager

TINY_MODEL = "tiny-random"  # the hf backend's random-weight Qwen2 with a character tokenizer, built offline


def build_backend(cfg: HW4Config, group: Group = SINGLE, progress: bool = True) -> PolicyBackend:
    """The policy backend of ``cfg`` (``backend``, ``backend_kwargs``), built after seeding torch's
    global generator with ``cfg.seed`` (a LoRA adapter's initialisation draws from it, so every
    process of a data-parallel run builds the same one). The hf backend also takes ``model=
    "tiny-random"`` (a random-weight Qwen2, built offline) and, in a multi-GPU run, puts each
    process on its own GPU (``LOCAL_RANK``)."""
    kw = dict(cfg.backend_kwargs or {})
    torch.manual_seed(cfg.seed)
    if cfg.backend == "hf":
        local_rank = os.environ.get("LOCAL_RANK")
        if "device" not in kw and local_rank is not None and torch.cuda.is_available():
            kw["device"] = f"cuda:{int(local_rank)}"  # one GPU per process under accelerate launch / torchrun
        if kw.get("model") == TINY_MODEL:
            from .hf_backend import HFBackend, char_tokenizer, tiny_random_model
            kw.pop("model")
            tok = char_tokenizer()
            return HFBackend(tiny_random_model(tok, seed=cfg.seed), tok, progress=progress and group.is_main, **kw)
        kw.setdefault("progress", progress and group.is_main)
    return make_backend(cfg.backend, **kw)


def _policy_path(run_dir: Path, step: int) -> Path:
    return run_dir / f"policy-step{step:05d}.pt"


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def data_parallel_config(cfg: HW4Config, group: Group) -> HW4Config:
    """``cfg`` for a run on ``group``'s processes: ``shares`` 1 becomes the number of processes
    (each holds one share); otherwise it must be a multiple of it. Refuses the launchers' sharded
    engines (DeepSpeed, FSDP), which this trainer does not use."""
    for var, engine in (("ACCELERATE_USE_DEEPSPEED", "DeepSpeed"), ("ACCELERATE_USE_FSDP", "FSDP")):
        if os.environ.get(var, "").lower() == "true":
            raise ValueError(f"the course's trainer runs plain data parallel (each process holds the model; "
                             f"gradients are averaged); {engine} is for export-trl: python -m llmrl.hw4 "
                             f"export-trl ... (docs/hw4_gpu.md), or launch train with configs/accelerate/ddp.yaml")
    if not group.active:
        return cfg
    if cfg.shares == 1:
        try:
            cfg = replace(cfg, shares=group.world_size)
        except ValueError as e:
            raise ValueError(f"on {group.world_size} processes each process holds one share of every batch: {e}") \
                from None
    if cfg.shares % group.world_size:
        raise ValueError(f"shares={cfg.shares} cannot be split over {group.world_size} processes: use a multiple "
                         f"of {group.world_size} (or shares=1: one share per process)")
    return cfg


def train(config: HW4Config, impl: Impl, *, run_dir=None, backend: PolicyBackend | None = None,
          task: Task | None = None, resume: bool = True, progress: bool = True, callback=None,
          group: Group | None = None) -> History:
    """Run GR-REINFORCE or GRPO; returns a History of every step's record (also in ``run_dir/metrics.jsonl``).

    ``impl``: the student's functions (:class:`llmrl.hw4.impl.Impl`). ``backend``/``task``: built
    from the config when None. ``run_dir``: where logs and checkpoints go (None: memory only).
    ``resume``: continue a run found in ``run_dir`` (False: start over and overwrite it).
    ``callback(record)`` is called after every step (raise from it to stop the run).

    Data parallel (``group``, default: the processes ``torchrun`` / ``accelerate launch`` started,
    :func:`llmrl.rl.data_parallel.process_group`): each process samples and trains on its shares of
    every batch (``config.shares``, set to the number of processes when 1), the gradients are
    averaged before clipping, and the first process writes the logs and checkpoints; every process
    returns (and passes to ``callback``) the records reduced over the processes. A 1-process run
    with the same ``shares`` gives the same numbers (:mod:`llmrl.rl.data_parallel`).
    """
    if not isinstance(config, HW4Config):
        raise TypeError(f"config must be an HW4Config, got {type(config).__name__}")
    if not isinstance(impl, Impl):
        raise TypeError(f"impl must be an llmrl.hw4.impl.Impl, got {type(impl).__name__}")
    group = dp.process_group() if group is None else group
    cfg = data_parallel_config(config, group)
    main = group.is_main
    set_threads(1)
    task = task if task is not None else make_task(cfg.task, **cfg.task_kwargs)
    if backend is None:
        backend = build_backend(cfg, group, progress=progress)
    optimizer = PolicyOptimizer(backend.trainable_parameters(), cfg.lr, cfg.betas, cfg.weight_decay)
    run = RLRun(policy=backend, task=task, config=spine_config(cfg, group.world_size), optimizer=optimizer,
                generator=torch.Generator().manual_seed(cfg.seed),
                scorer=StudentScorer(backend, impl, cfg.minibatch_size), loss_fn=student_loss(impl, cfg),
                advantage_fn=student_advantages(impl, cfg),
                minibatches=lambda fields, g: impl.iter_minibatches(fields, cfg.minibatch_size, g))
    if cfg.shares > 1:  # the shares of every batch (llmrl.rl.data_parallel): the same numbers on any number of processes
        shares = dp.Shares(cfg.shares, group)
        run.task, run.policy = dp.ShareTask(task, shares), dp.ShareSampler(backend, shares)
        run.minibatches = dp.share_minibatches(impl.iter_minibatches, shares, cfg.minibatch_size)
        run.loss_fn = dp.share_loss(run.loss_fn, shares.per_process, clip_statistics=True)
        run.advantage_fn = dp.gathered_advantages(run.advantage_fn, group)
    if group.active:
        run.optimizer = dp.DataParallelOptimizer(optimizer, group)
        run.hooks = dp.ReducingHooks(group, run.hooks).hooks()
    torch.manual_seed(cfg.seed + group.rank)  # dropout and other global draws: a stream per process

    # -- files, resume (the first process writes; every process reads the same checkpoint) ---------
    metrics_path = gens_path = None
    history = History()
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        metrics_path, gens_path = run_dir / "metrics.jsonl", run_dir / "generations.jsonl"
        state_path = run_dir / "trainer_state.pt"
        resuming = group.broadcast_object(bool(resume and state_path.exists()))
        state = None
        if resuming:
            state = torch.load(state_path, map_location="cpu", weights_only=False)  # not onto rank 0's GPU
            if state["key"] != cfg.key():
                raise ValueError(f"run_dir {str(run_dir)!r} holds a run with a different configuration; "
                                 f"use another run_dir or resume=False (--fresh) to overwrite it")
            backend.load(state["policy"])
            optimizer.load_state_dict(state["optimizer"])
            run.generator.set_state(state["generator"])
            run.step = state["step"]
        if main:
            if resuming:
                for p in (metrics_path, gens_path):
                    _truncate_jsonl(p, run.step)
            else:
                for p in list(run_dir.glob("policy-step*")) + [state_path, metrics_path, gens_path]:
                    _remove(p)
            (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
        group.barrier()  # the files are in place before anyone reads the log or writes a checkpoint
        if resuming:
            history.extend(read_jsonl(metrics_path))
    group.broadcast_(backend.trainable_parameters())  # every process starts from the first one's weights
    history.config, history.backend, history.run_dir = cfg, backend, run_dir
    wb = _WandB(cfg, run_dir) if cfg.wandb and main else None

    def save_checkpoint(step):
        if run_dir is None or not main:
            return
        pol = _policy_path(run_dir, step)
        backend.save(pol)
        tmp = run_dir / "trainer_state.tmp"
        torch.save({"key": cfg.key(), "step": step, "policy": str(pol), "optimizer": run.optimizer.state_dict(),
                    "generator": run.generator.get_state()}, tmp)
        os.replace(tmp, run_dir / "trainer_state.pt")
        for old in run_dir.glob("policy-step*"):
            if old != pol:
                _remove(old)

    def on_step(record, batch):
        step, G = record["step"], cfg.group_size
        gens = None
        if main and batch is not None and (step % cfg.gen_every == 0 or step == 1):
            r, adv = batch.rollout, batch.advantages
            gens = [{"step": step, "prompt": r.prompts[j], "completion": r.completions[j], "answer": r.answers[j],
                     "reward": batch.rewards[j].item(), "advantage": adv[j].item(),
                     **{k: v[j].item() for k, v in batch.components.items()}} for j in range(G)]
        if main:
            _append(metrics_path, record)
            for gen in gens or []:
                _append(gens_path, gen)
        if wb is not None:
            wb.log(record, gens)
        if callback is not None:
            callback(record)
        if step == 0 or step % cfg.ckpt_every == 0 or step == cfg.steps:
            save_checkpoint(step)

    def eval_fn(b):
        ev = evaluate(b, task, cfg.eval_limit, group=group)
        ev.pop("eval_completions")
        return ev

    train_loop(run, cfg.steps, eval_fn=eval_fn, eval_every=cfg.eval_every, evaluate_model=backend, on_step=on_step,
               progress=progress and main, desc=f"{cfg.task} {cfg.algo}", history=history)
    if wb is not None:
        wb.finish()
    return history
