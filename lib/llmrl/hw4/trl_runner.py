"""hw4's runs on TRL's GRPOTrainer: the course's tasks, rewards and settings handed over to TRL, and
the run (:func:`train_trl`). (Imported as ``llmrl.hw4.trl_export`` too, its old name.)

``python -m llmrl.hw4 train-trl --task format_copy --algo grpo --model smollm2`` trains the policy
that ``python -m llmrl.hw4 train ... --backend hf`` would train, with TRL doing the rollouts and
the update instead of the course's trainer:

* **prompts**: the task's training problems as a ``datasets.Dataset`` (columns ``prompt`` and
  ``answer``), in the order the course's trainer draws them for the same seed
  (:func:`course_prompts`), so a TRL run and a course run see the same problems. With a chat
  template the prompt is a conversation (system prompt, few-shot turns, the problem), which TRL
  renders with the same template the course's HF backend uses.
* **rewards**: one TRL reward function per reward component of the task (format_copy: ``tag``,
  ``clean``, ``correct``; the math tasks: ``boxed``, ``correct``, ``relaxed``). TRL sums them (weights
  1), which is the task's reward, and logs each one as ``rewards/<component>/mean``; exact match is
  logged as ``exact_match``.
* **settings**: :func:`grpo_config_kwargs` maps an :class:`~llmrl.hw4.settings.HW4Config` to
  ``trl.GRPOConfig`` keywords (``loss_type="grpo"``: the course's per-sequence mean). What has no
  counterpart, or differs, is listed in :data:`HYPERPARAMETERS` and ``docs/hw4_trl.md``.
* **model**: the course's :class:`~llmrl.hw4.hf_backend.HFBackend` builds it (SmolLM2 offline, any
  hub name or directory, or ``tiny-random`` for tests), with its LoRA adapter, pad token, chat
  template and few-shot turns; TRL trains that same adapter.
* **evaluation and logs**: the course's greedy evaluation on the task's fixed eval set runs at step 0
  and every ``eval_every`` rollout steps (rank 0 only); ``run_dir/metrics.jsonl`` holds one record
  per rollout step under the course's metric names (:data:`METRICS`), ``run_dir/trl_log.jsonl``
  TRL's own records. Checkpoints (TRL's, in ``run_dir/trl/``) every ``ckpt_every`` rollout steps; a
  rerun of the same command resumes from the last one, ``--fresh`` starts over.

One rollout step of the course (``n_prompts * group_size`` completions, ``ppo_epochs`` passes in
minibatches, an optimizer step every ``grad_accum_steps`` minibatches) is
``epochs * (B / minibatch_size) / grad_accum_steps`` optimizer steps of TRL ("global steps").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from ..utils import check_int
from .tasks import Task, make_task
from .settings import HW4Config
from .run_manager import TINY_MODEL, _truncate_jsonl, build_backend, evaluate, read_jsonl  # noqa: F401 (TINY_MODEL: here too)



@dataclass(frozen=True)
class Mapped:
    """One row of a map between the course's names and TRL's: ``trl`` is None where TRL has none."""

    course: str
    trl: str | None
    note: str


# Course HW4Config field -> GRPOConfig field (what grpo_config_kwargs does, and where the two differ).
HYPERPARAMETERS: tuple[Mapped, ...] = (
    Mapped("n_prompts * group_size", "generation_batch_size",
           "rollouts per step, over all processes; TRL takes the prompts in order from the dataset"),
    Mapped("group_size", "num_generations", "completions per prompt (TRL needs at least 2)"),
    Mapped("minibatch_size", "per_device_train_batch_size",
           "rows per forward/backward pass: minibatch_size / num_processes per process"),
    Mapped("grad_accum_steps", "gradient_accumulation_steps",
           "TRL divides each minibatch loss by it, as the course does; (B / minibatch_size) must be a "
           "multiple of it (the course also steps on a partial group at the end of an epoch, TRL cannot)"),
    Mapped("ppo_epochs (GRPO) / 1 (GR-REINFORCE)", "num_iterations",
           "passes over one rollout batch; the course reshuffles the minibatches in every pass, TRL "
           "shuffles once per rollout batch and reuses the same split"),
    Mapped("steps", "max_steps",
           "the course counts rollout steps, TRL optimizer steps: max_steps = steps * epochs * "
           "(B / minibatch_size) / grad_accum_steps"),
    Mapped("lr", "learning_rate", "constant (lr_scheduler_type='constant', no warmup), as in the course"),
    Mapped("betas", "adam_beta1, adam_beta2", "AdamW (optim='adamw_torch'), eps 1e-8 in both"),
    Mapped("weight_decay", "weight_decay", "same"),
    Mapped("max_grad_norm", "max_grad_norm", "clip of the total gradient norm before each optimizer step"),
    Mapped("temperature", "generation_kwargs['temperature'] (temperature=1.0)",
           "the course samples at `temperature` but scores log-probs of the untempered policy; TRL scores "
           "logits / temperature. Sampling through generation_kwargs and scoring at TRL temperature 1.0 "
           "reproduces the course; --trl-temperature hands `temperature` to TRL itself"),
    Mapped("top_p", "top_p", "nucleus sampling; top_k=0 and repetition_penalty=1.0 in both"),
    Mapped("clip_eps", "epsilon (epsilon_high = epsilon)", "symmetric clip of the per-token ratio"),
    Mapped("kl_coef", "beta",
           "the same knob, one name on each side (beta = kl_coef). k3 estimator in both, but placed "
           "differently: the course adds kl_coef * (token mean of k3 over the minibatch), TRL adds beta * k3 "
           "to each token's loss before the per-sequence mean, i.e. beta * (mean over sequences of each "
           "sequence's mean k3); equal when all completions have the same length. The course clamps "
           "log(pi_ref/pi) to [-20, 20], TRL does not"),
    Mapped("(the KL term's weight)", "use_bias_correction_kl=False",
           "TRL's default (True) multiplies each token's k3 by its importance ratio, which changes the KL "
           "gradient even on-policy (the ratio is 1 but carries a gradient); the course does not"),
    Mapped("(the GRPO surrogate)", "loss_type='grpo'",
           "per-token clipped surrogate averaged over each sequence's tokens, then over sequences: the "
           "course's loss (TRL's default 'dapo' is a token mean over the accumulated batch)"),
    Mapped("(group advantages)", "scale_rewards='group'",
           "(r - mean) / (std + eps) per group; the course uses the population std and eps 1e-6 in float64, "
           "TRL the Bessel-corrected std (n - 1) and eps 1e-4 in float32: TRL's advantages are the course's "
           "times about sqrt((G - 1) / G) (0.91 for G = 6)"),
    Mapped("adv_clip", None,
           "TRL does not clip advantages. With group standardisation abs(A) <= sqrt(G - 1) (population std), "
           "so the course's clip at 5 only binds for groups of 27 or more"),
    Mapped("normalize_advantages", None,
           "no counterpart (TRL's scale_rewards='batch' replaces the group std by the batch std; it does "
           "not renormalise group advantages): train-trl refuses normalize_advantages=True"),
    Mapped("algo='reinforce'", "num_iterations=1",
           "no REINFORCE loss in TRL: with one optimizer step per rollout batch TRL's ratio is 1 and its "
           "gradient equals GR-REINFORCE's (its loss value does not); with more steps per batch TRL's later "
           "minibatches are importance-weighted and clipped, the course's are not"),
    Mapped("max_new_tokens (or the task's)", "max_completion_length", "cap on sampled tokens; EOS counts in both"),
    Mapped("(truncated completions)", "mask_truncated_completions=False", "both train on completions cut at the cap"),
    Mapped("shares", None,
           "the course trainer's data-parallel layout (docs/hw4_gpu.md); TRL splits each rollout batch over its "
           "processes itself, so train-trl refuses shares other than 1"),
    Mapped("seed", "seed", "TRL seeds torch's global generator; the prompts follow the course's generator"),
    Mapped("eval_every, eval_limit", None,
           "TRL evaluates by sampling on an eval_dataset; train-trl runs the course's greedy evaluation in a "
           "callback instead (eval_exact_match, eval_reward in metrics.jsonl)"),
    Mapped("ckpt_every", "save_steps",
           "converted to optimizer steps; TRL keeps the last checkpoint (save_total_limit=1)"),
    Mapped("gen_every", None, "TRL's log_completions prints samples every logging step instead"),
    Mapped("wandb, wandb_mode, wandb_project", "report_to='wandb' (WANDB_MODE, WANDB_PROJECT)", "same run, other logger"),
    Mapped("backend_kwargs (LoRA r, alpha, dropout, targets)", "the PeftModel passed to GRPOTrainer",
           "the course's HFBackend builds the adapter and TRL trains it. With beta > 0 TRL adds a frozen copy "
           "of the starting adapter ('ref') as the reference: the base model, as in the course, for a fresh "
           "adapter. TRL scores old and reference log-probs in train mode (LoRA dropout on), the course in "
           "eval mode"),
    Mapped("backend_kwargs['gradient_checkpointing']", "activation_checkpointing",
           "off unless asked for (TRL's default is on); gradient_checkpointing is its deprecated alias in "
           "transformers 5"),
    Mapped("backend_kwargs['use_vllm']", "use_vllm (vllm_mode='colocate')", "GPU only; not run here"),
)

# Course metric (the names of llmrl.rl.metrics, as in hw4's metrics.jsonl) -> TRL's logged name.
METRICS: tuple[Mapped, ...] = (
    Mapped("reward_mean", "reward", "mean total reward of the rollout batch (sum of the components)"),
    Mapped("reward_std", "reward_std",
           "std over the batch: population std in the course, Bessel-corrected (n - 1) in TRL"),
    Mapped("reward_<component>_mean", "rewards/<component>/mean", "per component, e.g. rewards/correct/mean"),
    Mapped("sampled_accuracy", "exact_match", "logged by train-trl's reward function (TRL has no exact match)"),
    Mapped("kl_to_reference_k3_token_mean_nats", "kl",
           "token mean of k3 under the policy being updated in both, averaged over the step's minibatches; TRL "
           "logs it only when beta > 0"),
    Mapped("clip_fraction", "clip_ratio/region_mean",
           "the same count in both: tokens clipped in the direction of their advantage (ratio < 1 - eps with "
           "A < 0, ratio > 1 + eps with A > 0)"),
    Mapped("grad_norm_mean", "grad_norm", "total norm before clipping; the course averages the step's optimizer steps"),
    Mapped("entropy_token_mean_nats", "entropy",
           "token mean of the policy's entropy; the course measures the first epoch only, TRL every pass "
           "(of logits / temperature when TRL scores at the sampling temperature)"),
    Mapped("completion_tokens_mean", "completions/mean_length", "mean completion length in tokens, EOS included"),
    Mapped("loss_mean", "loss",
           "mean minibatch loss; equal to the course's grpo_loss for equal-length completions or kl_coef 0"),
    Mapped("frac_zero_std_groups", "frac_reward_zero_std", "fraction of groups whose rewards are all equal"),
    Mapped("advantage_abs_mean", None, "TRL logs the advantages only per completion (log_completions)"),
    Mapped("kl_to_reference_k1_sum_nats", None, "the course's KL under the sampling policy (k1 summed per "
           "completion); TRL has only its k3 mean"),
    Mapped("eval_exact_match", None, "train-trl's callback: the course's greedy eval on the fixed eval set"),
    Mapped("eval_reward", None, "train-trl's callback, as eval_exact_match"),
    Mapped("step_seconds", "step_time",
           "TRL's step_time is the time of one optimizer step's training_step calls (generation included); "
           "train-trl writes the wall time between rollout steps as step_seconds"),
)


def markdown_table(rows: tuple[Mapped, ...]) -> str:
    """``rows`` (:data:`HYPERPARAMETERS` or :data:`METRICS`) as the Markdown table of docs/hw4_trl.md."""
    what = ("`HW4Config`", "`GRPOConfig`") if rows is HYPERPARAMETERS else ("`metrics.jsonl`", "logged")
    lines = [f"| course ({what[0]}) | TRL ({what[1]}) | how they relate |", "|---|---|---|"]
    for m in rows:
        lines.append(f"| `{m.course}` | " + (f"`{m.trl}`" if m.trl else "(none)") + f" | {m.note} |")
    return "\n".join(lines)


def metric_rename(component_names) -> dict[str, str]:
    """TRL logged name -> course metric name, components expanded (``rewards/tag/mean`` -> ``reward_tag_mean``)."""
    out = {}
    for m in METRICS:
        if m.trl is None:
            continue
        if "<component>" in m.course:
            for c in component_names:
                out[m.trl.replace("<component>", c)] = m.course.replace("<component>", c)
        else:
            out[m.trl] = m.course
    return out


# ----------------------------------------------------------------------------- configuration

def optimizer_steps_per_rollout(cfg: HW4Config) -> int:
    """TRL optimizer steps ("global steps") in one course rollout step (checked by grpo_config_kwargs)."""
    B = cfg.n_prompts * cfg.group_size
    return cfg.epochs * (B // cfg.minibatch_size) // cfg.grad_accum_steps


def check_exportable(cfg: HW4Config, num_processes: int = 1) -> None:
    """Raise ValueError naming each setting TRL cannot reproduce."""
    check_int("num_processes", num_processes, minimum=1)
    B = cfg.n_prompts * cfg.group_size
    problems = []
    if cfg.group_size < 2:
        problems.append(f"group_size={cfg.group_size}: TRL's GRPOTrainer needs at least 2 completions per prompt")
    if cfg.normalize_advantages:
        problems.append("normalize_advantages=True has no TRL counterpart (see docs/hw4_trl.md)")
    if B % cfg.minibatch_size:
        problems.append(f"n_prompts * group_size = {B} is not a multiple of minibatch_size={cfg.minibatch_size} "
                        f"(TRL splits a rollout batch into equal minibatches)")
    elif (B // cfg.minibatch_size) % cfg.grad_accum_steps:
        problems.append(f"{B // cfg.minibatch_size} minibatches per pass is not a multiple of grad_accum_steps="
                        f"{cfg.grad_accum_steps} (TRL cannot step on a partial accumulation at the end of a pass)")
    if cfg.minibatch_size % num_processes:
        problems.append(f"minibatch_size={cfg.minibatch_size} does not split over {num_processes} processes")
    if cfg.shares != 1:
        problems.append(f"shares={cfg.shares} is the course trainer's data-parallel layout; TRL splits each batch "
                        f"over its processes itself (leave shares=1)")
    if problems:
        raise ValueError("this configuration cannot be handed to TRL: " + "; ".join(problems))


def grpo_config_kwargs(cfg: HW4Config, output_dir, *, num_processes: int = 1, trl_temperature: bool = False,
                       device: str = "cpu", bf16: bool = False, progress: bool = False, **overrides) -> dict:
    """``trl.GRPOConfig(**kwargs)`` for the run ``cfg`` describes (the table :data:`HYPERPARAMETERS`).

    ``trl_temperature``: hand ``cfg.temperature`` to TRL, which then also scores log-probs of the
    tempered policy (default: sample at it, score at 1.0, as the course does). ``overrides``: any
    other GRPOConfig field, applied last."""
    check_exportable(cfg, num_processes)
    per = optimizer_steps_per_rollout(cfg)
    bkw = cfg.backend_kwargs or {}
    kw = dict(
        output_dir=str(output_dir),
        # batch geometry
        generation_batch_size=cfg.n_prompts * cfg.group_size,
        num_generations=cfg.group_size,
        per_device_train_batch_size=cfg.minibatch_size // num_processes,
        gradient_accumulation_steps=cfg.grad_accum_steps,
        num_iterations=cfg.epochs,
        max_steps=cfg.steps * per,
        shuffle_dataset=False,  # the dataset is already in the course's order
        # optimizer
        learning_rate=cfg.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=float(cfg.betas[0]), adam_beta2=float(cfg.betas[1]), adam_epsilon=1e-8,
        weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        # sampling
        top_p=cfg.top_p, top_k=0, repetition_penalty=1.0,
        max_completion_length=cfg.max_new_tokens or None,
        # loss
        loss_type="grpo", epsilon=cfg.clip_eps, epsilon_high=None, delta=None, beta=cfg.kl_coef,
        use_bias_correction_kl=False,
        scale_rewards="group", importance_sampling_level="token", mask_truncated_completions=False,
        top_entropy_quantile=1.0, disable_dropout=False,
        # bookkeeping
        seed=cfg.seed, logging_steps=per, save_strategy="steps", save_steps=cfg.ckpt_every * per,
        save_total_limit=1, report_to=["wandb"] if cfg.wandb else "none",
        activation_checkpointing=bool(bkw.get("gradient_checkpointing", False)),  # gradient_checkpointing in TRL's docs
        use_cpu=device == "cpu", bf16=bool(bf16), fp16=False, disable_tqdm=not progress,
        use_vllm=bool(bkw.get("use_vllm", False)),
    )
    if kw["use_vllm"]:
        kw["vllm_mode"] = "colocate"
    if trl_temperature:
        kw["temperature"] = cfg.temperature
    else:
        kw["temperature"] = 1.0
        kw["generation_kwargs"] = {"temperature": cfg.temperature}
    if kw["max_completion_length"] is None:
        kw.pop("max_completion_length")  # filled from the task by the caller
    kw.update(overrides)
    return kw


# ----------------------------------------------------------------------------- data and rewards

def course_prompts(cfg: HW4Config, task: Task, steps: int | None = None) -> list:
    """The problems the course's trainer draws for ``cfg`` (same seed), ``n_prompts`` per rollout step.

    The trainer's one generator also feeds the HF backend's sampling seed (one draw per step) and the
    minibatch order (one permutation of the B rows per epoch); this replays those draws, so the
    sequence is the course's exactly (a test checks it against the trainer)."""
    g = torch.Generator().manual_seed(cfg.seed)
    B = cfg.n_prompts * cfg.group_size
    out = []
    for _ in range(cfg.steps if steps is None else steps):
        out += task.sample(cfg.n_prompts, g)
        torch.randint(0, 2**31 - 1, (1,), generator=g)  # HFBackend.generate's sampling seed
        for _ in range(cfg.epochs):
            torch.randperm(B, generator=g)               # iter_minibatches' order in each epoch
    return out


