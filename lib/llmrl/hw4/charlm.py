"""The CPU base model of hw4: a character-level TinyLM, pretrained here on an imperfect corpus.

Why a character model: it needs no downloaded tokenizer or weights, runs a whole RL step in a
fraction of a second on one CPU thread, and still has the shape of the real thing (a prompt, a
sampled completion that ends with EOS, a reward parsed from text).

Sequence layout (the same in pretraining, sampling and scoring): the prompt is ``<bos>`` + its
characters + ``<sep>``, left-padded with ``<pad>`` to ``PROMPT_WIDTH`` columns, then the completion's
characters and ``<eos>``, right-padded. PAD is an ordinary token the model learns to ignore (as
everywhere in llmrl), so positions are the same in every phase.

The pretraining corpus is deliberately imperfect, so that RL has something to fix:

* format_copy: most completions answer "Answer: N" with no tag (greedy decoding picks this), a
  quarter give the clean tag, some add text after the tag and a few copy a digit wrong.
* math_toy: two habits. Working the problem out ("7*8=56, so \\boxed{56}") is always right;
  answering at once ("\\boxed{15}") shows the family's typical slip (the sign flipped, the operands
  added instead of multiplied, the third term forgotten). Sums are worked out 90% of the time,
  differences, products and three-term sums only ``HARD_CORRECT`` of the time, so greedy decoding
  guesses on them. A quarter of the answers are written without a box. Separate drill rows
  ("Compute 7*8" -> "7*8=56") teach the arithmetic itself. RL has to learn the habit (a choice at
  the first character, so it carries over to held-out problems), not new arithmetic.

The pretrained model of the course's configuration (``DEFAULT_PRETRAIN``) ships with the library
(:mod:`llmrl.store.shipped`, ``models/hw4-charlm.pt``): pretraining it on another CPU would give another
model and other hw4 numbers. Any other configuration is pretrained on first use and cached like
llmrl's SFT checkpoints (file keyed by a hash of the whole configuration, atomic writes, checksum,
rebuilt when stale or corrupted).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from ..sft.supervised import ScheduleConfig, supervised_train
from ..store.cache_files import FORMAT_VERSION, cache_dir, load_state, save_state
from ..lm.tinylm import TinyLM, TinyLMConfig

from .tasks import MATH_FAMILIES, FormatCopyTask, MathToyTask

# ----------------------------------------------------------------------------- tokenizer

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>")
PAD, BOS, EOS, SEP = range(4)
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB = SPECIALS + tuple(CHARS)
VOCAB_SIZE = len(VOCAB)
_CHAR_ID = {c: i + len(SPECIALS) for i, c in enumerate(CHARS)}
PROMPT_WIDTH = 36   # <bos> + at most 34 characters + <sep>
MAX_LEN = 64        # so completions may hold up to 27 characters + <eos>


def encode_text(text: str, what: str = "text") -> list[int]:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    try:
        return [_CHAR_ID[c] for c in text]
    except KeyError as e:
        raise ValueError(f"{what} holds the character {e.args[0]!r}, outside the character model's "
                         f"vocabulary (printable ASCII and newline)") from None


def encode_prompt(prompt: str, width: int = PROMPT_WIDTH) -> list[int]:
    """``width`` ids: left padding, <bos>, the prompt's characters, <sep>."""
    ids = [BOS] + encode_text(prompt, "prompt") + [SEP]
    if len(ids) > width:
        raise ValueError(f"prompt {prompt!r} has {len(prompt)} characters; the character model takes at most "
                         f"{width - 2}")
    return [PAD] * (width - len(ids)) + ids


