"""The TinyLM plug-in of the backend seam: :class:`TinyLMBackend` (a TinyLM, or several seeds of one
stacked, with a :class:`~llmrl.backends.protocol.Codec`), the addition codec and :func:`as_backend`."""

from __future__ import annotations

import os
from typing import Sequence

import torch

from ..tasks import addition
from ..lm.sampling import Rollout
from ..lm.stacked import TinyLMStack
from ..lm.tinylm import TinyLM
from ..utils import check_float, check_int, make_generator
from .protocol import Codec, PolicyBackend, frozen_copy
from .registry import register_backend

ADDITION = Codec(prompt_len=addition.PROMPT_LEN, eos=addition.EOS, pad=addition.PAD,
                 encode=addition.encode_prompts, decode=addition.decode_responses,
                 max_new_tokens=addition.MAX_ANSWER_CHARS, cap_with_eos=True)


class TinyLMBackend:
    """PolicyBackend over a TinyLM (CPU), the whole model trained; or over S TinyLMs of one
    configuration trained together as S seeds (:mod:`llmrl.lm.stacked`).

    ``model``: a TinyLM, or a sequence of S TinyLMs (the seeds: their own initial weights or copies
    of one checkpoint). Rows of a rollout are then seed-major: seed s owns rows s*B..(s+1)*B-1,
    ``generate`` takes S*N prompts (seed s's N prompts at s*N..) and a list of S generators, and
    every scoring call takes and returns S*B rows. The models stay usable as TinyLMs: their
    parameters read the trained weights (views of their seed's slice of the stack).

    ``codec``: the addition task's by default. ``reference``: the frozen reference policy, a model
    (shared by every seed), a list of S models, ``"copy"`` (frozen copies of the starting weights,
    made now; one shared copy when every seed starts from the same weights) or None (no reference:
    the step then tracks no KL). ``sampler(logits [B, V], temperature, generator) -> [B]`` replaces
    the token sampler (lab11's student sampler), called per seed on its rows.
    """

    name = "tinylm"
    what = "TinyLM"  # how a checkpoint of this backend is called in error messages

    def __init__(self, model: TinyLM | Sequence[TinyLM], codec: Codec = ADDITION,
                 reference: torch.nn.Module | Sequence[torch.nn.Module] | str | None = None, sampler=None):
        models = [model] if isinstance(model, torch.nn.Module) else list(model) if isinstance(model, (list, tuple)) else None
        if not models or not all(isinstance(m, torch.nn.Module) for m in models):
            raise TypeError(f"model must be a TinyLM (torch.nn.Module) or a list of them, got {type(model).__name__}")
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must be an llmrl.backends.protocol.Codec, got {type(codec).__name__}")
        if sampler is not None and not callable(sampler):
            raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
        self.codec = codec
        self.sampler = sampler
        if isinstance(reference, str):
            if reference != "copy":
                raise ValueError(f"reference must be a model, 'copy' or None, got {reference!r}")
            reference = [frozen_copy(models[0])] if _same_weights(models) else [frozen_copy(m) for m in models]
        elif reference is not None:
            reference = [reference] if isinstance(reference, torch.nn.Module) else list(reference)
            if len(reference) not in (1, len(models)):
                raise ValueError(f"reference must be one model or one per seed ({len(models)}), got {len(reference)}")
            # a reference that is one of the trained models would follow it: freeze a copy instead
            reference = [frozen_copy(r) if any(r is m for m in models) else r for r in reference]
        self.models = models
        self.stack = TinyLMStack(models)
        self.ref_models = reference
        self.ref_stack = None if reference is None else TinyLMStack(reference, trainable=False)
        self.device = torch.device("cpu")
        self.eos_token_id = codec.eos
        self.pad_token_id = codec.pad
        self._banned = None
        if codec.banned:
            self._banned = torch.zeros(models[0].config.vocab_size, dtype=torch.bool)
            self._banned[list(codec.banned)] = True

    @property
    def n_seeds(self) -> int:
        return len(self.models)

    @property
    def model(self) -> TinyLM:
        """The TinyLM (a one-seed backend)."""
        if len(self.models) != 1:
            raise AttributeError(f"this backend holds {len(self.models)} seeds: use .models")
        return self.models[0]

    @property
    def ref_model(self):
        return None if self.ref_models is None else self.ref_models[0]

    # -- sampling ---------------------------------------------------------------------------------
    def _generators(self, generator) -> list[torch.Generator]:
        if isinstance(generator, (list, tuple)):  # a one-seed backend (a teacher) may serve several seeds' streams
            gens = list(generator)
            if not gens or not all(isinstance(g, torch.Generator) for g in gens) or \
                    (self.n_seeds > 1 and len(gens) != self.n_seeds):
                raise ValueError(f"generator must be a list of {self.n_seeds if self.n_seeds > 1 else 'one or more'} "
                                 "torch.Generator (one per seed)")
            return gens
        if self.n_seeds > 1:
            raise ValueError(f"this backend holds {self.n_seeds} seeds: generator must be a list of "
                             f"{self.n_seeds} torch.Generator, one per seed")
        return [make_generator(generator)]

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], group_size: int = 1, max_new_tokens: int | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, generator=None,
                 prompt_tokens: torch.Tensor | None = None) -> Rollout:
        """``group_size`` completions per prompt, rows grouped by prompt; temperature 0 is greedy.

        With S seeds: S*N prompts, seed-major, and ``generator`` a list of S generators.
        ``prompt_tokens`` [S*N, P]: the prompts already encoded (skips ``codec.encode``)."""
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
        max_len = self.models[0].config.max_len
        if c.prompt_len + max_new_tokens + int(c.cap_with_eos) > max_len:
            raise ValueError(f"max_new_tokens={max_new_tokens} is too long for this model "
                             f"(at most {max_len - c.prompt_len - int(c.cap_with_eos)})")
        gens = self._generators(generator)
        if len(prompts) % len(gens):
            raise ValueError(f"{len(prompts)} prompts cannot be split evenly among {len(gens)} seeds")
        enc = c.encode(prompts) if prompt_tokens is None else prompt_tokens
        out, chosen, logps = self.stack.sample(enc, group_size, max_new_tokens, temperature, gens, eos=c.eos,
                                               pad=c.pad, top_p=top_p, banned=self._banned, sampler=self.sampler,
                                               cap_with_eos=c.cap_with_eos, logprobs=c.cap_with_eos)
        if not c.cap_with_eos:  # cut to the longest completion
            width = int(chosen.sum(1).max())
            out, chosen = out[:, :width], chosen[:, :width]
        if group_size > 1:
            enc = enc.repeat_interleave(group_size, 0)
        return Rollout(input_ids=torch.cat([enc, out], 1), attention_mask=torch.cat([enc != c.pad, chosen], 1).long(),
                       prompt_len=c.prompt_len, completions=c.decode(out), group_size=group_size,
                       prompts=[p for p in prompts for _ in range(group_size)], completion_mask=chosen,
                       sample_logprobs=logps, temperature=temperature, n_seeds=self.n_seeds)

    # -- scoring ----------------------------------------------------------------------------------
    def _stack(self, reference: bool) -> TinyLMStack:
        if not reference:
            return self.stack
        if self.ref_stack is None:
            raise ValueError("this backend has no reference policy (build it with reference='copy')")
        return self.ref_stack

    def completion_logits(self, input_ids: torch.Tensor, group_size: int = 1, reference: bool = False,
                          prompt_len: int | None = None, n_cols: int | None = None) -> torch.Tensor:
        """[B, R, V] logits scoring the completion columns; rows in groups of ``group_size`` share
        one prompt (it is encoded once per group). ``n_cols``: only the first n_cols columns are
        computed, the others hold zeros (for when no row has a token to score past them)."""
        P = self.codec.prompt_len if prompt_len is None else prompt_len
        V = self.models[0].config.vocab_size
        if reference:
            with torch.no_grad():
                return self._stack(True).completion_logits(input_ids, P, group_size, n_cols)[..., :V].contiguous()
        return self.stack.completion_logits(input_ids, P, group_size, n_cols)[..., :V].contiguous()

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               reference: bool = False) -> torch.Tensor:
        """[B, T, V] logits. PAD is an ordinary token to TinyLM, so the mask is only checked for
        shape; the positions that matter are causal anyway."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError(f"input_ids must be a [B, T] tensor, got {type(input_ids).__name__}")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        V = self.models[0].config.vocab_size
        if reference:
            with torch.no_grad():
                return self._stack(True).row_logits(input_ids.long())[..., :V].contiguous()
        return self.stack.row_logits(input_ids.long())[..., :V].contiguous()

    # -- parameters and checkpoints ---------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The stacked weights (leading dimension: the seed), the tensors an optimizer steps."""
        return self.stack.parameters()

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
        seeds = f" x {self.n_seeds} seeds" if self.n_seeds > 1 else ""
        return (f"{self.name} TinyLM {self.models[0].num_parameters():,} parameters{seeds}, "
                f"vocab {self.models[0].config.vocab_size}")


def _same_weights(models: Sequence[torch.nn.Module]) -> bool:
    """Whether every model holds the same weights (seeds started from one checkpoint share one reference)."""
    first = list(models[0].parameters())
    return all(all(torch.equal(a, b) for a, b in zip(first, m.parameters())) for m in models[1:])


def as_backend(policy, reference=None) -> PolicyBackend:
    """``policy`` as a backend: a backend as it is, a TinyLM wrapped with the addition codec."""
    if isinstance(policy, torch.nn.Module):
        return TinyLMBackend(policy, reference=reference)
    if not callable(getattr(policy, "generate", None)) or not callable(getattr(policy, "trainable_parameters", None)):
        raise TypeError(f"policy must be a TinyLM or a PolicyBackend, got {type(policy).__name__}")
    return policy


register_backend("tinylm", TinyLMBackend)
