"""The policy backend: what the RL step needs from a policy, whatever model sits behind it.

Three backends implement :class:`PolicyBackend`:

* :class:`TinyLMBackend` (here): a TinyLM and a :class:`Codec` that turns prompt texts into token
  ids and completions back into text. With the addition codec it is the policy of labs 11-21.
* ``llmrl.hw4.char_backend.CharBackend``: the same class with hw4's character codec and the
  pretrained character model.
* ``llmrl.hw4.hf_backend.HFBackend``: Hugging Face causal LMs with a LoRA adapter (GPU or CPU).

The RL step (:func:`llmrl.trainer.rl_step`) talks to a policy only through this seam: ``generate``
(sampling, the policy's own decode loop), ``logits`` / ``completion_logits`` (scoring, under the
policy or, with ``reference=True``, under the frozen reference: for LoRA the same weights with the
adapter off) and ``trainable_parameters`` (what the optimizer steps). The optimizer itself is built
by the step's run (:class:`llmrl.trainer.PolicyOptimizer`), so a backend that holds several seeds
as one model (a leading seed dimension on every weight) or a data-parallel wrapper brings its own
optimizer and keeps the step unchanged.

Layout of a rollout (:class:`llmrl.sampling.Rollout`, B = n_prompts * group_size rows, grouped by
prompt): ``input_ids`` [B, T] long, the prompt left-padded to a common width P, then the
completion, right-padded; ``attention_mask`` [B, T]: 1 on real tokens; ``prompt_len`` = P, the same
for every row, so completion tokens sit at columns P..T-1. The logits at column t score token t+1.
The end-of-sequence token that closes a completion is a real token (mask 1: the policy chose to
stop, so it is scored and trained); a completion cut at max_new_tokens has none.

Optional members the step uses when present: ``train(mode: bool)`` (dropout on for the update, off
for sampling), ``describe() -> str``. Checkpoints go through ``save(path)`` / ``load(path)``.
"""

from __future__ import annotations

import copy
import importlib
import os
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

import torch

from . import addition
from .sampling import Rollout, response_logits, sample_completions
from .tinylm import TinyLM
from .utils import check_float, check_int, make_generator


