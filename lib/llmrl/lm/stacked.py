"""Seeds as a dimension: S TinyLMs of one configuration as one set of weights with a leading seed axis.

:class:`TinyLMStack` holds the weights of S TinyLMs (S = 1 for a single run) as tensors whose first
dimension is the seed, and runs the forward passes of the RL step on all seeds at once: one
batched matrix product per layer instead of S. Seed s's rows go through seed s's weights only,
and each batched product computes every seed's slice with the same kernel as a single seed's
(``torch.bmm`` / ``baddbmm``), so seed s of an S-seed stack gives the numbers of a one-seed stack.

The stacked tensors are the trained leaves; each TinyLM handed in keeps working as a TinyLM, its
parameters made views of its seed's slice (``TinyLM.forward``, evaluation and checkpoints read
the trained weights with no copy).

The passes (shapes: S seeds, B rows per seed, G rows per prompt, N = B / G prompts, P prompt
columns, R completion columns, V vocabulary, D width):

* :meth:`TinyLMStack.completion_logits`: the logits that score the completion columns of a
  rollout, [S*B, R, V]. A group's G rows share their prompt, so each group is packed into one
  sequence, the prompt once and then the G rows' completion tokens, with a block-causal mask
  (row g sees the prompt and its own earlier tokens): one pass, no copy of the prompt's keys.
  Without gradient the last layer goes on past its keys and values with the positions the head
  reads only (the same numbers: see ``keep`` in :meth:`TinyLMStack._attention`).
* :meth:`TinyLMStack.row_logits`: plain causal logits of whole rows, [S*B, T, V] (minibatches of
  shuffled rows, hw4's scorer, evaluation).
* :meth:`TinyLMStack.sample`: the decode loop, the same packed layout held in a key/value cache
  of fixed size (kept between calls); each seed draws its tokens from its own
  ``torch.Generator``, in the order a single run draws them (``torch.multinomial(p, 1)`` is
  ``argmax(p / Exp(1) noise)``, the noise drawn per seed with that seed's generator).

Why not ``torch.nn.functional.scaled_dot_product_attention`` and a plain ``softmax`` over the
vocabulary: on the CPU, softmax and log-softmax over a last dimension that is not a multiple of 16
(TinyLM's vocabulary has 15 tokens, its attention 7-12 keys) take a scalar path 10-40x slower than
the vectorised one, and the fused attention kernel costs several microseconds per (row, head) at
these sizes. So the vocabulary and the keys are padded to a multiple of 16 with columns that get
probability 0 (``-inf`` before the softmax), and attention is two batched products around it.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import torch
import torch.nn.functional as F

from .tinylm import TinyLM

PAD_TO = 16  # a softmax over a last dimension that is a multiple of this takes the vectorised kernel
# a matrix product of fewer rows than this may take another kernel (a matrix-vector one) that
# rounds differently: ``keep`` in :meth:`TinyLMStack._attention` leaves such products whole
KEEP_MIN_ROWS = 16
KEEP_CACHE_BYTES = 16 << 20  # decode buffers up to this size are kept between sample calls
NEG_INF = float("-inf")
_LAYER_KEYS = ("ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
               "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "out.weight", "out.bias")


def padded(n: int, to: int = PAD_TO) -> int:
    """``n`` rounded up to a multiple of ``to``."""
    return -(-n // to) * to


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.log_softmax(x, -1)``, through the vectorised kernel when the last dimension is
    small and not a multiple of 16 (padded with -inf columns, which get probability 0)."""
    n = x.shape[-1]
    if n % PAD_TO == 0 or n > 4 * PAD_TO:
        return torch.log_softmax(x, -1)
    return torch.log_softmax(F.pad(x, (0, padded(n) - n), value=NEG_INF), -1)[..., :n]


def softmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(x, -1)`` through the vectorised kernel (see :func:`log_softmax`)."""
    n = x.shape[-1]
    if n % PAD_TO == 0 or n > 4 * PAD_TO:
        return torch.softmax(x, -1)
    return torch.softmax(F.pad(x, (0, padded(n) - n), value=NEG_INF), -1)[..., :n]


# ----------------------------------------------------------------------------- masks (additive)

@lru_cache(maxsize=64)
def _causal_bias(L: int, Lk: int) -> torch.Tensor:
    """[L, Lk]: query i sees keys 0..i; keys L..Lk-1 are padding."""
    keep = torch.ones(L, Lk, dtype=torch.bool).tril()
    keep[:, L:] = False
    return torch.zeros(L, Lk).masked_fill_(~keep, NEG_INF)


@lru_cache(maxsize=64)
def _packed_bias(P: int, G: int, R: int, Lk: int) -> torch.Tensor:
    """[P + G*R, Lk] for a group packed as the prompt (P tokens) then G rows of R tokens each:
    a prompt token sees the prompt causally; token u of row g sees the prompt and tokens 0..u of
    row g; keys past P + G*R are padding."""
    L = P + G * R
    keep = torch.zeros(L, Lk, dtype=torch.bool)
    keep[:P, :P] = torch.ones(P, P, dtype=torch.bool).tril()
    keep[P:, :P] = True
    own = torch.ones(R, R, dtype=torch.bool).tril()
    for g in range(G):
        s = P + g * R
        keep[s:s + R, s:s + R] = own
    return torch.zeros(L, Lk).masked_fill_(~keep, NEG_INF)


@lru_cache(maxsize=256)
def _decode_bias(P: int, G: int, W: int, t: int, Lk: int) -> torch.Tensor:
    """[G, Lk] for decode step ``t`` in a cache laid out as the prompt then G blocks of W slots:
    row g's new token sees the prompt and slots 0..t of its own block."""
    keep = torch.zeros(G, Lk, dtype=torch.bool)
    keep[:, :P] = True
    for g in range(G):
        keep[g, P + g * W:P + g * W + t + 1] = True
    return torch.zeros(G, Lk).masked_fill_(~keep, NEG_INF)


@lru_cache(maxsize=64)
def _packed_positions(P: int, G: int, R: int) -> torch.Tensor:
    return torch.cat([torch.arange(P), torch.arange(P, P + R).repeat(G)])


@lru_cache(maxsize=64)
def _row_columns(G: int, R: int) -> torch.Tensor:
    """[G * (1 + R)]: for row g and column j, which output of a packed group (the prompt's last
    position, then the G rows' R tokens) scores it."""
    j = torch.arange(R + 1)
    return torch.cat([torch.where(j == 0, 0, 1 + g * R + j - 1) for g in range(G)])


