"""TRL's GRPOTrainer on a model of TinyLM's size, for ``python -m llmrl.tools.bench`` (optional ``trl`` extra).

A Llama with ~100k parameters and a character tokenizer, both built offline from config objects,
trained with GRPO on the same prompts and the same exact-match reward as ``rl_train`` (16 prompts
x 8 samples, at most 5 new tokens, one gradient step per batch, no KL). Importing this module fails
with ImportError when trl, transformers, tokenizers or datasets are missing.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from ..tasks.addition import PromptSampler

CHARS = list("0123456789+=")


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {c: i for i, c in enumerate(CHARS)}
    for s in ("<pad>", "<bos>", "<eos>"):
        vocab[s] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", padding_side="left")


def tiny_llama(vocab_size: int) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32,
                      tie_word_embeddings=True, pad_token_id=vocab_size - 3, bos_token_id=vocab_size - 2,
                      eos_token_id=vocab_size - 1)
    return LlamaForCausalLM(cfg)


def trl_ms_per_sequence(steps: int = 3, n_prompts: int = 16, group: int = 8, seed: int = 0) -> float:
    """Milliseconds per sampled sequence of GRPOTrainer steps (after one warm-up step)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(seed)
    tok = char_tokenizer()
    model = tiny_llama(len(tok))
    probs = PromptSampler()(n_prompts * (steps + 1), torch.Generator().manual_seed(seed))
    ds = Dataset.from_dict({"prompt": probs.texts(), "answer": [str(a) for a in probs.answers]})

    def exact(completions, answer, **kw):
        return [float(c.strip() == a) for c, a in zip(completions, answer)]

    times = []

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=n_prompts * group, num_generations=group,
                          max_completion_length=5, max_steps=steps + 1, learning_rate=3e-4, beta=0.0,
                          temperature=1.0, report_to="none", save_strategy="no", logging_steps=10_000,
                          use_cpu=True, bf16=False, seed=seed, disable_tqdm=True)
        trainer = GRPOTrainer(model=model, reward_funcs=[exact], args=args, train_dataset=ds,
                              processing_class=tok)
        from transformers import TrainerCallback

        class StepClock(TrainerCallback):
            def on_step_begin(self, *a, **k):
                times.append(time.perf_counter())

            def on_train_end(self, *a, **k):
                times.append(time.perf_counter())

        trainer.add_callback(StepClock())
        with contextlib.redirect_stdout(io.StringIO()):  # the bench prints JSON lines only
            trainer.train()
    per_step = (times[-1] - times[1]) / steps  # skip the warm-up step
    return per_step / (n_prompts * group) * 1000
