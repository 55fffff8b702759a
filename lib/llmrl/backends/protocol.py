"""The policy backend: what the RL step needs from a policy, whatever model sits behind it.

Three backends implement :class:`PolicyBackend`:

* :class:`llmrl.backends.tinylm_backend.TinyLMBackend`: a TinyLM and a :class:`Codec` that turns prompt texts into token
  ids and completions back into text. With the addition codec it is the policy of labs 11-21.
* ``llmrl.hw4.char_backend.CharBackend``: the same class with hw4's character codec and the
  pretrained character model.
* ``llmrl.hw4.hf_backend.HFBackend``: Hugging Face causal LMs with a LoRA adapter (GPU or CPU).

The RL step (:func:`llmrl.rl.step.rl_step`) talks to a policy only through this seam: ``generate``
(sampling, the policy's own decode loop), ``logits`` / ``completion_logits`` (scoring, under the
policy or, with ``reference=True``, under the frozen reference: for LoRA the same weights with the
adapter off) and ``trainable_parameters`` (what the optimizer steps). The optimizer itself is built
by the step's run (:class:`llmrl.rl.step.PolicyOptimizer`), so a backend that holds several seeds
as one model (a leading seed dimension on every weight) or a data-parallel wrapper brings its own
optimizer and keeps the step unchanged.

Layout of a rollout (:class:`llmrl.lm.sampling.Rollout`, B = n_prompts * group_size rows, grouped by
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
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

import torch

from ..lm.sampling import Rollout

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


def completion_logits(backend, rollout: Rollout, reference: bool = False, n_cols: int | None = None) -> torch.Tensor:
    """[B, R, V] logits that score a rollout's completion tokens (the shift done), its groups'
    prompts encoded once where the backend can (TinyLM)."""
    return completion_logits_of(backend, rollout.input_ids, rollout.attention_mask, rollout.prompt_len,
                                rollout.group_size, reference, n_cols)


def completion_logits_of(backend, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                         group_size: int = 1, reference: bool = False, n_cols: int | None = None) -> torch.Tensor:
    """[B, R, V] logits scoring columns ``prompt_len``.. of ``input_ids`` [B, T]: the backend's own
    ``completion_logits`` when it has one, else its full-sequence ``logits`` sliced. ``n_cols``:
    a backend that can may leave the columns from n_cols on uncomputed (zeros): no token there is
    scored."""
    own = getattr(backend, "completion_logits", None)
    if own is not None:
        return own(input_ids, group_size, reference, prompt_len) if n_cols is None else \
            own(input_ids, group_size, reference, prompt_len, n_cols=n_cols)
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


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy in eval mode with no gradients (a reference policy)."""
    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref

