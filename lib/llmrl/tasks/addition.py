"""The addition task: "37+48=" -> "85", character-level.

Vocabulary (15 tokens): the digits 0-9, '+', '=', and three specials: PAD (left padding of the
prompt, right padding of the response), BOS (starts every prompt) and EOS (ends every response).
A prompt is BOS + "a+b=", left-padded to ``PROMPT_LEN`` = 7 columns, so the response always starts
at column 7. A response holds at most ``MAX_ANSWER_CHARS`` = 4 characters and then EOS
(``RESPONSE_LEN`` = 5 columns), so a whole sequence is ``SEQ_LEN`` = 12 columns.

Problems come in difficulty buckets (``BUCKETS``). The SFT data mix (``SFT_MIX``) is mostly
2-digit + 2-digit sums, rarely 1-digit + 1-digit, and never 3-digit + 1-digit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from ..utils import check_int, make_generator

DIGITS = "0123456789"
VOCAB = tuple(DIGITS) + ("+", "=", "<pad>", "<bos>", "<eos>")
STOI = {s: i for i, s in enumerate(VOCAB)}
PLUS, EQUALS, PAD, BOS, EOS = (STOI[s] for s in ("+", "=", "<pad>", "<bos>", "<eos>"))
VOCAB_SIZE = len(VOCAB)  # 15
PROMPT_LEN = 7
MAX_ANSWER_CHARS = 4
RESPONSE_LEN = MAX_ANSWER_CHARS + 1
SEQ_LEN = PROMPT_LEN + RESPONSE_LEN
# how a non-digit token prints inside a decoded response
_SHOW = {PLUS: "+", EQUALS: "=", PAD: "_", BOS: "^"}

# name -> (range of a, range of b, condition on (a, b)); all ranges inclusive
BUCKETS: tuple[str, ...] = ("1d+1d", "2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100", "3d+1d")
BUCKET_INFO = {
    "1d+1d": "one digit plus one digit, e.g. 3+4",
    "2d+2d_nocarry": "two digits each, sum < 100, no carry in the units (e.g. 32+41)",
    "2d+2d_carry": "two digits each, sum < 100, a carry in the units (e.g. 37+48)",
    "2d+2d_ge100": "two digits each, sum >= 100 (e.g. 67+58)",
    "3d+1d": "three digits plus one digit (e.g. 507+8), never seen in SFT",
}
# the RL prompt distribution of the labs: every 2-digit + 2-digit problem, uniformly
TWO_DIGIT = ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")
SFT_MIX: Mapping[str, float] = {"1d+1d": 0.002, "2d+2d": 0.998}


def _all_pairs(bucket: str) -> torch.Tensor:
    """Every (a, b) pair of a bucket, [N, 2] long (each bucket has at most 8,100 pairs)."""
    r1, r2, r3 = torch.arange(0, 10), torch.arange(10, 100), torch.arange(100, 1000)
    spec = {
        "1d+1d": (r1, r1, None),
        "2d+2d": (r2, r2, None),
        "2d+2d_lt100": (r2, r2, lambda a, b: a + b < 100),
        "2d+2d_nocarry": (r2, r2, lambda a, b: (a + b < 100) & (a % 10 + b % 10 < 10)),
        "2d+2d_carry": (r2, r2, lambda a, b: (a + b < 100) & (a % 10 + b % 10 >= 10)),
        "2d+2d_ge100": (r2, r2, lambda a, b: a + b >= 100),
        "3d+1d": (r3, r1, None),
    }
    if bucket not in spec:
        raise ValueError(f"unknown bucket {bucket!r}; known: {sorted(spec)}")
    ra, rb, cond = spec[bucket]
    a, b = torch.cartesian_prod(ra, rb).unbind(1)
    if cond is not None:
        keep = cond(a, b)
        a, b = a[keep], b[keep]
    return torch.stack([a, b], 1)


_PAIRS: dict[str, torch.Tensor] = {}


def bucket_pairs(bucket: str) -> torch.Tensor:
    if bucket not in _PAIRS:
        _PAIRS[bucket] = _all_pairs(bucket)
    return _PAIRS[bucket]


def bucket_of(a: int, b: int) -> str:
    """The finest bucket a problem belongs to (or 'other')."""
    for name in BUCKETS:
        pairs = bucket_pairs(name)
        if bool(((pairs[:, 0] == a) & (pairs[:, 1] == b)).any()):
            return name
    return "other"


@dataclass
class Problems:
    """A batch of problems a + b. ``a``, ``b``: [N] long. ``bucket``: [N] long index into ``names``."""

    a: torch.Tensor
    b: torch.Tensor
    bucket: torch.Tensor
    names: tuple[str, ...] = BUCKETS

    def __post_init__(self):
        for name in ("a", "b", "bucket"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.ndim != 1 or t.dtype != torch.long:
                raise ValueError(f"Problems.{name} must be a 1-D long tensor")
        if not (len(self.a) == len(self.b) == len(self.bucket)):
            raise ValueError("Problems.a, .b and .bucket must have the same length")
        if bool((self.a < 0).any() | (self.b < 0).any() | (self.a + self.b > 9999).any()):
            raise ValueError("Problems need 0 <= a, b and a + b <= 9999 (answers have at most 4 digits)")

    def __len__(self) -> int:
        return len(self.a)

    @property
    def answers(self) -> list[int]:
        return (self.a + self.b).tolist()

    def __getitem__(self, idx) -> "Problems":
        idx = torch.as_tensor(idx) if not isinstance(idx, slice) else idx
        a, b, c = self.a[idx], self.b[idx], self.bucket[idx]
        if a.ndim == 0:
            a, b, c = a[None], b[None], c[None]
        return Problems(a, b, c, self.names)

    def repeat(self, g: int) -> "Problems":
        """Each problem ``g`` times in a row (the layout of a group of G samples per prompt)."""
        check_int("g", g, minimum=1)
        return Problems(self.a.repeat_interleave(g), self.b.repeat_interleave(g),
                        self.bucket.repeat_interleave(g), self.names)

    def texts(self) -> list[str]:
        return [f"{a}+{b}=" for a, b in zip(self.a.tolist(), self.b.tolist())]

    def prompt_tokens(self) -> torch.Tensor:
        """[N, PROMPT_LEN] long: BOS + "a+b=", left-padded with PAD."""
        return encode_prompts(self.texts())

    @staticmethod
    def from_pairs(pairs: Sequence[tuple[int, int]]) -> "Problems":
        if len(pairs) == 0:
            raise ValueError("pairs must not be empty")
        t = torch.tensor([list(p) for p in pairs], dtype=torch.long)
        buckets = [bucket_of(int(a), int(b)) for a, b in t.tolist()]
        names = BUCKETS + (("other",) if "other" in buckets else ())
        idx = torch.tensor([names.index(n) for n in buckets], dtype=torch.long)
        return Problems(t[:, 0], t[:, 1], idx, names)


def encode_prompts(texts: Sequence[str]) -> torch.Tensor:
    """["37+48=", ...] -> [N, PROMPT_LEN] long, left-padded."""
    out = torch.full((len(texts), PROMPT_LEN), PAD, dtype=torch.long)
    for i, text in enumerate(texts):
        if len(text) > PROMPT_LEN - 1:
            raise ValueError(f"prompt {text!r} is longer than {PROMPT_LEN - 1} characters")
        try:
            ids = [BOS] + [STOI[ch] for ch in text]
        except KeyError as e:
            raise ValueError(f"prompt {text!r} has a character outside the vocabulary: {e}") from None
        out[i, PROMPT_LEN - len(ids):] = torch.tensor(ids)
    return out


def encode_response(text: str) -> list[int]:
    """"85" -> the response ids, EOS-terminated, right-padded to RESPONSE_LEN."""
    if len(text) > MAX_ANSWER_CHARS or any(ch not in DIGITS for ch in text):
        raise ValueError(f"response {text!r} must be at most {MAX_ANSWER_CHARS} digits")
    ids = [STOI[ch] for ch in text] + [EOS]
    return ids + [PAD] * (RESPONSE_LEN - len(ids))


def _render(row: list[int], skip: tuple[int, ...]) -> str:
    """Token ids -> text, cut at the first EOS; ids in ``skip`` vanish, other specials show as _ ^."""
    chars = []
    for t in row:
        if t == EOS:
            break
        if t not in skip:
            chars.append(_SHOW.get(t, VOCAB[t]))
    return "".join(chars)


def decode_responses(tokens: torch.Tensor) -> list[str]:
    """[N, R] response ids -> strings, cut at the first EOS; a sampled PAD or BOS shows as _ or ^."""
    return [_render(row, ()) for row in tokens.tolist()]


def decode(tokens: torch.Tensor) -> list[str]:
    """Whole sequences [N, T] -> readable strings without the prompt's padding ("37+48=85")."""
    return [_render(row, (PAD, BOS)) for row in tokens.tolist()]