def chat_messages(prompt: str, system_prompt: str | None = None, fewshot=()) -> list[dict]:
    """The conversation HFBackend.format_prompt renders: system prompt, few-shot turns, the problem."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for user, assistant in fewshot:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages + [{"role": "user", "content": prompt}]


def make_dataset(examples, *, chat: bool = True, system_prompt: str | None = None, fewshot=()):
    """A ``datasets.Dataset`` with ``prompt`` (a conversation when ``chat``, else the text) and ``answer``."""
    from datasets import Dataset

    examples = list(examples)
    if not examples:
        raise ValueError("examples is empty: a dataset needs at least one problem")
    prompts = [chat_messages(e.prompt, system_prompt, fewshot) if chat else e.prompt for e in examples]
    return Dataset.from_dict({"prompt": prompts, "answer": [e.answer for e in examples]})


def completion_text(completion) -> str:
    """TRL hands a reward function text, or for conversational prompts [{"role": "assistant", "content": text}]."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # content blocks
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return str(content)
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def reward_functions(task: Task, cache_size: int = 8192) -> list[Callable]:
    """One TRL reward function per component of ``task.reward`` (named after it, so TRL logs
    ``rewards/<component>/mean``); their sum is the task's reward. The first also logs the batch's
    exact match through TRL's ``log_metric`` as ``exact_match``. ``task.reward`` runs once per
    (completion, answer), shared by the components."""
    reward = lru_cache(maxsize=cache_size)(task.reward)

    def make(component: str, first: bool):
        def fn(completions, answer, log_metric=None, **_):
            if len(completions) != len(answer):
                raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
            texts = [completion_text(c) for c in completions]
            values = [float(reward(t, a).get(component, 0.0)) for t, a in zip(texts, answer)]
            if first and log_metric is not None:
                em = [task.exact_match(t, a) for t, a in zip(texts, answer)]
                log_metric("exact_match", sum(em) / len(em))
            return values

        fn.__name__ = fn.__qualname__ = component
        return fn

    comps = tuple(task.reward_components)
    if not comps:
        raise ValueError(f"task {task.name!r} has no reward components")
    return [make(c, i == 0) for i, c in enumerate(comps)]


