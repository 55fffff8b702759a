"""The character model of :mod:`llmrl.hw4.charlm` behind the :class:`llmrl.backends.protocol.PolicyBackend` seam.

A :class:`llmrl.backends.tinylm_backend.TinyLMBackend` with the character codec: prompts are ``<bos>`` + text +
``<sep>`` left-padded to ``charlm.PROMPT_WIDTH``, completions end with ``<eos>`` and are cut to the
longest one; PAD, BOS and SEP are never sampled. The whole small model is trained (no adapter);
the reference policy is a frozen copy of the starting weights (a few hundred kilobytes, so a
second copy costs nothing here).
"""

from __future__ import annotations

import torch

from ..backends.protocol import Codec, PolicyBackend  # noqa: F401  (PolicyBackend: hw4's historical home)
from ..backends.registry import make_backend, register_backend  # noqa: F401  (make_backend: hw4's historical home)
from ..backends.tinylm_backend import TinyLMBackend
from ..lm.sampling import top_p_filter  # noqa: F401  (re-exported: hw4's tests and notebooks import it from here)
from ..lm.tinylm import TinyLM
from . import charlm
from .charlm import BOS, EOS, PAD, SEP


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A floating-point torch dtype from itself or its name ("float64", "bfloat16", ...)."""
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"dtype must name a floating-point torch dtype (e.g. 'float32', 'float64'), got {dtype!r}")
    return value


def _encode(prompts) -> torch.Tensor:
    return torch.tensor([charlm.encode_prompt(p, charlm.PROMPT_WIDTH) for p in prompts], dtype=torch.long)


def _decode(ids: torch.Tensor) -> list[str]:
    return [charlm.decode(row) for row in ids]


CHAR = Codec(prompt_len=charlm.PROMPT_WIDTH, eos=EOS, pad=PAD, encode=_encode, decode=_decode,
             max_new_tokens=charlm.MAX_LEN - charlm.PROMPT_WIDTH, banned=(PAD, BOS, SEP))


class CharBackend(TinyLMBackend):
    """PolicyBackend over the pretrained character TinyLM (CPU)."""

    name = "char"
    what = "character-model"

    def __init__(self, model: TinyLM | None = None, pretrain: charlm.PretrainConfig | None = None,
                 progress: bool = True, dtype: torch.dtype | str | None = None):
        if model is None:
            model = charlm.load_base_model(pretrain or charlm.DEFAULT_PRETRAIN, progress=progress)
        if not isinstance(model, TinyLM):
            raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
        if dtype is not None:  # e.g. "float64" for equivalence checks at double precision
            model = model.to(as_dtype(dtype))
        if model.config.vocab_size != charlm.VOCAB_SIZE:
            raise ValueError(f"model must have vocab_size={charlm.VOCAB_SIZE}, got {model.config.vocab_size}")
        super().__init__(model, CHAR, reference="copy")
        self.max_len = model.config.max_len

    def describe(self) -> str:
        return f"char TinyLM {self.model.num_parameters():,} parameters, vocab {len(charlm.VOCAB)}"


register_backend("char", CharBackend)  # the plug-in registers itself (llmrl.backends.registry)