def decode(ids) -> str:
    """Characters of ``ids`` up to the first <eos>; other special tokens are dropped."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == EOS:
            break
        if i >= len(SPECIALS):
            out.append(VOCAB[i])
    return "".join(out)


# ----------------------------------------------------------------------------- pretraining corpus

CORPUS_VERSION = 3           # bump when the corpus generators change (part of the cache key)
HARD_CORRECT = 0.3           # how often the corpus answers a hard math family right
EASY_CORRECT = 0.9           # ... and the sums


def _wrong_copy(n: int, g: torch.Generator) -> int:
    s = list(str(abs(n)))
    i = int(torch.randint(len(s), (1,), generator=g))
    s[i] = str((int(s[i]) + 1 + int(torch.randint(9, (1,), generator=g))) % 10)
    v = int("".join(s))
    return -v if n < 0 else v


def copy_completion(n: int, g: torch.Generator) -> str:
    """One completion of the base model's corpus for "Copy this integer exactly: n"."""
    u = float(torch.rand((), generator=g))
    if u < 0.55:
        return f"Answer: {n}"
    if u < 0.80:
        return f"<answer>{n}</answer>"
    if u < 0.92:
        return f"<answer>{n}</answer> ok"
    return f"<answer>{_wrong_copy(n, g)}</answer>"


def slip(meta: dict) -> int:
    """The typical wrong answer of a math_toy family."""
    a, b, c, fam = meta["a"], meta["b"], meta["c"], meta["family"]
    return {"add": a + b + 1, "sub": b - a, "mul": a + b, "add3": a + b}[fam]


_OPS = {"add": "+", "sub": "-", "mul": "*", "add3": "+"}


def _worked(meta: dict, answer: str) -> str:
    """'7*8=56': the worked form of a math_toy problem."""
    a, b, c, op = meta["a"], meta["b"], meta["c"], _OPS[meta["family"]]
    return f"{a}{op}{b}" + (f"{op}{c}" if meta["family"] == "add3" else "") + f"={answer}"


def math_completion(meta: dict, answer: str, g: torch.Generator, hard_correct: float = HARD_CORRECT) -> str:
    """One completion of the base model's corpus for a math_toy problem.

    Two habits: work it out ("7*8=56, so \\boxed{56}", always right) or guess at once
    ("\\boxed{15}", the family's typical slip). Sums are worked out EASY_CORRECT of the time, the
    other families only ``hard_correct`` of the time, so greedy decoding guesses on them. A quarter
    of the answers of either habit come without a box.
    """
    p = EASY_CORRECT if meta["family"] == "add" else hard_correct
    boxed = float(torch.rand((), generator=g)) < 0.75
    if float(torch.rand((), generator=g)) < p:
        work = _worked(meta, answer)
        return f"{work}, so \\boxed{{{answer}}}" if boxed else f"{work}, so {answer}."
    wrong = slip(meta)
    return f"\\boxed{{{wrong}}}" if boxed else f"The answer is {wrong}."