# ----------------------------------------------------------------------------- the model

def make_backend(cfg: HW4Config, progress: bool = True):
    """The course's HFBackend for ``cfg.backend_kwargs`` (``model``: a hub name, a directory,
    ``smollm2-135m-instruct`` (default) or ``tiny-random``), as the course's trainer builds it
    (:func:`llmrl.hw4.run_manager.build_backend`). ``use_vllm`` goes to TRL, not here."""
    from .hf_backend import DEFAULT_MODEL

    kw = dict(cfg.backend_kwargs or {})
    kw.pop("use_vllm", None)
    kw.setdefault("model", DEFAULT_MODEL)
    return build_backend(replace(cfg, backend="hf", backend_kwargs=kw), progress=progress)


# ----------------------------------------------------------------------------- the run

@dataclass
class TRLRun:
    config: HW4Config
    grpo_kwargs: dict
    records: list[dict]          # course-named, one per rollout step (and step 0: the first eval)
    trl_log: list[dict]          # TRL's own log records
    backend: object
    trainer: object
    run_dir: Path | None
    seconds: float = 0.0

    def final(self, name: str):
        pts = [r[name] for r in self.records if name in r]
        return pts[-1] if pts else None


def _run_key(cfg: HW4Config, grpo_kwargs: dict) -> str:
    d = {k: v for k, v in grpo_kwargs.items() if k not in ("output_dir", "max_steps", "save_steps", "disable_tqdm",
                                                            "report_to", "logging_steps")}
    text = json.dumps({"course": cfg.key(), "trl": d}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _last_checkpoint(out: Path):
    cks = [p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return max(cks, key=lambda p: int(p.name.split("-")[-1]), default=None)


def _trl_settings(cfg: HW4Config, backend, task: Task, out: Path, num_processes: int, trl_temperature: bool,
                  progress: bool, trl_overrides: dict | None) -> dict:
    """``trl.GRPOConfig`` keywords of the run on ``backend`` (its device and dtype), the completion cap
    from the task when the config sets none; refuses a reference TRL could not load."""
    grpo_kw = grpo_config_kwargs(cfg, out, num_processes=num_processes, trl_temperature=trl_temperature,
                                 device=backend.device.type, progress=progress,
                                 bf16=backend.dtype == torch.bfloat16 and backend.device.type == "cuda",
                                 **(trl_overrides or {}))
    grpo_kw.setdefault("max_completion_length", cfg.max_new_tokens or task.max_new_tokens)
    name = str(backend.model_name)
    if not backend.lora and cfg.kl_coef > 0 and not (Path(name).is_dir() or name.count("/") == 1):
        raise ValueError("lora=False with kl_coef > 0: TRL loads its own reference copy by name, and "
                         f"{name!r} is neither a hub name nor a directory; keep the LoRA adapter or set kl_coef=0")
    return grpo_kw


def _open_trl_run_dir(run_dir: Path, cfg: HW4Config, grpo_kw: dict, resume: bool):
    """Resume the TRL run found in ``run_dir`` (same key: from TRL's last checkpoint, the logs cut
    back to it) or clear it; write ``export.json``. Every process decides the same before the first
    one changes a file. Returns ``(checkpoint or None, course records so far, TRL records so far)``."""
    from accelerate import PartialState

    out, key, per = run_dir / "trl", _run_key(cfg, grpo_kw), optimizer_steps_per_rollout(cfg)
    metrics_path, trl_path, state_path = run_dir / "metrics.jsonl", run_dir / "trl_log.jsonl", run_dir / "export.json"
    state = PartialState()
    checkpoint = _last_checkpoint(out) if resume and state_path.exists() else None
    if checkpoint is not None and json.loads(state_path.read_text()).get("key") != key:
        raise ValueError(f"run_dir {str(run_dir)!r} holds a TRL run with a different configuration; "
                         f"use another run_dir or resume=False (--fresh) to overwrite it")
    state.wait_for_everyone()
    main = state.is_main_process
    if main and checkpoint is not None:
        for p in (metrics_path, trl_path):
            _truncate_jsonl(p, int(checkpoint.name.split("-")[-1]) // per)
    elif main:
        shutil.rmtree(out, ignore_errors=True)
        for p in (metrics_path, trl_path):
            p.unlink(missing_ok=True)
    if main:
        state_path.write_text(json.dumps({"key": key, "config": cfg.to_dict(), "grpo_config": grpo_kw,
                                          "optimizer_steps_per_rollout": per}, indent=1, default=str))
    state.wait_for_everyone()
    if checkpoint is None:
        return None, [], []
    return checkpoint, read_jsonl(metrics_path), read_jsonl(trl_path)


def _course_log(cfg: HW4Config, backend, task: Task, records: list, trl_log: list, run_dir: Path, keep: bool,
                main: bool, callback):
    """A ``transformers.TrainerCallback`` (rank 0) that runs the course's greedy eval at step 0 and on
    its schedule and turns TRL's log records into course-named ones, one per rollout step, appended
    to ``records`` (and ``run_dir/metrics.jsonl``), TRL's own to ``trl_log`` (``run_dir/trl_log.jsonl``)."""
    from transformers import TrainerCallback

    per = optimizer_steps_per_rollout(cfg)
    rename = metric_rename(task.reward_components)
    metrics_path, trl_path = run_dir / "metrics.jsonl", run_dir / "trl_log.jsonl"

    def append(path, rec):
        if keep and main:
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    class CourseLog(TrainerCallback):
        """The course's greedy eval and course-named records, one per rollout step (rank 0)."""

        def __init__(self):
            self.pending: dict = {}
            self.t0 = time.perf_counter()
            self.skip_eval = False  # set when the parameters are sharded (FSDP, ZeRO-3): rank 0 cannot generate alone

        def _eval(self):
            if self.skip_eval:
                return {}
            ev = evaluate(backend, task, cfg.eval_limit)
            ev.pop("eval_completions")
            return ev

        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()
            if state.is_world_process_zero and state.global_step == 0 and not any(r.get("step") == 0 for r in records) \
                    and not self.skip_eval:
                rec = {"step": 0, **self._eval()}
                records.append(rec)
                append(metrics_path, rec)
                if callback is not None:
                    callback(rec)

        def on_step_end(self, args, state, control, **kw):
            if state.is_world_process_zero and state.global_step % per == 0:
                step = state.global_step // per
                if step % cfg.eval_every == 0 or step == cfg.steps:
                    self.pending = self._eval()

        def on_log(self, args, state, control, logs=None, **kw):
            if not state.is_world_process_zero or not logs or "train_runtime" in logs:
                return
            step = state.global_step // per
            raw = {"step": step, "global_step": state.global_step, **logs}
            trl_log.append(raw)
            append(trl_path, raw)
            rec = {"step": step}
            for trl_name, course_name in rename.items():
                if trl_name in logs and logs[trl_name] is not None:
                    rec[course_name] = float(logs[trl_name])
            rec.update(self.pending)
            self.pending = {}
            now = time.perf_counter()
            rec["step_seconds"] = now - self.t0
            self.t0 = now
            records.append(rec)
            append(metrics_path, rec)
            if callback is not None:
                callback(rec)

    return CourseLog()


def train_trl(config: HW4Config, *, run_dir=None, backend=None, task: Task | None = None, resume: bool = True,
              progress: bool = False, trl_temperature: bool = False, trl_overrides: dict | None = None,
              callback=None) -> TRLRun:
    """Run ``config`` with TRL's GRPOTrainer (see the module docstring). ``run_dir`` None: a temporary
    directory for TRL's files, nothing kept. ``callback(record)`` gets each course-named record."""
    import tempfile

    from accelerate import PartialState
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    if not isinstance(config, HW4Config):
        raise TypeError(f"config must be an HW4Config, got {type(config).__name__}")
    cfg = replace(config, backend="hf") if config.backend != "hf" else config
    num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    check_exportable(cfg, num_processes)
    task = task if task is not None else make_task(cfg.task, **cfg.task_kwargs)
    tmp = None
    if run_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="llmrl-trl-")
        run_dir, keep = Path(tmp.name), False
    else:
        run_dir, keep = Path(run_dir), True
    run_dir.mkdir(parents=True, exist_ok=True)
    if backend is None:
        backend = make_backend(cfg, progress=progress)
    grpo_kw = _trl_settings(cfg, backend, task, run_dir / "trl", num_processes, trl_temperature, progress,
                            trl_overrides)
    checkpoint, records, trl_log = _open_trl_run_dir(run_dir, cfg, grpo_kw, resume)

    chat = bool(getattr(backend, "chat_template", False))
    dataset = make_dataset(course_prompts(cfg, task), chat=chat, system_prompt=getattr(backend, "system_prompt", None),
                           fewshot=getattr(backend, "fewshot", ()))
    args = GRPOConfig(**grpo_kw)
    if cfg.wandb:
        os.environ.setdefault("WANDB_MODE", cfg.wandb_mode)
        os.environ.setdefault("WANDB_PROJECT", cfg.wandb_project)
    course_log = _course_log(cfg, backend, task, records, trl_log, run_dir, keep, PartialState().is_main_process,
                             callback)
    trainer = GRPOTrainer(model=backend.model, reward_funcs=reward_functions(task), args=args, train_dataset=dataset,
                          processing_class=backend.tokenizer, callbacks=[course_log])
    ds_plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    course_log.skip_eval = bool(trainer.is_fsdp_enabled or (ds_plugin is not None and ds_plugin.zero_stage == 3))
    if not progress:
        trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    seconds = time.perf_counter() - t0
    backend.mark_updated()
    run = TRLRun(cfg, grpo_kw, records, trl_log, backend, trainer, run_dir if keep else None, seconds)
    if tmp is not None:
        tmp.cleanup()
    return run


def describe_mapping(cfg: HW4Config, grpo_kwargs: dict) -> str:
    """The mapped settings and the rows of :data:`HYPERPARAMETERS` without a TRL counterpart, as text."""
    per = optimizer_steps_per_rollout(cfg)
    lines = [f"{cfg.task} {cfg.algo} -> trl.GRPOConfig ({per} optimizer step(s) per rollout step):"]
    for k in sorted(grpo_kwargs):
        lines.append(f"  {k} = {grpo_kwargs[k]!r}")
    lines.append("no TRL counterpart:")
    for m in HYPERPARAMETERS:
        if m.trl is None:
            lines.append(f"  {m.course}: {m.note}")
    return "\n".join(lines)
