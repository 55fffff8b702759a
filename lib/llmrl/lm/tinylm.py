"""TinyLM: a ~100k-parameter causal transformer, in one short file (nanoGPT style).

The configuration is one frozen dataclass; ``TinyLM(d=48)`` builds a smaller student. The model
maps token ids [B, T] to logits [B, T, V] under a causal mask.

Padding: the course left-pads prompts to a fixed width and treats PAD as an ordinary token that
the model learns to ignore, the same way in SFT, sampling and RL, so no padding mask is needed
and attention runs on the fast fused causal path. An optional boolean ``attention_mask`` [B, T]
(True = real token) hides padded keys for callers that want it. A key/value cache (``past``)
makes generation cost one token per step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils import check_int

Past = list  # one (keys, values) pair per layer, each [B, H, T_past, d_head]
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # name -> the MLP's nonlinearity


@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int = 15
    """tokens in the vocabulary (15: the addition task's digits, signs and specials)"""
    d: int = 64
    """width of the residual stream"""
    n_layers: int = 2
    """transformer blocks"""
    n_heads: int = 4
    """attention heads per block (d must be a multiple)"""
    d_ff: int | None = None
    """width of the MLP's hidden layer (None: 4 * d)"""
    max_len: int = 16
    """longest sequence (prompt and completion) the position embedding covers"""
    activation: str = "relu"
    """the MLP's nonlinearity: 'relu' (lab11, lab19, hw4) or 'gelu' (exact erf form: lab21)"""

    def __post_init__(self):
        for name in ("vocab_size", "d", "n_layers", "n_heads", "max_len"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, minimum=1)
        if self.d % self.n_heads:
            raise ValueError(f"d ({self.d}) must be divisible by n_heads ({self.n_heads})")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d

    def to_dict(self) -> dict:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.act = ACTIVATIONS[cfg.activation]
        self.ln1 = nn.LayerNorm(cfg.d)
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d)
        self.proj = nn.Linear(cfg.d, cfg.d)
        self.ln2 = nn.LayerNorm(cfg.d)
        self.fc = nn.Linear(cfg.d, cfg.ff)
        self.out = nn.Linear(cfg.ff, cfg.d)

    def forward(self, x, mask, past=None):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        if mask is None:  # causal; a single new token may attend to the whole cache
            att = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1 and past is None)
        else:  # [T, S] causal with an offset, or a padding-aware [B, 1, T, S]
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, D))
        x = x + self.out(self.act(self.fc(self.ln2(x))))
        return x, (k, v)


class TinyLM(nn.Module):
    """A pre-LayerNorm decoder with learned positions and tied input/output embeddings."""

    def __init__(self, config: TinyLMConfig | None = None, **overrides):
        super().__init__()
        config = replace(config or TinyLMConfig(), **overrides) if overrides else (config or TinyLMConfig())
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.d)
        self.pos = nn.Embedding(config.max_len, config.d)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d)
        self.apply(self._init)
        for blk in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * config.n_layers))
            nn.init.normal_(blk.out.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                past: Past | None = None, return_past: bool = False, logits_from: int = 0):
        """tokens [B, T] long -> logits [B, T, V].

        attention_mask [B, T_past + T] bool marks real tokens (None: all real). With ``past`` the
        new tokens sit at columns T_past..T_past+T-1. ``return_past=True`` also returns the cache.
        """
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a long tensor [B, T], got "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
        B, T = tokens.shape
        t0 = 0 if past is None else past[0][0].shape[2]
        if t0 + T > self.config.max_len:
            raise ValueError(f"sequence length {t0 + T} exceeds max_len={self.config.max_len}")
        pos = torch.arange(t0, t0 + T)
        x = self.tok(tokens) + self.pos(pos)
        if attention_mask is None:
            # several new tokens after a cache: causal among themselves, all of the cache visible
            mask = torch.ones(T, t0 + T, dtype=torch.bool).tril(diagonal=t0) if (past is not None and T > 1) else None
        else:
            mask = _attention_mask(B, t0, T, attention_mask)
        new_past = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, mask, None if past is None else past[i])
            new_past.append(kv)
        if logits_from:
            x = x[:, logits_from:]
        logits = self.ln_f(x) @ self.tok.weight.t()
        return (logits, new_past) if return_past else logits


def _attention_mask(B: int, t0: int, T: int, attention_mask: torch.Tensor | None):
    """Boolean [B, 1, T, t0+T] mask: causal, padded keys hidden, every query sees itself."""
    S = t0 + T
    causal = torch.ones(T, S, dtype=torch.bool).tril(diagonal=t0)
    if attention_mask is None:
        return causal
    if attention_mask.shape != (B, S):
        raise ValueError(f"attention_mask must have shape {(B, S)}, got {tuple(attention_mask.shape)}")
    keys = attention_mask.bool()[:, None, None, :] & causal
    # a padded query would otherwise see no key at all (nan); let it see itself
    diag = torch.zeros(T, S, dtype=torch.bool)
    diag[torch.arange(T), torch.arange(t0, S)] = True
    return keys | diag