def sample_problems(n: int, buckets: Sequence[str] | Mapping[str, float] = TWO_DIGIT,
                    generator: torch.Generator | int | None = None) -> Problems:
    """``n`` problems. ``buckets``: names (uniform over their union of pairs) or {name: weight}.

    With a list, every pair of the union is equally likely (the natural distribution of
    "a random 2-digit + 2-digit problem"); with weights, a bucket is drawn first, then a pair.
    """
    check_int("n", n, minimum=1)
    g = make_generator(generator)
    if isinstance(buckets, str):
        buckets = (buckets,)
    if isinstance(buckets, Mapping):
        names = list(buckets)
        w = torch.tensor([float(buckets[k]) for k in names])
        if bool((w < 0).any()) or float(w.sum()) <= 0:
            raise ValueError(f"bucket weights must be >= 0 and not all zero, got {dict(buckets)}")
        which = torch.multinomial(w / w.sum(), n, replacement=True, generator=g)
        a = torch.empty(n, dtype=torch.long)
        b = torch.empty(n, dtype=torch.long)
        for k, name in enumerate(names):
            sel = (which == k).nonzero().flatten()
            if len(sel):
                pairs = bucket_pairs(name)
                pick = torch.randint(len(pairs), (len(sel),), generator=g)
                a[sel], b[sel] = pairs[pick, 0], pairs[pick, 1]
    else:
        names = list(buckets)
        if not names:
            raise ValueError("buckets must name at least one bucket")
        pairs = torch.cat([bucket_pairs(nm) for nm in names])
        pick = torch.randint(len(pairs), (n,), generator=g)
        a, b = pairs[pick, 0], pairs[pick, 1]
    return Problems(a, b, _classify(a, b))