@dataclass(frozen=True)
class PretrainConfig(ScheduleConfig):
    """The character model's pretraining: SFT's schedule and loop on this module's corpus."""

    steps: int = 1500
    """optimizer steps of the pretraining"""
    batch_size: int = 32
    """rows per batch"""
    copy_fraction: float = 0.35
    """share of rows from the format_copy corpus (the rest: arithmetic)"""
    hard_correct: float = HARD_CORRECT
    """how often the corpus answers a hard math family right"""
    drill_fraction: float = 0.3
    """share of math rows that are bare facts ('Compute 7*8' -> '7*8=56')"""
    model: TinyLMConfig = field(default_factory=lambda: TinyLMConfig(
        vocab_size=VOCAB_SIZE, d=64, n_layers=2, n_heads=4, max_len=MAX_LEN))
    """the character TinyLM (vocabulary and length fixed by the tokenizer)"""

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.copy_fraction <= 1:
            raise ValueError(f"copy_fraction must be in [0, 1], got {self.copy_fraction}")
        if self.model.vocab_size != VOCAB_SIZE or self.model.max_len < MAX_LEN:
            raise ValueError(f"model must have vocab_size={VOCAB_SIZE} and max_len >= {MAX_LEN}")

    def recipe_extra(self) -> dict:
        """What defines the corpus besides these fields (part of the shipped model's recipe key)."""
        return {"easy": EASY_CORRECT, "corpus": CORPUS_VERSION, "vocab": VOCAB, "width": PROMPT_WIDTH}

    def key(self) -> str:
        blob = json.dumps({"cfg": asdict(self), "v": FORMAT_VERSION, "torch": torch.__version__,
                           "easy": EASY_CORRECT, "corpus": CORPUS_VERSION, "vocab": VOCAB, "width": PROMPT_WIDTH}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrain_batch(cfg: PretrainConfig, g: torch.Generator, copy_task=None, math_task=None):
    """(tokens [N, T] long, target mask [N, T-1] bool: True where column t+1 is a completion token)."""
    copy_task = copy_task or FormatCopyTask()
    math_task = math_task or MathToyTask(families=MATH_FAMILIES)
    rows = []
    n_copy = int((torch.rand(cfg.batch_size, generator=g) < cfg.copy_fraction).sum())
    for ex in copy_task.sample(n_copy, g) if n_copy else []:
        rows.append((ex.prompt, copy_completion(int(ex.answer), g)))
    n_math = cfg.batch_size - n_copy
    for ex in math_task.sample(n_math, g, include_eval=True) if n_math else []:
        if float(torch.rand((), generator=g)) < cfg.drill_fraction:  # arithmetic facts, no question
            work = _worked(ex.meta, ex.answer)
            rows.append((f"Compute {work.split('=')[0]}", work))
        else:
            rows.append((ex.prompt, math_completion(ex.meta, ex.answer, g, cfg.hard_correct)))
    seqs = [encode_prompt(p) + encode_text(c) + [EOS] for p, c in rows]
    T = max(map(len, seqs))
    tokens = torch.full((len(seqs), T), PAD, dtype=torch.long)
    mask = torch.zeros(len(seqs), T - 1, dtype=torch.bool)
    for i, s in enumerate(seqs):
        tokens[i, :len(s)] = torch.tensor(s)
        mask[i, PROMPT_WIDTH - 1:len(s) - 1] = True
    return tokens, mask


def _completion_loss(model, tokens, mask):
    """Mean cross-entropy over the completion tokens (``mask`` [N, T-1]: column t+1 is a target)."""
    logits = model(tokens)[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none")
    return (ce * mask.reshape(-1)).sum() / mask.sum()


def pretrain(cfg: PretrainConfig = PretrainConfig(), progress: bool = False) -> tuple[TinyLM, list[float]]:
    """Train the character model on the corpus from scratch; (model in eval mode, losses)."""
    copy_task, math_task = FormatCopyTask(), MathToyTask(families=MATH_FAMILIES)
    return supervised_train(cfg, lambda g: pretrain_batch(cfg, g, copy_task, math_task), _completion_loss,
                            fused=None, progress=progress, desc="pretraining the character model")


# The pretraining seed of the shipped model (llmrl.tools.rebuild_models.choose_charlm): of seeds 0-3 on the
# instructors' machine, seeds 1 and 2 copy all 64 format_copy eval numbers (seed 0: 55, seed 3: 58),
# and seed 2 ends with the lower loss. Its GRPO run reaches exact match 1.0 by step 5 there.
CHARLM_SEED = 2
DEFAULT_PRETRAIN = PretrainConfig(seed=CHARLM_SEED)


def load_base_model(cfg: PretrainConfig = DEFAULT_PRETRAIN, progress: bool = True) -> TinyLM:
    """A fresh copy of the pretrained character model: the shipped one for the course's
    configuration, else pretrained once into the cache (``progress`` shows that run's bar)."""
    if not isinstance(cfg, PretrainConfig):
        raise TypeError(f"cfg must be a PretrainConfig, got {type(cfg).__name__}")
    if cfg == DEFAULT_PRETRAIN:
        from ..store import shipped
        state = shipped.load_state(shipped.CHARLM_NAME)[1]
    else:
        state = _cached(cfg, progress)
    model = TinyLM(cfg.model)
    model.load_state_dict(state)
    model.eval()
    return model


def _cached(cfg: PretrainConfig, progress: bool) -> dict:
    key = cfg.key()
    path = cache_dir() / f"hw4-charlm-{key}.pt"
    loaded = load_state(path, key)
    if loaded is not None:
        return loaded[1]
    model, losses = pretrain(cfg, progress=progress)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        save_state(path, state, {"key": key, "version": FORMAT_VERSION, "name": "hw4-charlm",
                                 "final_loss": losses[-1]})
    except OSError:  # read-only cache: keep the model in memory only
        pass
    return state
