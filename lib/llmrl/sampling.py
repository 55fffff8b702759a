"""Batched generation with temperature, and per-token log-probs with the shift and the mask right.

The spine of every lab: prompts -> ``generate`` (G samples per prompt) -> a :class:`Rollout` ->
``response_logprobs`` under the current, old or reference policy.

Column conventions (see :mod:`llmrl.addition`): a sequence is PROMPT_LEN prompt columns then
RESPONSE_LEN response columns. The logits at column t score the token at column t + 1, so the
response tokens at columns P..P+R-1 are scored by the logits at columns P-1..P+R-2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .addition import EOS, MAX_ANSWER_CHARS, PAD, PROMPT_LEN, RESPONSE_LEN, Problems, decode_responses
from .utils import check_float, check_int, make_generator


@dataclass
class Rollout:
    """G samples for each of P prompts, rows grouped by prompt (row i belongs to prompt i // G).

    tokens [B, P+R] long (PAD is an ordinary token to TinyLM, see :mod:`llmrl.tinylm`);
    response_mask [B, R] bool (tokens the policy chose, EOS included); sample_logprobs [B, R] float (log-prob of each chosen
    token under the untempered policy at sampling time, 0 where masked); responses: B strings.
    """

    problems: Problems
    tokens: torch.Tensor
    response_mask: torch.Tensor
    sample_logprobs: torch.Tensor
    responses: list[str]
    group_size: int
    temperature: float

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.tokens[:, PROMPT_LEN:]

    @property
    def answers(self) -> list[int]:
        return self.problems.answers

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def lengths(self) -> torch.Tensor:
        """[B] number of characters in each response (EOS not counted)."""
        return torch.tensor([len(r) for r in self.responses], dtype=torch.float)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """[B, V] logits -> [B] token ids from softmax(logits / T); T = 0 is argmax."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.no_grad()
def generate(model, problems: Problems, group_size: int = 1, temperature: float = 1.0,
             generator: torch.Generator | int | None = None, sampler=None) -> Rollout:
    """Sample ``group_size`` responses for each problem (rows grouped by problem).

    ``sampler(logits [B, V], temperature, generator) -> [B]`` draws each token (default
    :func:`sample_token`), so a lab can run generation on the student's own sampling function.

    The prompt is encoded once per problem and its key/value cache shared by the group. Each
    response has at most MAX_ANSWER_CHARS characters; a response that reaches the cap gets an EOS
    that the policy did not choose (it is not in ``response_mask``).
    """
    check_int("group_size", group_size, minimum=1)
    temperature = check_float("temperature", temperature, minimum=0.0)
    if not isinstance(problems, Problems):
        raise TypeError(f"problems must be llmrl.addition.Problems, got {type(problems).__name__}")
    if sampler is not None and not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    draw = sample_token if sampler is None else sampler
    g = make_generator(generator)
    was_training = model.training
    if was_training:  # walking the modules costs time on every step; skip it when already in eval mode
        model.eval()
    prompt = problems.prompt_tokens()
    logits, past = model(prompt, return_past=True)
    last = logits[:, -1]
    if group_size > 1:
        last = last.repeat_interleave(group_size, 0)
        past = [(k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0)) for k, v in past]
        prompt = prompt.repeat_interleave(group_size, 0)
    B = prompt.shape[0]
    resp = torch.full((B, RESPONSE_LEN), PAD, dtype=torch.long)
    resp_mask = torch.zeros(B, RESPONSE_LEN, dtype=torch.bool)
    logps = torch.zeros(B, RESPONSE_LEN)
    done = torch.zeros(B, dtype=torch.bool)
    for r in range(RESPONSE_LEN):
        if r == MAX_ANSWER_CHARS:  # the cap: EOS for every row still open, not a policy choice
            resp[~done, r] = EOS
            break
        tok = draw(last, temperature, g)
        if not isinstance(tok, torch.Tensor) or tok.shape != (last.shape[0],):
            raise ValueError(f"sampler must return a [B] tensor of token ids, got "
                             f"{tuple(getattr(tok, 'shape', ()))} for B = {last.shape[0]}")
        tok = tok.long()
        lp = torch.log_softmax(last, -1).gather(1, tok[:, None]).squeeze(1)
        live = ~done
        resp[:, r] = torch.where(live, tok, PAD)
        resp_mask[:, r] = live
        logps[:, r] = torch.where(live, lp, torch.zeros_like(lp))
        done = done | (tok == EOS)
        if bool(done.all()) or r + 1 == MAX_ANSWER_CHARS:
            if r + 1 == MAX_ANSWER_CHARS:
                resp[~done, r + 1] = EOS
            break
        step_logits, past = model(resp[:, r:r + 1], past=past, return_past=True)
        last = step_logits[:, -1]
    if was_training:
        model.train()
    tokens = torch.cat([prompt, resp], 1)
    return Rollout(problems=problems.repeat(group_size) if group_size > 1 else problems,
                   tokens=tokens, response_mask=resp_mask,
                   sample_logprobs=logps, responses=decode_responses(resp), group_size=group_size,
                   temperature=temperature)


def response_logits(model, tokens: torch.Tensor, group_size: int = 1) -> torch.Tensor:
    """[B, P+R] tokens -> [B, R, V] logits that score the R response tokens (the shift done).

    ``group_size=G`` says that rows come in groups of G sharing one prompt (a rollout's layout):
    the prompt is then encoded once per group and its key/value cache shared, which gives the same
    logits (and gradients) for about half the work.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[1] <= PROMPT_LEN:
        raise ValueError(f"tokens must be [B, P+R] with P = {PROMPT_LEN}, got "
                         f"{tuple(getattr(tokens, 'shape', ()))}")
    if group_size <= 1:
        return model(tokens[:, :-1], logits_from=PROMPT_LEN - 1)
    B = tokens.shape[0]
    if B % group_size:
        raise ValueError(f"{B} rows is not a multiple of group_size={group_size}")
    prompts = tokens[::group_size, :PROMPT_LEN]
    head, past = model(prompts, return_past=True, logits_from=PROMPT_LEN - 1)
    past = [(k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0)) for k, v in past]
    rest = model(tokens[:, PROMPT_LEN:-1], past=past)
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
