"""hw4's run manager: GR-REINFORCE and GRPO on any PolicyBackend and any Task, run by the library's
one RL loop and step (:func:`llmrl.rl.train.train_loop`, :func:`llmrl.rl.step.rl_step`), with the
run's files around them. (Imported as ``llmrl.hw4.trainer`` too, its old name.) The run's settings:
:class:`llmrl.hw4.settings.HW4Config`, mapped onto the step's by :func:`llmrl.hw4.settings.spine_config`.

The step is the labs' step; hw4 plugs the student's functions (``impl``) into its pieces
(:func:`spine_run`):

* score: per-token log-probs of the sampled tokens under the policy that sampled them ("old") and
  under the frozen reference (``impl.compute_per_token_logprobs``, [B, T-1], ``minibatch_size``
  rows at a time) and the completion mask (``impl.build_completion_mask``);
* advantages: ``impl.compute_group_advantages`` (per group, (r - mean) / (std + 1e-6)), then
  ``impl.maybe_normalize_advantages`` (optional batch normalisation, clip to +-adv_clip);
* update, minibatches from ``impl.iter_minibatches``, loss from the student:
  GR-REINFORCE, one pass:  loss = -mean_i A_i * (1/|y_i|) sum_t log pi(y_it)  + kl_coef KL.
  GRPO, ``ppo_epochs`` passes over the same rollouts, per-token ratio rho = pi / pi_old:
  loss = -mean_i (1/|y_i|) sum_t min(rho_it A_i, clip(rho_it, 1-eps, 1+eps) A_i)  + kl_coef KL,
  the KL term the student's loss adds itself (the spine's ``kl_mode="policy_loss_fn"``),
  KL = masked mean of k3 = e^d - d - 1, d = log pi_ref - log pi (``impl.approx_kl_from_logprobs``).
  The optimizer steps every ``grad_accum_steps`` minibatches (gradient clipped to ``max_grad_norm``).

Around the step, this module manages the run (:func:`train`): one JSON line of metrics per step in
``run_dir/metrics.jsonl`` (names: :data:`llmrl.rl.metrics.METRICS`); a group of sampled generations
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

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import torch

from ..backends.protocol import PolicyBackend
from ..backends.registry import make_backend
from ..rl import data_parallel as dp
from ..rl.data_parallel import SINGLE, Group
from ..rl.run import History, RLRun
from ..rl.step import PolicyOptimizer
from ..rl.train import train_loop
from ..utils import set_threads
from .settings import ALGOS, DEFAULTS, HW4Config, default_config, spine_config  # noqa: F401 (hw4's names, here too)
from .impl import Impl
from .tasks import Task, make_task, score

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
                             f"gradients are averaged); {engine} is for train-trl: python -m llmrl.hw4 "
                             f"train-trl ... (docs/hw4_gpu.md), or launch train with configs/accelerate/ddp.yaml")
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


def spine_run(cfg: HW4Config, impl: Impl, backend: PolicyBackend, task: Task, group: Group = SINGLE):
    """The library's RL run on hw4's pieces: the spine's settings (:func:`llmrl.hw4.settings.spine_config`),
    the student's scorer, advantages, loss and minibatches, AdamW over the backend's trainable
    parameters; in a data-parallel run (``cfg.shares`` > 1, ``group``) the shares of every batch and
    the averaged gradients. Returns ``(run, optimizer)`` (``optimizer``: the AdamW that a checkpoint
    restores; ``run.optimizer`` wraps it on several processes)."""
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
    return run, optimizer


def _open_run_dir(run_dir: Path, cfg: HW4Config, resume: bool, group: Group, backend: PolicyBackend, optimizer,
                  run: RLRun) -> list[dict]:
    """Make ``run_dir`` ready and return the records of the run so far: resume the run found there
    (same key: the policy, the optimizer, the generator and the step from ``trainer_state.pt``, the
    logs cut back to that step) or clear it; write ``config.json``. The first process writes; every
    process reads the same checkpoint."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path, gens_path = run_dir / "metrics.jsonl", run_dir / "generations.jsonl"
    state_path = run_dir / "trainer_state.pt"
    resuming = group.broadcast_object(bool(resume and state_path.exists()))
    if resuming:
        state = torch.load(state_path, map_location="cpu", weights_only=False)  # not onto rank 0's GPU
        if state["key"] != cfg.key():
            raise ValueError(f"run_dir {str(run_dir)!r} holds a run with a different configuration; "
                             f"use another run_dir or resume=False (--fresh) to overwrite it")
        backend.load(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        run.generator.set_state(state["generator"])
        run.step = state["step"]
    if group.is_main:
        if resuming:
            for p in (metrics_path, gens_path):
                _truncate_jsonl(p, run.step)
        else:
            for p in list(run_dir.glob("policy-step*")) + [state_path, metrics_path, gens_path]:
                _remove(p)
        (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
    group.barrier()  # the files are in place before anyone reads the log or writes a checkpoint
    return read_jsonl(metrics_path) if resuming else []


def _save_checkpoint(run_dir: Path, cfg: HW4Config, backend: PolicyBackend, run: RLRun, step: int) -> None:
    """The policy (``policy-step*``, the one before removed) and the trainer's state after ``step``."""
    pol = _policy_path(run_dir, step)
    backend.save(pol)
    tmp = run_dir / "trainer_state.tmp"
    torch.save({"key": cfg.key(), "step": step, "policy": str(pol), "optimizer": run.optimizer.state_dict(),
                "generator": run.generator.get_state()}, tmp)
    os.replace(tmp, run_dir / "trainer_state.pt")
    for old in run_dir.glob("policy-step*"):
        if old != pol:
            _remove(old)


def _generations(step: int, batch, G: int) -> list[dict]:
    """The first group of the step's batch: prompt, completion, answer, reward (and its components), advantage."""
    r, adv = batch.rollout, batch.advantages
    return [{"step": step, "prompt": r.prompts[j], "completion": r.completions[j], "answer": r.answers[j],
             "reward": batch.rewards[j].item(), "advantage": adv[j].item(),
             **{k: v[j].item() for k, v in batch.components.items()}} for j in range(G)]


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
    run, optimizer = spine_run(cfg, impl, backend, task, group)
    torch.manual_seed(cfg.seed + group.rank)  # dropout and other global draws: a stream per process

    history = History()
    metrics_path = gens_path = None
    if run_dir is not None:
        run_dir = Path(run_dir)
        history.extend(_open_run_dir(run_dir, cfg, resume, group, backend, optimizer, run))
        metrics_path, gens_path = run_dir / "metrics.jsonl", run_dir / "generations.jsonl"
    group.broadcast_(backend.trainable_parameters())  # every process starts from the first one's weights
    history.config, history.backend, history.run_dir = cfg, backend, run_dir
    wb = _WandB(cfg, run_dir) if cfg.wandb and main else None

    def on_step(record, batch):
        step = record["step"]
        gens = None
        if main and batch is not None and (step % cfg.gen_every == 0 or step == 1):
            gens = _generations(step, batch, cfg.group_size)
        if main:
            _append(metrics_path, record)
            for gen in gens or []:
                _append(gens_path, gen)
        if wb is not None:
            wb.log(record, gens)
        if callback is not None:
            callback(record)
        if run_dir is not None and main and (step == 0 or step % cfg.ckpt_every == 0 or step == cfg.steps):
            _save_checkpoint(run_dir, cfg, backend, run, step)

    def eval_fn(b):
        ev = evaluate(b, task, cfg.eval_limit, group=group)
        ev.pop("eval_completions")
        return ev

    train_loop(run, cfg.steps, eval_fn=eval_fn, eval_every=cfg.eval_every, evaluate_model=backend, on_step=on_step,
               progress=progress and main, desc=f"{cfg.task} {cfg.algo}", history=history)
    if wb is not None:
        wb.finish()
    return history