@runtime_checkable
class PolicyBackend(Protocol):
    name: str
    device: torch.device
    eos_token_id: int
    pad_token_id: int

    def generate(self, prompts: Sequence[str], group_size: int, max_new_tokens: int,
                 temperature: float, top_p: float, generator: torch.Generator | None) -> Rollout:
        """Sample ``group_size`` completions per prompt (temperature 0 = greedy)."""

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, reference: bool = False) -> torch.Tensor:
        """[B, T, V] logits of the trainable policy, or of the frozen reference when ``reference``
        (for LoRA models: the same weights with the adapter switched off; no second copy)."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        ...

    def save(self, path) -> None:
        """Save what training changed (the adapter, or the whole small model)."""

    def load(self, path) -> None:
        ...


def completion_logits(backend, rollout: Rollout, reference: bool = False) -> torch.Tensor:
    """[B, R, V] logits that score a rollout's completion tokens (the shift done), its groups'
    prompts encoded once where the backend can (TinyLM)."""
    return completion_logits_of(backend, rollout.input_ids, rollout.attention_mask, rollout.prompt_len,
                                rollout.group_size, reference)


def completion_logits_of(backend, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                         group_size: int = 1, reference: bool = False) -> torch.Tensor:
    """[B, R, V] logits scoring columns ``prompt_len``.. of ``input_ids`` [B, T]: the backend's own
    ``completion_logits`` when it has one, else its full-sequence ``logits`` sliced."""
    own = getattr(backend, "completion_logits", None)
    if own is not None:
        return own(input_ids, group_size, reference, prompt_len)
    return backend.logits(input_ids, attention_mask, reference=reference)[:, prompt_len - 1:-1]


# ----------------------------------------------------------------------------- TinyLM

@dataclass(frozen=True)
class Codec:
    """How a TinyLM backend reads and writes text.

    ``encode(texts) -> [N, prompt_len]`` long prompt ids (left-padded); ``decode(ids [B, W])`` ->
    completion strings; ``banned``: token ids never sampled; ``cap_with_eos``: a completion still
    open at the cap gets an EOS the policy did not choose (and keeps its full width); otherwise the
    completions are cut to the longest one.
    """

    prompt_len: int
    eos: int
    pad: int
    encode: Callable[[Sequence[str]], torch.Tensor]
    decode: Callable[[torch.Tensor], list[str]]
    max_new_tokens: int
    banned: tuple[int, ...] = ()
    cap_with_eos: bool = False


ADDITION = Codec(prompt_len=addition.PROMPT_LEN, eos=addition.EOS, pad=addition.PAD,
                 encode=addition.encode_prompts, decode=addition.decode_responses,
                 max_new_tokens=addition.MAX_ANSWER_CHARS, cap_with_eos=True)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy in eval mode with no gradients (a reference policy)."""
    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class TinyLMBackend:
    """PolicyBackend over a TinyLM (CPU), the whole model trained.

    ``codec``: the addition task's by default. ``reference``: the frozen reference policy, a
    model, ``"copy"`` (a frozen copy of the starting weights, made now) or None (no reference: the
    step then tracks no KL). ``sampler(logits [B, V], temperature, generator) -> [B]`` replaces the
    token sampler (lab11's student sampler).
    """

    name = "tinylm"
    what = "TinyLM"  # how a checkpoint of this backend is called in error messages

    def __init__(self, model: TinyLM, codec: Codec = ADDITION, reference: torch.nn.Module | str | None = None,
                 sampler=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a TinyLM (torch.nn.Module), got {type(model).__name__}")
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must be an llmrl.backend.Codec, got {type(codec).__name__}")
        if sampler is not None and not callable(sampler):
            raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
        self.model = model
        self.codec = codec
        self.sampler = sampler
        if isinstance(reference, str):
            if reference != "copy":
                raise ValueError(f"reference must be a model, 'copy' or None, got {reference!r}")
            reference = frozen_copy(model)
        self.ref_model = reference
        self.device = torch.device("cpu")
        self.eos_token_id = codec.eos
        self.pad_token_id = codec.pad
        self._banned = None
        if codec.banned:
            self._banned = torch.zeros(model.config.vocab_size, dtype=torch.bool)
            self._banned[list(codec.banned)] = True

    # -- sampling ---------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[str], group_size: int = 1, max_new_tokens: int | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, generator: torch.Generator | None = None,
                 prompt_tokens: torch.Tensor | None = None) -> Rollout:
        """``group_size`` completions per prompt, rows grouped by prompt; temperature 0 is greedy.

        ``prompt_tokens`` [N, P]: the prompts already encoded (skips ``codec.encode``)."""
        if isinstance(prompts, str) or not len(prompts):
            raise ValueError("prompts must be a non-empty sequence of strings")
        c = self.codec
        check_int("group_size", group_size, minimum=1)
        max_new_tokens = c.max_new_tokens if max_new_tokens is None else check_int("max_new_tokens", max_new_tokens,
                                                                                   minimum=1)
        temperature = check_float("temperature", temperature, minimum=0.0)
        top_p = check_float("top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if c.prompt_len + max_new_tokens + int(c.cap_with_eos) > self.model.config.max_len:
            raise ValueError(f"max_new_tokens={max_new_tokens} is too long for this model "
                             f"(at most {self.model.config.max_len - c.prompt_len - int(c.cap_with_eos)})")
        enc = c.encode(prompts) if prompt_tokens is None else prompt_tokens
        out, chosen, logps = sample_completions(self.model, enc, group_size, max_new_tokens, temperature,
                                                make_generator(generator), eos=c.eos, pad=c.pad, top_p=top_p,
                                                banned=self._banned, sampler=self.sampler,
                                                cap_with_eos=c.cap_with_eos, logprobs=c.cap_with_eos)
        if not c.cap_with_eos:  # cut to the longest completion
            width = int(chosen.sum(1).max())
            out, chosen = out[:, :width], chosen[:, :width]
        if group_size > 1:
            enc = enc.repeat_interleave(group_size, 0)
        return Rollout(input_ids=torch.cat([enc, out], 1), attention_mask=torch.cat([enc != c.pad, chosen], 1).long(),
                       prompt_len=c.prompt_len, completions=c.decode(out), group_size=group_size,
                       prompts=[p for p in prompts for _ in range(group_size)], completion_mask=chosen,
                       sample_logprobs=logps, temperature=temperature)

    # -- scoring ----------------------------------------------------------------------------------
    def _model(self, reference: bool) -> torch.nn.Module:
        if not reference:
            return self.model
        if self.ref_model is None:
            raise ValueError("this backend has no reference policy (build it with reference='copy')")
        return self.ref_model

    def completion_logits(self, input_ids: torch.Tensor, group_size: int = 1, reference: bool = False,
                          prompt_len: int | None = None) -> torch.Tensor:
        """[B, R, V] logits scoring the completion columns; rows in groups of ``group_size`` share
        one prompt (it is encoded once per group)."""
        P = self.codec.prompt_len if prompt_len is None else prompt_len
        if reference:
            with torch.no_grad():
                return response_logits(self._model(True), input_ids, group_size, P)
        return response_logits(self.model, input_ids, group_size, P)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               reference: bool = False) -> torch.Tensor:
        """[B, T, V] logits. PAD is an ordinary token to TinyLM, so the mask is only checked for
        shape; the positions that matter are causal anyway."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError(f"input_ids must be a [B, T] tensor, got {type(input_ids).__name__}")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        if reference:
            with torch.no_grad():
                return self._model(True)(input_ids.long())
        return self.model(input_ids.long())

    # -- parameters and checkpoints ---------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        """Nothing to switch: TinyLM has no dropout, so train and eval mode compute the same and the
        model stays in eval mode (switching walks every module, a cost on every step)."""

    def state_dict(self) -> dict:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state)

    def save(self, path) -> None:
        tmp = f"{path}.tmp"
        torch.save({"kind": self.name, "config": self.model.config.to_dict(), "state": self.state_dict()}, tmp)
        os.replace(tmp, path)

    def load(self, path) -> None:
        blob = torch.load(path, weights_only=True)
        if not isinstance(blob, dict) or blob.get("kind") != self.name:
            raise ValueError(f"{path} is not a {self.what} checkpoint")
        self.model.load_state_dict(blob["state"])

    def describe(self) -> str:
        return f"{self.name} TinyLM {self.model.num_parameters():,} parameters, vocab {self.model.config.vocab_size}"


def as_backend(policy, reference=None) -> PolicyBackend:
    """``policy`` as a backend: a backend as it is, a TinyLM wrapped with the addition codec."""
    if isinstance(policy, torch.nn.Module):
        return TinyLMBackend(policy, reference=reference)
    if not callable(getattr(policy, "generate", None)) or not callable(getattr(policy, "trainable_parameters", None)):
        raise TypeError(f"policy must be a TinyLM or a PolicyBackend, got {type(policy).__name__}")
    return policy


def make_backend(kind: str = "char", **kw) -> PolicyBackend:
    """A policy backend: "char" (hw4's CharBackend(**kw)) or "hf" (llmrl.hw4.hf_backend.HFBackend(**kw))."""
    if kind == "char":
        from .hw4.char_backend import CharBackend
        return CharBackend(**kw)
    if kind == "hf":
        try:
            mod = importlib.import_module("llmrl.hw4.hf_backend")
        except ImportError as e:
            raise ImportError(f"backend 'hf' needs llmrl.hw4.hf_backend and the hf extra "
                              f"(pip install -e '.[hf]'): {e}") from e
        return mod.HFBackend(**kw)
    raise ValueError(f"kind must be 'char' or 'hf', got {kind!r}")
