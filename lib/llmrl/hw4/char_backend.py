"""The character model of :mod:`llmrl.hw4.charlm` behind the :class:`PolicyBackend` contract.

The whole small model is trained (no adapter); the reference policy is a frozen copy of the
starting weights (a few hundred kilobytes, so a second copy costs nothing here).

``make_backend(kind, **kw)`` builds a backend by kind: "char" (this module) or "hf" (Hugging Face
models, ``llmrl.hw4.hf_backend``, imported only when asked for).
"""

from __future__ import annotations

import copy
import importlib
import os
from typing import Sequence

import torch

from ..tinylm import TinyLM
from ..utils import check_float, check_int, make_generator
from . import charlm
from .backend import PolicyBackend, RolloutBatch
from .charlm import BOS, EOS, PAD, SEP, SPECIALS


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """[B, V] logits with every token outside the smallest set of probability >= top_p set to -inf."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) >= top_p  # keep a token while the mass before it is < top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


class CharBackend:
    """PolicyBackend over a TinyLM character model (CPU)."""

    name = "char"

    def __init__(self, model: TinyLM | None = None, pretrain: charlm.PretrainConfig | None = None,
                 progress: bool = True):
        if model is None:
            model = charlm.load_base_model(pretrain or charlm.DEFAULT_PRETRAIN, progress=progress)
        if not isinstance(model, TinyLM):
            raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
        if model.config.vocab_size != charlm.VOCAB_SIZE:
            raise ValueError(f"model must have vocab_size={charlm.VOCAB_SIZE}, got {model.config.vocab_size}")
        self.model = model
        self.ref_model = copy.deepcopy(model).eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        self.device = torch.device("cpu")
        self.eos_token_id = EOS
        self.pad_token_id = PAD
        self.max_len = model.config.max_len
        banned = torch.zeros(charlm.VOCAB_SIZE, dtype=torch.bool)
        banned[[PAD, BOS, SEP]] = True
        self._banned = banned

    # -- sampling ---------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[str], group_size: int, max_new_tokens: int,
                 temperature: float, top_p: float = 1.0, generator: torch.Generator | None = None) -> RolloutBatch:
        """``group_size`` completions per prompt, rows grouped by prompt; temperature 0 is greedy."""
        if isinstance(prompts, str) or not len(prompts):
            raise ValueError("prompts must be a non-empty sequence of strings")
        check_int("group_size", group_size, minimum=1)
        check_int("max_new_tokens", max_new_tokens, minimum=1)
        temperature = check_float("temperature", temperature, minimum=0.0)
        top_p = check_float("top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        P = charlm.PROMPT_WIDTH
        if P + max_new_tokens > self.max_len:
            raise ValueError(f"max_new_tokens={max_new_tokens} is too long for the character model "
                             f"(at most {self.max_len - P})")
        g = make_generator(generator)
        enc = torch.tensor([charlm.encode_prompt(p, P) for p in prompts], dtype=torch.long)
        enc = enc.repeat_interleave(group_size, dim=0)
        B = enc.shape[0]
        was_training = self.model.training
        self.model.eval()
        logits, past = self.model(enc, return_past=True)
        logits = logits[:, -1]
        out = torch.full((B, max_new_tokens), PAD, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        length = torch.zeros(B, dtype=torch.long)  # generated tokens, EOS included
        for t in range(max_new_tokens):
            logits = logits.masked_fill(self._banned, float("-inf"))
            if temperature == 0:
                tok = logits.argmax(-1)
            else:
                probs = top_p_filter(logits / temperature, top_p).softmax(-1)
                tok = torch.multinomial(probs, 1, generator=g).squeeze(1)
            tok = torch.where(done, torch.full_like(tok, PAD), tok)
            out[:, t] = tok
            length += (~done).long()
            done |= tok == EOS
            if bool(done.all()) or t == max_new_tokens - 1:
                break
            logits, past = self.model(tok[:, None], past=past, return_past=True)
            logits = logits[:, -1]
        self.model.train(was_training)
        width = int(length.max())
        out = out[:, :width]
        input_ids = torch.cat([enc, out], dim=1)
        attention_mask = torch.cat([enc != PAD, torch.arange(width)[None, :] < length[:, None]], dim=1).long()
        completions = [charlm.decode(row) for row in out]
        return RolloutBatch(input_ids=input_ids, attention_mask=attention_mask, prompt_len=P,
                            prompts=[p for p in prompts for _ in range(group_size)],
                            completions=completions, group_size=group_size)

    # -- scoring ----------------------------------------------------------------------------------
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               reference: bool = False) -> torch.Tensor:
        """[B, T, V] logits. PAD is an ordinary token to this model (it was pretrained so), so the
        mask is only checked for shape; the positions that matter are causal anyway."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError(f"input_ids must be a [B, T] tensor, got {type(input_ids).__name__}")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        model = self.ref_model if reference else self.model
        if reference:
            with torch.no_grad():
                return model(input_ids.long())
        return model(input_ids.long())

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def state_dict(self) -> dict:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state)

    def save(self, path) -> None:
        tmp = f"{path}.tmp"
        torch.save({"kind": "char", "config": self.model.config.to_dict(), "state": self.state_dict()}, tmp)
        os.replace(tmp, path)

    def load(self, path) -> None:
        blob = torch.load(path, weights_only=True)
        if not isinstance(blob, dict) or blob.get("kind") != "char":
            raise ValueError(f"{path} is not a character-model checkpoint")
        self.model.load_state_dict(blob["state"])

    def describe(self) -> str:
        return f"char TinyLM {self.model.num_parameters():,} parameters, vocab {len(charlm.VOCAB)}"



def make_backend(kind: str = "char", **kw) -> PolicyBackend:
    """A policy backend: "char" (CharBackend(**kw)) or "hf" (llmrl.hw4.hf_backend.HFBackend(**kw))."""
    if kind == "char":
        return CharBackend(**kw)
    if kind == "hf":
        try:
            mod = importlib.import_module("llmrl.hw4.hf_backend")
        except ImportError as e:
            raise ImportError(f"backend 'hf' needs llmrl.hw4.hf_backend and the hf extra "
                              f"(pip install -e '.[hf]'): {e}") from e
        return mod.HFBackend(**kw)
    raise ValueError(f"kind must be 'char' or 'hf', got {kind!r}")