def canonical_rows(completions: torch.Tensor, group_size: int) -> torch.Tensor | None:
    """[B] index: for each row, the first row of its group (G consecutive rows sharing a prompt)
    with the same completion tokens ([B, R]); None when every row is unique.

    A group is packed into one sequence, so two rows with the same tokens sit at different key
    positions and the softmax sums their terms in another order: their log-probs can differ in
    the last bit. Scores computed without gradient are copied from this row so that the same
    completion always gets the same numbers (a group of equal completions then has rewards, KL
    penalties and advantages exactly equal, as with one sequence per row)."""
    B, R = completions.shape
    G = group_size
    if G < 2:
        return None
    c = completions.view(B // G, G, R)
    first = (c[:, :, None] == c[:, None]).all(-1).to(torch.uint8).argmax(-1)  # [N, G]: the first equal row
    own = torch.arange(G)
    if bool((first == own).all()):
        return None
    return (first + (torch.arange(B // G) * G)[:, None]).view(B)


# ----------------------------------------------------------------------------- the stack

class TinyLMStack:
    """The weights of S TinyLMs of one configuration, stacked along a leading seed dimension.

    ``TinyLMStack(models)`` copies the models' weights into the stack and makes every model's
    parameters views of its seed's slice (a model keeps working as a TinyLM and always shows the
    trained weights). ``trainable=False`` gives a frozen stack (a reference or a teacher).

    Weights: ``weights[name]`` [S, *shape of the TinyLM parameter ``name``]; biases and LayerNorm
    parameters are stored as [S, 1, n] (broadcast over rows), the leaves an optimizer steps.
    """

    def __init__(self, models: Sequence[TinyLM], trainable: bool = True):
        models = list(models)
        if not models:
            raise ValueError("a TinyLMStack needs at least one model")
        for m in models:
            if not isinstance(m, TinyLM):
                raise TypeError(f"every model must be a TinyLM, got {type(m).__name__}")
        if len({id(m) for m in models}) != len(models):
            raise ValueError("the same TinyLM appears twice: give each seed its own model (copy.deepcopy)")
        cfg = models[0].config
        for i, m in enumerate(models[1:], 1):
            if m.config != cfg:
                raise ValueError(f"model {i} has configuration {m.config}, model 0 has {cfg}: a stack "
                                 "holds models of one configuration")
        self.config = cfg
        self.models = models
        self.n_seeds = len(models)
        self.trainable = trainable
        named = [dict(m.named_parameters()) for m in models]
        self.names = list(named[0])
        self.weights: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name in self.names:
                w = torch.stack([p[name].detach() for p in named]).clone()
                if w.ndim == 2:  # a bias or a LayerNorm parameter: [S, 1, n] broadcasts over rows
                    w = w.unsqueeze(1).contiguous()
                w.requires_grad_(trainable)
                self.weights[name] = w
            for s, p in enumerate(named):
                for name, param in p.items():
                    param.data = self.weights[name][s].view(param.shape)
        W = self.weights
        self.layers = [tuple(W[f"blocks.{i}.{k}"] for k in _LAYER_KEYS) for i in range(cfg.n_layers)]
        self.tok, self.pos, self.ln_f = W["tok.weight"], W["pos.weight"], (W["ln_f.weight"], W["ln_f.bias"])
        V = cfg.vocab_size
        self.vocab_padded = padded(V)
        self._vocab_bias = torch.zeros(1, 1, self.vocab_padded, dtype=self.tok.dtype)  # float64 models too
        self._vocab_bias[..., V:] = NEG_INF

    def parameters(self) -> list[torch.Tensor]:
        return [self.weights[n] for n in self.names]

    @torch.no_grad()
    def release(self) -> None:
        """Give every model its own copy of its current weights (they no longer follow the stack):
        after training, so that saving one seed's model does not write the whole stack."""
        for m in self.models:
            for p in m.parameters():
                p.data = p.data.clone()

    def __len__(self) -> int:
        return self.n_seeds

    # -- the layers ------------------------------------------------------------------------------
    def _prepared(self, fold: bool = False):
        """The weights as the passes use them: per layer (ln1, Wqkv^T, bqkv, Wproj^T, bproj, ln2,
        Wfc^T, bfc, Wout^T, bout) and the head (ln_f, embedding^T padded to V16, vocabulary bias);
        ln* = (weight, bias) of the LayerNorm's affine part. ``fold=True`` (sampling, no gradient)
        folds each affine part into the matrix after it (``(LN(x) w + b) W^T = LN(x) (W w)^T + W b``),
        which saves one elementwise pass per LayerNorm in every decode step. A frozen stack keeps
        its folded weights until a weight changes."""
        if fold and not self.trainable:
            version = tuple(w._version for w in self.weights.values())
            if getattr(self, "_folded", (None,))[0] != version:
                with torch.no_grad():
                    self._folded = (version, self._prepare(True))
            return self._folded[1]
        return self._prepare(fold)

    def _prepare(self, fold: bool):
        V, Vp = self.config.vocab_size, self.vocab_padded
        tok = self.tok if Vp == V else F.pad(self.tok, (0, 0, 0, Vp - V))
        layers = []
        for w1, b1, wqkv, bqkv, wp, bp, w2, b2, wfc, bfc, wo, bo in self.layers:
            if fold:
                layers.append((None, (wqkv * w1).transpose(1, 2), torch.baddbmm(bqkv, b1, wqkv.transpose(1, 2)),
                               wp.transpose(1, 2), bp, None, (wfc * w2).transpose(1, 2),
                               torch.baddbmm(bfc, b2, wfc.transpose(1, 2)), wo.transpose(1, 2), bo))
            else:
                layers.append(((w1, b1), wqkv.transpose(1, 2), bqkv, wp.transpose(1, 2), bp, (w2, b2),
                               wfc.transpose(1, 2), bfc, wo.transpose(1, 2), bo))
        wf, bf = self.ln_f
        if fold:
            head = (None, (tok * wf).transpose(1, 2), torch.baddbmm(self._vocab_bias, bf, tok.transpose(1, 2)))
        else:
            head = ((wf, bf), tok.transpose(1, 2), self._vocab_bias)
        return layers, head

    @staticmethod
    def _norm(x: torch.Tensor, affine) -> torch.Tensor:
        h = F.layer_norm(x, (x.shape[-1],))
        return h if affine is None else torch.addcmul(affine[1], h, affine[0])

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor | int) -> torch.Tensor:
        """tokens [S, M, L] long, positions [L] (or one position for every token) -> x [S, M*L, D]."""
        S, M, L = tokens.shape
        V, D = self.config.vocab_size, self.config.d
        if S > 1:
            tokens = tokens + (torch.arange(S) * V).view(S, 1, 1)
        x = F.embedding(tokens, self.tok.view(S * V, D))
        if isinstance(positions, int):
            x = x + self.pos[:, positions:positions + 1].unsqueeze(1)
        else:
            x = x + self.pos.index_select(1, positions).unsqueeze(1)
        return x.view(S, M * L, D)

    def _attention(self, x, layer, bias, M: int, L: int, cache=None, slots=None, keep: int | None = None):
        """One block on x [S, M*L, D]: M sequences of L new tokens. ``layer``: one entry of
        :meth:`_prepared`. ``bias`` [L, Lk] is the additive mask over Lk keys (a multiple of 16);
        without ``cache`` the keys are the new tokens themselves (padded to Lk), with it a
        :meth:`_decode_caches` entry (a [2, S*M, H, Lk, dh] key/value buffer and its key and value
        views) into whose ``slots`` (an index along Lk) the new keys and values are written first.

        ``keep``: only the last ``keep`` tokens of each sequence go on past the keys and values
        (x [S, M*keep, D] out): in the last layer of a pass whose head reads no earlier position,
        the other tokens are needed as keys and values only. Each row's numbers are those of the
        whole block's (a row of a matrix product does not depend on the other rows, once there are
        :data:`KEEP_MIN_ROWS` rows); with fewer kept rows the block goes on whole, so a caller
        takes the last ``keep`` positions of what comes out either way."""
        ln1, wqkv, bqkv, wp, bp, ln2, wfc, bfc, wo, bo = layer
        S, _, D = x.shape
        bias = bias if bias.dtype == x.dtype else bias.to(x.dtype)  # the masks are float32; a float64 model
        H = self.config.n_heads
        dh = D // H
        Lk = bias.shape[-1]
        qkv = torch.baddbmm(bqkv, self._norm(x, ln1), wqkv).view(S * M, L, 3, H, dh).permute(2, 0, 3, 1, 4)
        if cache is None:
            kv = F.pad(qkv, (0, 0, 0, Lk - L)) if Lk > L else qkv.contiguous()
            q, k, v = kv.view(3, S * M * H, Lk, dh).unbind(0)  # its backward stacks the three gradients
            q, kT = q[:, :L], k.transpose(1, 2)
        else:
            buf, kT, v = cache
            buf[:, :, :, slots] = qkv[1:]
            q = qkv[0].reshape(S * M * H, L, dh)
        att = torch.baddbmm(bias, q, kT, alpha=1.0 / math.sqrt(dh)).softmax(-1)
        y = torch.bmm(att, v).view(S, M, H, L, dh).transpose(2, 3)
        if keep is not None and keep < L and M * keep >= KEEP_MIN_ROWS:
            y, x, L = y[:, :, L - keep:], x.view(S, M, L, D)[:, :, L - keep:].reshape(S, M * keep, D), keep
        y = y.reshape(S, M * L, D)
        x = x + torch.baddbmm(bp, y, wp)
        f = torch.baddbmm(bfc, self._norm(x, ln2), wfc)
        f = f.relu_() if self.config.activation == "relu" else F.gelu(f)
        return x + torch.baddbmm(bo, f, wo)

    def _head(self, x: torch.Tensor, head, vocab_bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [S, n, D] -> logits [S, n, V16] over the vocabulary padded to a multiple of 16 (the
        padding columns are -inf). ``head``: from :meth:`_prepared`; ``vocab_bias`` [1, 1, V16] is
        added (a mask of banned tokens)."""
        ln, tokT, bias = head
        if vocab_bias is not None:
            bias = bias + vocab_bias
        return torch.baddbmm(bias, self._norm(x, ln), tokT)

    def _decode_caches(self, shape: tuple) -> list[torch.Tensor]:
        """Per layer, a key/value buffer of ``shape`` [2, S*M, H, Lk, dh] for :meth:`sample` with
        its keys as [S*M*H, dh, Lk] and values as [S*M*H, Lk, dh] (views), kept between calls: the
        zeroing and fresh pages of a new buffer cost more than a small decode step. What an earlier
        call left in it is never read: every slot a row's query sees is written first in this call,
        and the other slots are masked to probability 0 (``-inf``; they hold finite values, zeros or
        earlier keys, so ``0 * value`` stays 0; :meth:`sample` drops the buffers if its logits
        come out nan, so that keys of weights gone bad are never kept)."""
        key = (shape, self.tok.dtype)
        kept = self.__dict__.setdefault("_caches", {})
        if key in kept:
            return kept[key]
        bufs = [torch.zeros(shape, dtype=self.tok.dtype) for _ in self.layers]
        n, Lk, dh = shape[1] * shape[2], shape[3], shape[4]
        views = [(b, b[0].view(n, Lk, dh).transpose(1, 2), b[1].view(n, Lk, dh)) for b in bufs]
        if sum(b.numel() * b.element_size() for b in bufs) <= KEEP_CACHE_BYTES:  # a big evaluation's are not kept
            if len(kept) >= 4:  # a few shapes (training, evaluation) at a time
                kept.pop(next(iter(kept)))
            kept[key] = views
        return views

    def _seeds_of(self, rows: int, what: str) -> int:
        """How many seeds' worth of rows a batch holds (a frozen one-seed stack serves any number)."""
        if self.n_seeds == 1:
            return 1
        if rows % self.n_seeds:
            raise ValueError(f"{what}: {rows} rows is not a multiple of the {self.n_seeds} seeds (rows are seed-major)")
        return self.n_seeds

    def _check_len(self, n: int) -> None:
        if n > self.config.max_len:
            raise ValueError(f"sequence length {n} exceeds max_len={self.config.max_len}")

    # -- scoring ---------------------------------------------------------------------------------
    def completion_logits(self, input_ids: torch.Tensor, prompt_len: int, group_size: int = 1,
                          n_cols: int | None = None) -> torch.Tensor:
        """[S*B, R, V16] logits scoring the completion columns ``prompt_len``.. of ``input_ids``
        [S*B, P+R] (rows seed-major, then grouped by prompt); column j scores token P + j.

        ``n_cols`` < R: only the first ``n_cols`` columns are computed (the rest hold zeros), for
        when no row has a token to score beyond them. Gradients flow when enabled."""
        P, G = prompt_len, group_size
        BT, T = input_ids.shape
        R = T - P
        n_cols = R if n_cols is None else n_cols
        if R < 1 or not 1 <= n_cols <= R:
            raise ValueError(f"input_ids [B, T] = {tuple(input_ids.shape)} has no completion columns after "
                             f"prompt_len={P} (n_cols={n_cols})")
        S = self._seeds_of(BT, "input_ids")
        if BT % (S * G):
            raise ValueError(f"{BT} rows is not a multiple of seeds x group_size = {S} x {G}")
        N, Rin = BT // (S * G), n_cols - 1  # completion tokens fed in per row
        self._check_len(P + Rin)
        ids = input_ids.view(S, N, G, T)
        tokens = ids[:, :, 0, :P]
        if Rin:
            tokens = torch.cat([tokens, ids[:, :, :, P:P + Rin].reshape(S, N, G * Rin)], 2)
        L = P + G * Rin
        bias = _packed_bias(P, G, Rin, padded(L))
        grad = torch.is_grad_enabled()
        layers, head = self._prepared(fold=not grad)
        x = self._embed(tokens, _packed_positions(P, G, Rin))
        # without gradient the last layer goes on with the positions the head reads only (the prompt's
        # last and the completions'); with it every position, so that the weight gradients are sums
        # over the same rows in the same order whatever the pass computes
        n_out = 1 + G * Rin
        for i, layer in enumerate(layers):
            x = self._attention(x, layer, bias, N, L, keep=n_out if not grad and i == len(layers) - 1 else None)
        Vp = self.vocab_padded
        out = self._head(x.view(S, N, -1, x.shape[-1])[:, :, -n_out:].reshape(S, N * n_out, -1), head)
        out = out.view(S, N, n_out, Vp)
        # row g's column 0 is scored by the prompt's last position (shared), column j > 0 by its own token j - 1
        logits = out.index_select(2, _row_columns(G, Rin)).reshape(BT, n_cols, Vp)
        if not torch.is_grad_enabled():
            same = canonical_rows(input_ids[:, P:], G)
            if same is not None:
                logits = logits.index_select(0, same)
        if n_cols < R:
            logits = F.pad(logits, (0, 0, 0, R - n_cols))
        return logits

    def row_logits(self, input_ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """[S*B, T - start, V16]: causal logits of every position from ``start`` on, each row on its own."""
        BT, T = input_ids.shape
        self._check_len(T)
        S = self._seeds_of(BT, "input_ids")
        M = BT // S
        grad = torch.is_grad_enabled()
        layers, head = self._prepared(fold=not grad)
        x = self._embed(input_ids.view(S, M, T), torch.arange(T))
        bias = _causal_bias(T, padded(T))
        for i, layer in enumerate(layers):  # without gradient, the last layer on the positions read only
            x = self._attention(x, layer, bias, M, T, keep=T - start if not grad and i == len(layers) - 1 else None)
        x = x.view(S, M, -1, x.shape[-1])[:, :, -(T - start):].reshape(S, M * (T - start), -1)
        return self._head(x, head).view(BT, T - start, self.vocab_padded)

    # -- sampling --------------------------------------------------------------------------------
    @torch.no_grad()
    def _streams(self, n_prompts: int, generators) -> int:
        """The number of seeds' generators, checked against the prompts and the stack's seeds."""
        n = len(generators)
        if n < 1 or n_prompts % n:
            raise ValueError(f"{n_prompts} prompts cannot be split among {n} seeds' generators")
        if self.n_seeds > 1 and n != self.n_seeds:
            raise ValueError(f"this stack holds {self.n_seeds} seeds but {n} generators were given")
        return n

    def _prefill(self, prompts: torch.Tensor, G: int, Lc: int, layers, head, caches, banned_bias) -> torch.Tensor:
        """The prompts [S, N, P] through every layer, causal over their own P slots of the caches;
        returns each prompt's last logits once for each of the G rows of its group, [S*N*G, Vp]."""
        S, N, P = prompts.shape
        x = self._embed(prompts, torch.arange(P))
        bias = _causal_bias(P, Lc)
        for i, (layer, cache) in enumerate(zip(layers, caches)):  # the last layer: the last position only
            x = self._attention(x, layer, bias, N, P, cache, slice(0, P), keep=1 if i == len(layers) - 1 else None)
        last = self._head(x.view(S, N, -1, self.config.d)[:, :, -1], head, banned_bias)
        return last.repeat_interleave(G, 1).view(S * N * G, self.vocab_padded)

    def sample(self, prompt_tokens: torch.Tensor, group_size: int, max_new_tokens: int, temperature: float,
               generators: Sequence[torch.Generator], *, eos: int, pad: int, top_p: float = 1.0,
               banned: torch.Tensor | None = None, sampler=None, cap_with_eos: bool = False,
               logprobs: bool = True):
        """The decode loop for S seeds: ``group_size`` completions of at most ``max_new_tokens``
        tokens for each of the prompts ``prompt_tokens`` [S*N, P] (seed-major).

        Each seed's tokens come from ``generators[s]`` (one per seed of the batch; a frozen
        one-seed stack may serve several), drawn exactly as ``llmrl.lm.sampling.sample_completions``
        draws them for a single seed. ``banned`` [V] bool: never sampled. ``sampler(logits [B, V],
        temperature, generator) -> [B]`` replaces the built-in draw (per seed, on its rows).
        ``cap_with_eos``: one more column in which rows still open at the cap get an ``eos`` the
        policy did not choose (not in the mask).

        Returns (completion [S*B, W] long, chosen [S*B, W] bool, logps [S*B, W] (the chosen tokens'
        log-probs under the untempered policy, 0 where not chosen) or None), W = max_new_tokens
        (+ 1 with ``cap_with_eos``); rows seed-major, then grouped by prompt.
        """
        NS, P = prompt_tokens.shape
        n_streams = self._streams(NS, generators)
        G, Wi = group_size, max_new_tokens - 1  # Wi: tokens fed back in per row
        self._check_len(P + max_new_tokens)
        S = self.n_seeds
        N = NS // S  # prompts per weight seed (a one-seed stack serving several streams takes them all)
        B = NS * G // n_streams  # rows per stream
        V, Vp, D, H = self.config.vocab_size, self.vocab_padded, self.config.d, self.config.n_heads
        Lc = padded(P + G * Wi)
        caches = self._decode_caches((2, S * N, H, Lc, D // H))
        layers, head = self._prepared(fold=True)
        banned_bias = None if banned is None else \
            torch.zeros(1, 1, Vp, dtype=self.tok.dtype).masked_fill_(F.pad(banned, (0, Vp - V)).view(1, 1, Vp), NEG_INF)
        last = self._prefill(prompt_tokens.view(S, N, P), G, Lc, layers, head, caches, banned_bias)
        BT = NS * G
        W = max_new_tokens + int(cap_with_eos)
        toks, opens, lps = [], [], []  # per decode step: the tokens, which rows were open, their log-probs
        done = torch.zeros(BT, dtype=torch.bool)
        draw = _NoiseDraws(generators, B, V, max_new_tokens) if (temperature > 0 and sampler is None) else None
        for t in range(max_new_tokens):
            if sampler is not None:  # a stream already done draws nothing more (as it would alone)
                finished = done.view(n_streams, B).all(1).tolist()
                tok = torch.cat([torch.full((B,), pad, dtype=torch.long) if finished[i] else
                                 _call_sampler(sampler, last[i * B:(i + 1) * B, :V], temperature, g, B)
                                 for i, g in enumerate(generators)])
            elif temperature == 0:
                tok = last.argmax(-1)
            else:
                tok = (_tempered(last, temperature, top_p, V) / draw.noise(t)).argmax(-1)
            if logprobs:  # every row's; the rows already done are zeroed at the end
                lps.append(torch.log_softmax(last, -1).gather(1, tok[:, None]))
            opens.append(~done)
            toks.append(tok.masked_fill_(done, pad))
            done |= tok == eos
            if t + 1 == max_new_tokens or bool(done.all()):
                break
            # feed the new token of every row: slot t of its row's block in the cache
            x = self._embed(tok.view(S, N, G), P + t)
            bias = _decode_bias(P, G, Wi, t, Lc)
            for layer, cache in zip(layers, caches):
                x = self._attention(x, layer, bias, N, G, cache, slice(P + t, P + G * Wi, Wi))
            last = self._head(x, head, banned_bias).view(BT, Vp)
        if bool(torch.isnan(last).any()):  # weights gone bad: keep no buffer that may hold their keys
            self._caches.clear()
        n = len(toks)  # the columns drawn; the rest (every row done early, the EOS column) are padding
        out, chosen, logps = _columns(toks, opens, lps if logprobs else None, W, pad)
        if draw is not None:
            # the decode steps each seed's stream took, the steps with a row of it still open: a run
            # of that seed alone stops once its own rows are done, so its generator must move on by
            # that many steps, not by the stack's
            draw.finish(chosen[:, :n].reshape(n_streams, B, n).any(1).sum(1).tolist())
        if logprobs:
            same = canonical_rows(out, G)
            if same is not None:
                logps = logps.index_select(0, same)
        if cap_with_eos:
            out[~done, W - 1] = eos
        return out, chosen, logps


def _tempered(logits: torch.Tensor, temperature: float, top_p: float, V: int) -> torch.Tensor:
    """The distribution the decode loop draws from: softmax(logits / temperature), top-p filtered
    below 1, over the real vocabulary (the first V of the padded columns)."""
    z = logits if temperature == 1.0 else logits / temperature
    if top_p < 1.0:
        from .sampling import top_p_filter
        return torch.softmax(top_p_filter(z[:, :V], top_p), -1)
    return z.softmax(-1)[:, :V]


def _columns(toks: list, opens: list, lps: list | None, W: int, pad: int):
    """The decode steps' tokens, open flags and log-probs (one [BT] or [BT, 1] tensor a step) as
    [BT, W] tensors: the columns past the last step drawn are padding, not chosen, log-prob 0; the
    log-probs (None: not asked for) in the default dtype (float32) whatever the model's and 0 where
    not chosen."""
    n = len(toks)
    out, chosen = torch.stack(toks, 1), torch.stack(opens, 1)
    if n < W:
        out = torch.cat([out, torch.full((out.shape[0], W - n), pad)], 1)
        chosen = torch.cat([chosen, chosen.new_zeros(chosen.shape[0], W - n)], 1)
    if lps is None:
        return out, chosen, None
    logps = torch.cat(lps, 1).to(torch.get_default_dtype()).masked_fill_(~chosen[:, :n], 0.0)
    return out, chosen, (logps if n == W else F.pad(logps, (0, W - n)))


def _call_sampler(sampler, logits, temperature, generator, B):
    tok = sampler(logits, temperature, generator)
    if not isinstance(tok, torch.Tensor) or tok.shape != (B,):
        raise ValueError(f"sampler must return a [B] tensor of token ids, got {tuple(getattr(tok, 'shape', ()))} "
                         f"for B = {B}")
    return tok.long()


class _NoiseDraws:
    """The Exp(1) noise of ``torch.multinomial(p, 1, generator=g)`` (which is ``argmax(p / noise)``
    with noise ``torch.empty_like(p).exponential_(generator=g)``) for every step of a decode loop,
    drawn up front with one call per seed. :meth:`finish` leaves each generator where a loop of that
    seed alone leaves it: moved on by the steps until its own rows were done (a stack's loop runs
    until every seed's rows are done, so a seed done earlier would otherwise draw more than alone)."""

    def __init__(self, generators, B: int, V: int, steps: int):
        self.generators, self.shape = list(generators), (B, V)
        self.states = [g.get_state() for g in self.generators]
        self.steps = steps
        self.draws = [torch.empty(steps, B, V).exponential_(generator=g) for g in self.generators]
        self._cat = None

    def noise(self, t: int) -> torch.Tensor:
        if len(self.draws) == 1:
            return self.draws[0][t]
        if self._cat is None:
            self._cat = torch.stack(self.draws, 1)  # [steps, S, B, V]
        return self._cat[t].reshape(-1, self.shape[1])

    def finish(self, used: Sequence[int]) -> None:
        """``used[s]``: the decode steps seed ``s`` took (its rows all done, or the cap)."""
        for g, state, n in zip(self.generators, self.states, used):
            if n < self.steps:
                g.set_state(state)
                torch.empty(n, *self.shape).exponential_(generator=g)
