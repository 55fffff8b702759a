"""Rollouts: the one decode loop, the one rollout type, and per-token log-probs with the shift right.

The spine of every lab: prompts -> :func:`sample_completions` (G samples per prompt, the prompt
encoded once per group) -> a :class:`Rollout` -> log-probs of its completion tokens under the
current, old or reference policy (:func:`response_logits`, :func:`gather_logprobs`).

Column conventions: a sequence is ``prompt_len`` prompt columns (left-padded) then the completion
columns (right-padded). The logits at column t score the token at column t + 1, so the completion
tokens at columns P..P+R-1 are scored by the logits at columns P-1..P+R-2. For the addition task
(:mod:`llmrl.tasks.addition`) P = PROMPT_LEN = 7 and R = RESPONSE_LEN = 5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tasks.addition import EOS, MAX_ANSWER_CHARS, PAD, PROMPT_LEN, Problems, decode_responses
from ..utils import check_float, check_int, make_generator


@dataclass
class Rollout:
    """G completions for each of N prompts, rows grouped by prompt (row i belongs to prompt i // G).

    input_ids [B, T] long: P = ``prompt_len`` prompt columns, left-padded, then the completion
    columns, right-padded (PAD is an ordinary token to TinyLM, see :mod:`llmrl.lm.tinylm`).
    completion_mask [B, R] bool (R = T - P): the tokens the policy chose, its EOS included (a
    completion cut at the cap has none, or, on the addition task, an EOS the policy did not choose
    and that is not in the mask). attention_mask [B, T] long: 1 on real prompt tokens and on the
    completion mask. completions: B decoded strings (no padding, no EOS). sample_logprobs [B, R]
    float or None: the log-prob of each chosen token under the untempered policy at sampling time
    (0 where masked). prompts: B prompt texts (each repeated G times); problems: what the task
    served, one per prompt; answers: B reference answers, one per row (from ``problems`` when it
    has ``answers``). n_seeds: S > 1 when the rows are S seeds' rollouts stacked seed-major (seed s
    owns rows s*B/S..; ``problems`` is then a list of S, see :meth:`seed_view`).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_len: int
    completions: list[str]
    group_size: int = 1
    prompts: list[str] | None = None
    completion_mask: torch.Tensor | None = None
    sample_logprobs: torch.Tensor | None = None
    temperature: float = 1.0
    problems: object = None
    answers: list | None = None
    n_seeds: int = 1

    def __post_init__(self):
        if self.completion_mask is None:
            self.completion_mask = self.attention_mask[:, self.prompt_len:].bool()
        if self.answers is None and self.problems is not None and hasattr(self.problems, "answers"):
            self.answers = [a for a in self.problems.answers for _ in range(self.group_size)]

    def seed_view(self, s: int) -> "Rollout":
        """Seed ``s``'s rows of a rollout of several seeds (rows seed-major; ``problems`` then holds
        one entry per seed). The rollout itself when it holds one seed."""
        if self.n_seeds == 1:
            return self
        B = len(self) // self.n_seeds
        rows = slice(s * B, (s + 1) * B)
        cut = lambda x: None if x is None else x[rows]  # noqa: E731
        return Rollout(input_ids=self.input_ids[rows], attention_mask=self.attention_mask[rows],
                       prompt_len=self.prompt_len, completions=self.completions[rows], group_size=self.group_size,
                       prompts=cut(self.prompts), completion_mask=self.completion_mask[rows],
                       sample_logprobs=cut(self.sample_logprobs), temperature=self.temperature,
                       problems=None if self.problems is None else self.problems[s], answers=cut(self.answers))

    # the names the labs read a rollout by
    @property
    def tokens(self) -> torch.Tensor:
        """[B, P+R] long: the whole sequences (``input_ids``)."""
        return self.input_ids

    @property
    def responses(self) -> list[str]:
        return self.completions

    @property
    def response_tokens(self) -> torch.Tensor:
        """[B, R] long: the completion columns."""
        return self.input_ids[:, self.prompt_len:]

    @property
    def response_mask(self) -> torch.Tensor:
        """[B, R] bool: ``completion_mask``."""
        return self.completion_mask

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def lengths(self) -> torch.Tensor:
        """[B] number of characters in each completion (EOS not counted)."""
        return torch.tensor([len(r) for r in self.completions], dtype=torch.float)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """[B, V] logits with every token outside the smallest set of probability >= top_p set to -inf."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) >= top_p  # keep a token while the mass before it is < top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None,
                 top_p: float = 1.0) -> torch.Tensor:
    """[B, V] logits -> [B] token ids from softmax(logits / T), restricted to the top-p nucleus; T = 0 is argmax."""
    if temperature == 0:
        return logits.argmax(-1)
    z = logits / temperature
    if top_p < 1.0:
        z = top_p_filter(z, top_p)
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample_completions(model, prompt_tokens: torch.Tensor, group_size: int, max_new_tokens: int,
                       temperature: float, generator: torch.Generator, *, eos: int, pad: int,
                       top_p: float = 1.0, banned: torch.Tensor | None = None, sampler=None,
                       cap_with_eos: bool = False, logprobs: bool = True):
    """The decode loop: ``group_size`` completions of at most ``max_new_tokens`` tokens per prompt.

    prompt_tokens [N, P] long. The prompt is encoded once and its key/value cache shared by the
    group's G rows (B = N * G, grouped by prompt); each step then feeds one token per row. A row is
    done after it chose ``eos``; later columns hold ``pad``. ``banned`` [V] bool: tokens never
    sampled. ``sampler(logits [B, V], temperature, generator) -> [B]`` replaces :func:`sample_token`
    (no top-p then). ``cap_with_eos``: one more column in which rows still open at the cap get an
    ``eos`` the policy did not choose (it is not in the mask).

    Returns (completion [B, W] long, chosen [B, W] bool: the tokens the policy chose, logps [B, W]:
    their log-probs under the untempered policy, 0 where not chosen, or None without ``logprobs``),
    with W = max_new_tokens (+ 1 with ``cap_with_eos``).
    """
    was_training = model.training
    if was_training:  # walking the modules costs time on every step; skip it when already in eval mode
        model.eval()
    logits, past = model(prompt_tokens, return_past=True)
    last = logits[:, -1]
    if group_size > 1:
        last = last.repeat_interleave(group_size, 0)
        past = [(k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0)) for k, v in past]
    B = last.shape[0]
    W = max_new_tokens + int(cap_with_eos)
    out = torch.full((B, W), pad, dtype=torch.long)
    chosen = torch.zeros(B, W, dtype=torch.bool)
    logps = torch.zeros(B, W) if logprobs else None
    done = torch.zeros(B, dtype=torch.bool)
    for t in range(max_new_tokens):
        if banned is not None:
            last = last.masked_fill(banned, float("-inf"))
        if sampler is None:
            tok = sample_token(last, temperature, generator, top_p)
        else:
            tok = sampler(last, temperature, generator)
            if not isinstance(tok, torch.Tensor) or tok.shape != (B,):
                raise ValueError(f"sampler must return a [B] tensor of token ids, got "
                                 f"{tuple(getattr(tok, 'shape', ()))} for B = {B}")
            tok = tok.long()
        live = ~done
        if logprobs:
            lp = torch.log_softmax(last, -1).gather(1, tok[:, None]).squeeze(1)
            logps[:, t] = torch.where(live, lp, torch.zeros_like(lp))
        out[:, t] = torch.where(live, tok, pad)
        chosen[:, t] = live
        done = done | (tok == eos)
        if bool(done.all()) or t + 1 == max_new_tokens:
            break
        step_logits, past = model(out[:, t:t + 1], past=past, return_past=True)
        last = step_logits[:, -1]
    if cap_with_eos:  # rows still open at the cap (none when every row chose EOS before it)
        out[~done, W - 1] = eos
    if was_training:
        model.train()
    return out, chosen, logps


@torch.no_grad()
def generate(model, problems: Problems, group_size: int = 1, temperature: float = 1.0,
             generator: torch.Generator | int | None = None, sampler=None) -> Rollout:
    """Sample ``group_size`` responses for each addition problem (rows grouped by problem).

    ``sampler(logits [B, V], temperature, generator) -> [B]`` draws each token (default
    :func:`sample_token`), so a lab can run generation on the student's own sampling function.

    Each response has at most MAX_ANSWER_CHARS characters; a response that reaches the cap gets an
    EOS that the policy did not choose (it is not in ``response_mask``).
    """
    check_int("group_size", group_size, minimum=1)
    temperature = check_float("temperature", temperature, minimum=0.0)
    if not isinstance(problems, Problems):
        raise TypeError(f"problems must be llmrl.tasks.addition.Problems, got {type(problems).__name__}")
    if sampler is not None and not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    return addition_rollout(model, problems.prompt_tokens(), group_size, temperature, make_generator(generator),
                            sampler=sampler, problems=problems)


def addition_rollout(model, prompt: torch.Tensor, group_size: int, temperature: float,
                     generator: torch.Generator, sampler=None, problems=None, prompts=None) -> Rollout:
    """A :class:`Rollout` of the addition task from prompt tokens [N, PROMPT_LEN]."""
    resp, chosen, logps = sample_completions(model, prompt, group_size, MAX_ANSWER_CHARS, temperature, generator,
                                             eos=EOS, pad=PAD, sampler=sampler, cap_with_eos=True)
    if group_size > 1:
        prompt = prompt.repeat_interleave(group_size, 0)
    tokens = torch.cat([prompt, resp], 1)
    attention = torch.cat([prompt != PAD, chosen], 1).long()
    return Rollout(input_ids=tokens, attention_mask=attention, prompt_len=PROMPT_LEN,
                   completions=decode_responses(resp), group_size=group_size, prompts=prompts,
                   completion_mask=chosen, sample_logprobs=logps, temperature=temperature, problems=problems)


def response_logits(model, tokens: torch.Tensor, group_size: int = 1, prompt_len: int = PROMPT_LEN) -> torch.Tensor:
    """[B, P+R] tokens -> [B, R, V] logits that score the R response tokens (the shift done).

    ``group_size=G`` says that rows come in groups of G sharing one prompt (a rollout's layout):
    the prompt is then encoded once per group and its key/value cache shared, which gives the same
    logits (and gradients) for about half the work.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[1] <= prompt_len:
        raise ValueError(f"tokens must be [B, P+R] with P = {prompt_len}, got "
                         f"{tuple(getattr(tokens, 'shape', ()))}")
    if group_size <= 1:
        return model(tokens[:, :-1], logits_from=prompt_len - 1)
    B = tokens.shape[0]
    if B % group_size:
        raise ValueError(f"{B} rows is not a multiple of group_size={group_size}")
    prompts = tokens[::group_size, :prompt_len]
    head, past = model(prompts, return_past=True, logits_from=prompt_len - 1)
    past = [(k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0)) for k, v in past]
    rest = model(tokens[:, prompt_len:-1], past=past)
    return torch.cat([head.repeat_interleave(group_size, 0), rest], 1)


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, R, V] logits, [B, R] targets -> [B, R] log-probs of the targets."""
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def response_logprobs(model, tokens: torch.Tensor, return_logits: bool = False, group_size: int = 1):
    """[B, R] log-probs of the response tokens under ``model`` (gradients flow if enabled).

    Positions after EOS hold finite junk; combine with ``response_mask``. ``return_logits=True``
    also returns the [B, R, V] logits (for entropy and full-vocabulary KL).
    """
    logits = response_logits(model, tokens, group_size)
    lp = gather_logprobs(logits, tokens[:, PROMPT_LEN:])
    return (lp, logits) if return_logits else lp


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of ``x`` over True positions of ``mask`` (0 where there are none)."""
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1)
    return (x * m).sum(dim) / m.sum(dim).clamp(min=1)
