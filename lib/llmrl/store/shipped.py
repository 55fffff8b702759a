"""The course's trained models, shipped inside the library (``lib/llmrl/models/``).

Why they ship instead of being trained on first use: training is deterministic on one machine but
not across machines. Two CPUs that pick different kernels (AVX-512 against AVX2, MKL's code paths)
round the last bits of a matmul or a softmax differently; over an SFT run those bits decide at
which step accuracy jumps, so the same code and seed gave a student at SFT step 435 on one machine
and at step 285 on another, with other numbers in every lab. The four files below were trained
once, on the instructors' machine, and frozen: every laptop, CI runner and grader now starts from
the same weights, so the labs' numbers differ between machines by rounding only.

=================  =====================================================================
``teacher``        lab21's GELU TinyLM after its whole SFT run (1,200 steps): about 100%
                   greedy (lab21)
``student``        the same run early on: about 50% greedy, 30% at T = 1, KL to the
                   teacher about 1.98 nats per token (lab21)
``sft``            lab11 and lab19's TinyLM, about 80% greedy, 55% at T = 1, below 30% at
                   T = 2; its run and step chosen by lab19's recorded search
                   (:mod:`llmrl.tools.lab19_calibration`)
``hw4-charlm``     hw4's character model after its pretraining (1,500 steps), the pretraining
                   seed whose model copies every format_copy number (RL then only has to
                   teach the tag, as in the published run)
=================  =====================================================================

``models/MANIFEST.json`` records each file's sha256, size, SFT step, the recipe it was trained
with (a hash of its configuration) and its calibration measured when it was frozen, with the
machine it was built on. Loading checks the sha256 and fails with a clear error on a changed or
missing file; it never trains a replacement behind the user's back.

Instructors rebuild them with ``python -m llmrl.tools.models --rebuild-shipped`` (minutes): the two SFT
runs of :data:`llmrl.sft.checkpoints.SHIPPED_RUNS` (the course's for the sft model, lab21's for the
teacher and the student), a scan of each one's snapshots every ``SCAN_EVERY`` steps, the student
chosen by :func:`choose` (closest to the published calibration, :data:`TARGETS`), the sft model at
the step lab19's search chose (``checkpoints.SFT_STEP``: docs/lab19-calibration.md, which judged
its candidates on every lab11 and lab19 claim), the character model pretrained with each of
``CHARLM_SEEDS`` and chosen by
:func:`choose_charlm`, all written with a new manifest (``--parts`` rebuilds some of them). On another CPU a rebuild gives
other bits and possibly other steps: that is a new release of the models, to be committed with the
notebooks and stored runs regenerated on top of it (docs/library.md, "The course's models").
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path

import torch

from .cache_files import FORMAT_VERSION

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"  # lib/llmrl/models: data, beside the layers
MANIFEST_NAME = "MANIFEST.json"
MANIFEST_FORMAT = 1
TINYLM_NAMES = ("teacher", "student", "sft")
CHARLM_NAME = "hw4-charlm"
FILES = {"teacher": "tinylm-teacher.pt", "student": "tinylm-student.pt", "sft": "tinylm-sft.pt",
         CHARLM_NAME: "hw4-charlm.pt"}

# The published calibration each snapshot is chosen for (lab21's student, lab11's SFT model) and
# the scale of a miss that counts as one unit in choose()'s distance: about two binomial standard
# errors of the 1,000-problem evaluation for rates, 0.1 nats for the KL.
TARGETS = {
    "student": {"greedy": (0.50, 0.03), "sampled_T1": (0.30, 0.03), "kl_to_teacher": (1.98, 0.10)},
    "sft": {"greedy": (0.80, 0.03), "sampled_T1": (0.55, 0.03)},
}
SFT_T2_BELOW = 0.30      # lab11: "below 30% at T = 2", a hard bound (with a margin in choose())
SCAN_FROM, SCAN_EVERY = 100, 5
# hw4's character model: the pretraining seeds tried, and the base model's published math score
# (hw4's EXPECTED["math_base_eval"]; format_copy's base exact match is 0 by design).
CHARLM_SEEDS = (0, 1, 2, 3)
CHARLM_MATH_BASE = 0.27


class ShippedModelError(RuntimeError):
    """A shipped model file is missing or is not the file the manifest describes."""


def recipe_key(cfg) -> str:
    """A hash of a training configuration (an SFTConfig or PretrainConfig), without the torch
    version: the shipped weights are plain tensors, valid for any torch that loads them. A
    configuration whose corpus is defined outside it (hw4's PretrainConfig) adds what defines the
    corpus through its ``recipe_extra()`` (so this layer needs no import of the hw4 layer)."""
    extra = cfg.recipe_extra() if callable(getattr(cfg, "recipe_extra", None)) else {}
    blob = json.dumps({"cfg": asdict(cfg), "v": FORMAT_VERSION, **extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def manifest(models_dir: Path | None = None) -> dict:
    """The manifest of the shipped models (raises ShippedModelError when it is missing)."""
    path = Path(models_dir or MODELS_DIR) / MANIFEST_NAME
    try:
        blob = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShippedModelError(f"{path} is missing: the llmrl package was installed without its models "
                                "(reinstall it, or rebuild them: python -m llmrl.tools.models --rebuild-shipped)") from None
    if blob.get("format") != MANIFEST_FORMAT:
        raise ShippedModelError(f"{path} has format {blob.get('format')!r}, this llmrl reads {MANIFEST_FORMAT}")
    return blob


def load_state(name: str, models_dir: Path | None = None) -> tuple[dict, dict]:
    """(manifest entry, state dict) of a shipped model, after checking its sha256."""
    models_dir = Path(models_dir or MODELS_DIR)
    entries = manifest(models_dir)["models"]
    if name not in entries:
        raise ShippedModelError(f"no shipped model {name!r}; the manifest lists {sorted(entries)}")
    entry = entries[name]
    path = models_dir / entry["file"]
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise ShippedModelError(f"{path} is missing (shipped model {name!r}): reinstall llmrl, or rebuild "
                                "the models with python -m llmrl.tools.models --rebuild-shipped") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != entry["sha256"]:
        raise ShippedModelError(f"{path} is not the shipped model {name!r}: its sha256 is {digest[:16]}..., the "
                                f"manifest says {entry['sha256'][:16]}... (a damaged or replaced file; reinstall "
                                "llmrl, or rebuild with python -m llmrl.tools.models --rebuild-shipped)")
    return dict(entry, name=name), torch.load(io.BytesIO(payload), weights_only=True)


def verify(models_dir: Path | None = None) -> dict:
    """Check every shipped file against the manifest; {name: sha256}. Raises ShippedModelError."""
    return {name: load_state(name, models_dir)[0]["sha256"] for name in manifest(models_dir)["models"]}
