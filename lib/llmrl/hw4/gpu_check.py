"""One short GRPO pass on a model of realistic size with random weights: speed and memory.

Nothing is downloaded: the model is built from a config (Qwen2.5-1.5B's shape by default, the
size of the published runs' Qwen2.5-Math-1.5B-Instruct) with random weights, the tokenizer is a
character tokenizer padded to the model's 151,936-token vocabulary, and the prompts are random
characters of a fixed length. Random weights rarely emit EOS, so every completion runs to
``new_tokens``: the figures are for full-length rollouts.

The pass goes through the hw4 trainer (``llmrl.hw4.run_manager.train``, the reference functions) with
the HF backend (LoRA r=16 on the seven projections, bf16 on a GPU), so it exercises the exact code
path of the required runs. Reported (printed and written as JSON): rollout tokens per second
(sampled completion tokens / generation time), update tokens per second (sequence tokens through
the old/reference scoring passes and the training passes / time outside generation), seconds per
GRPO step, and peak memory (GPU: ``torch.cuda.max_memory_allocated``; CPU: the process's max RSS).

    python -m llmrl.hw4.gpu_check                       # 1.5B shape, 8 x 8 rollouts, 128 + 256 tokens
    python -m llmrl.hw4.gpu_check --size tiny --device cpu   # a seconds-long smoke run (the tests)

Sized to finish well inside 5 minutes on one H100/H200 (model build ~20 s, one step well under a
minute); ``--steps`` adds steps.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from dataclasses import dataclass

import torch

SIZES = {
    # Qwen2.5-1.5B's shape (the published runs' Qwen2.5-Math-1.5B-Instruct has the same)
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
    # Qwen2.5-0.5B's shape
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    # a few-second CPU smoke test
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, tie_word_embeddings=True),
}
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 "


@dataclass
class BenchTask:
    """Random-character prompts and a reward that varies within a group (so advantages are not zero):
    the fraction of the letter 'a'-'m' among the completion's characters."""

    prompt_tokens: int
    new_tokens: int
    seed: int = 0
    name: str = "gpu_check"
    reward_components: tuple = ("score",)

    @property
    def max_new_tokens(self) -> int:
        return self.new_tokens

    @property
    def eval_max_new_tokens(self) -> int:
        return 4

    def _prompt(self, rng: random.Random) -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(self.prompt_tokens))

    def sample(self, n, generator):
        from .tasks import Example
        rng = random.Random(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        return [Example(self._prompt(rng), "0") for _ in range(n)]

    def eval_examples(self):
        from .tasks import Example
        rng = random.Random(self.seed)
        return [Example(self._prompt(rng), "0") for _ in range(2)]

    def reward(self, completion, answer):
        letters = [c for c in completion if c.isalpha()]
        return {"score": sum(c <= "m" for c in letters) / max(1, len(letters))}

    def exact_match(self, completion, answer):
        return False


class _Timed:
    """Wraps a backend: times generate() and counts the tokens it sampled."""

    def __init__(self, backend):
        self._b = backend
        self.gen_seconds = 0.0
        self.gen_tokens = 0
        self.gen_calls = 0

    def __getattr__(self, name):
        return getattr(self._b, name)

    def reset(self) -> None:
        self.gen_seconds, self.gen_tokens, self.gen_calls = 0.0, 0, 0

    def generate(self, *a, **kw):
        sync = torch.cuda.synchronize if self._b.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        rb = self._b.generate(*a, **kw)
        sync()
        self.gen_seconds += time.perf_counter() - t0
        self.gen_tokens += int(rb.attention_mask[:, rb.prompt_len:].sum())
        self.gen_calls += 1
        self.last_shape = tuple(rb.input_ids.shape)
        return rb


def build_backend(size: str = "1.5b", device: str | None = None, seed: int = 0, gradient_checkpointing: bool = False):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from .hf_backend import HFBackend, char_tokenizer, default_device

    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    dev = torch.device(device) if device else default_device()
    spec = dict(SIZES[size])
    base = len(char_tokenizer(ALPHABET))
    tok = char_tokenizer(ALPHABET, extra_tokens=max(0, spec["vocab_size"] - base))
    spec["vocab_size"] = len(tok)
    cfg = Qwen2Config(**spec, max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    with torch.device(dev):
        model = Qwen2ForCausalLM(cfg).to(dtype)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return HFBackend(model, tok, device=dev, dtype=dtype, chat_template=False,
                     gradient_checkpointing=gradient_checkpointing)


def run(size: str = "1.5b", device: str | None = None, n_prompts: int = 8, group_size: int = 8,
        prompt_tokens: int = 128, new_tokens: int = 256, steps: int = 1, minibatch_size: int = 8,
        grad_accum_steps: int = 8, ppo_epochs: int = 2, gradient_checkpointing: bool = False,
        seed: int = 0, out: str | None = None) -> dict:
    """Build the model, run ``steps`` GRPO steps through the hw4 trainer, return the figures."""
    from .impl import load_impl
    from .settings import default_config
    from .run_manager import train

    t0 = time.perf_counter()
    backend = build_backend(size, device, seed, gradient_checkpointing)
    is_cuda = backend.device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    build_s = time.perf_counter() - t0
    timed = _Timed(backend)
    task = BenchTask(prompt_tokens, new_tokens, seed)
    cfg = default_config("format_copy", "grpo", steps=steps, n_prompts=n_prompts, group_size=group_size,
                         lr=3e-5, max_new_tokens=new_tokens, minibatch_size=minibatch_size,
                         grad_accum_steps=grad_accum_steps, ppo_epochs=ppo_epochs, eval_every=10**6,
                         ckpt_every=10**6, gen_every=10**6, backend="hf", seed=seed)
    records = []

    def on_record(record):
        records.append(record)
        if record["step"] == 0:  # the step-0 eval is not part of a GRPO step: count from here
            timed.reset()

    train(cfg, load_impl("reference"), run_dir=None, backend=timed, task=task, resume=False, progress=False,
          callback=on_record)
    steps_rec = [r for r in records if r["step"] >= 1]
    step_s = sum(r["step_seconds"] for r in steps_rec)
    B, T = n_prompts * group_size, timed.last_shape[1]
    update_s = max(step_s - timed.gen_seconds, 1e-9)
    scored_tokens = B * T * (2 + ppo_epochs) * len(steps_rec)  # old + reference passes, then the epochs
    peak = (torch.cuda.max_memory_allocated() / 2**30 if is_cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    result = {
        "size": size, "device": str(backend.device), "dtype": str(backend.dtype),
        "gpu": torch.cuda.get_device_name() if is_cuda else None,
        "parameters": backend.num_parameters(), "trainable_parameters": backend.num_parameters(True),
        "rollouts": f"{n_prompts} x {group_size}", "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
        "steps": len(steps_rec), "build_seconds": round(build_s, 2),
        "seconds_per_step": round(step_s / max(1, len(steps_rec)), 2),
        "rollout_tokens_per_second": round(timed.gen_tokens / max(timed.gen_seconds, 1e-9), 1),
        "update_tokens_per_second": round(scored_tokens / update_s, 1),
        "peak_memory_gib": round(peak, 2), "peak_memory_kind": "cuda max allocated" if is_cuda else "cpu max rss",
        "final_loss": steps_rec[-1]["loss_mean"] if steps_rec else None,
        "total_seconds": round(time.perf_counter() - t0, 2),
    }
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.hw4.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="1.5b", choices=sorted(SIZES))
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--minibatch-size", type=int, default=8)
    p.add_argument("--grad-accum-steps", type=int, default=8)
    p.add_argument("--ppo-epochs", type=int, default=2)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--out", default=None, help="also write the figures as JSON here")
    a = p.parse_args(argv)
    res = run(a.size, a.device, a.n_prompts, a.group_size, a.prompt_tokens, a.new_tokens, a.steps,
              a.minibatch_size, a.grad_accum_steps, a.ppo_epochs, a.gradient_checkpointing, out=a.out)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