def _classify(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Index of the bucket in BUCKETS for each problem (vectorised)."""
    s = a + b
    one = (a < 10) & (b < 10)
    two = (a >= 10) & (a < 100) & (b >= 10) & (b < 100)
    carry = (a % 10 + b % 10) >= 10
    out = torch.full_like(a, BUCKETS.index("3d+1d"))
    out[one] = BUCKETS.index("1d+1d")
    out[two & (s < 100) & ~carry] = BUCKETS.index("2d+2d_nocarry")
    out[two & (s < 100) & carry] = BUCKETS.index("2d+2d_carry")
    out[two & (s >= 100)] = BUCKETS.index("2d+2d_ge100")
    return out


class PromptSampler:
    """A callable ``sampler(n, generator) -> Problems`` over fixed buckets (the trainer's default)."""

    def __init__(self, buckets: Sequence[str] | Mapping[str, float] = TWO_DIGIT):
        self.buckets = buckets
        sample_problems(1, buckets, 0)  # validate now, not mid-run

    def __call__(self, n: int, generator: torch.Generator | None = None) -> Problems:
        return sample_problems(n, self.buckets, generator)

    def __repr__(self) -> str:
        return f"PromptSampler({self.buckets!r})"


def eval_problems(n: int = 200, buckets: Sequence[str] | Mapping[str, float] = TWO_DIGIT,
                  seed: int = 12345) -> Problems:
    """A fixed evaluation set: the same ``n`` problems every time for the same arguments."""
    return sample_problems(n, buckets, torch.Generator().manual_seed(seed))


def sft_batch(n: int, generator: torch.Generator, mix: Mapping[str, float] = SFT_MIX):
    """An SFT batch from ``mix``: tokens [n, SEQ_LEN] and the response mask [n, R]."""
    probs = sample_problems(n, mix, generator)
    return teacher_forcing_batch(probs, [str(x) for x in probs.answers])


def teacher_forcing_batch(problems: Problems, responses: Sequence[str]):
    """Prompt + given response text -> (tokens [N, SEQ_LEN], response_mask [N, R])."""
    if len(responses) != len(problems):
        raise ValueError(f"responses has {len(responses)} entries, problems {len(problems)}")
    resp = torch.tensor([encode_response(r) for r in responses], dtype=torch.long)
    tokens = torch.cat([problems.prompt_tokens(), resp], 1)
    response_mask = resp != PAD
    return tokens, response_mask


def is_answer(response: str) -> bool:
    """Whether a sampled response is a well-formed answer: one or more digits and nothing else.

    Hot sampling also draws malformed responses: an empty one, a ``+`` or ``=`` inside the digits, a
    sampled PAD (``_``) or BOS (``^``). They are not answers, so they are not counted as distinct
    answers (at T = 2 about one sample in ten is malformed)."""
    return response.isascii() and response.isdigit()


def is_correct(responses: Sequence[str], answers: Sequence[int]) -> torch.Tensor:
    """[N] bool: the response is exactly the decimal answer."""
    return torch.tensor([r == str(a) for r, a in zip(responses, answers)], dtype=torch.bool)


PromptSamplerFn = Callable[[int, torch.Generator], Problems]
