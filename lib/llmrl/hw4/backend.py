"""The model backend contract of hw4: what the trainer needs from a policy, whatever it is.

Two implementations: the CPU character model of this package (``char_backend``) and Hugging Face
causal LMs with a LoRA adapter (``hf_backend``). The trainer, the tasks and the student's functions
see only this interface, so the same four runs work on both.

Layout of a rollout batch (B = n_prompts * group_size rows, grouped by prompt):
``input_ids`` [B, T] long: the prompt left-padded to a common width P, then the completion,
right-padded; ``attention_mask`` [B, T] long/bool: 1 on real tokens; ``prompt_len`` = P, the same
for every row, so completion tokens sit at columns P..T-1. The logits at column t score token t+1.
The end-of-sequence token that closes a completion is a real token (mask 1: the policy chose to
stop, so it is scored and trained); a completion cut at max_new_tokens has none.

Optional members the trainer uses when present: ``train(mode: bool)`` (switch dropout on for the
update and off for sampling), ``describe() -> str``. Checkpoints go through ``save(path)`` /
``load(path)`` with a file path chosen by the trainer (``run_dir/policy-stepNNNNN.pt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch


@dataclass
class RolloutBatch:
    input_ids: torch.Tensor          # [B, T] long
    attention_mask: torch.Tensor     # [B, T] (1 = real token)
    prompt_len: int                  # P: completions start at column P
    prompts: list[str]               # B prompt texts (each repeated group_size times)
    completions: list[str]           # B decoded completions (no padding, no EOS)
    group_size: int


@runtime_checkable
class PolicyBackend(Protocol):
    name: str
    device: torch.device
    eos_token_id: int
    pad_token_id: int

    def generate(self, prompts: Sequence[str], group_size: int, max_new_tokens: int,
                 temperature: float, top_p: float, generator: torch.Generator | None) -> RolloutBatch:
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
