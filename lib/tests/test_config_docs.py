"""Every field of every configuration a student or an instructor sets has a one-line doc.

The doc is an attribute docstring (the string right under the field) or ``metadata["doc"]``
(:func:`llmrl.utils.field_docs` reads both); it is what ``help()`` and docs/library.md point to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from llmrl.hw4.charlm import PretrainConfig
from llmrl.hw4.settings import HW4Config
from llmrl.rl.config import RLConfig
from llmrl.sft.supervised import ScheduleConfig, SFTConfig
from llmrl.tinylm import TinyLMConfig
from llmrl.utils import field_docs

CONFIGS = [RLConfig, HW4Config, SFTConfig, ScheduleConfig, PretrainConfig, TinyLMConfig]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_has_a_one_line_doc(cls):
    docs = field_docs(cls)
    missing = [name for name, doc in docs.items() if not doc]
    assert not missing, f"{cls.__name__}: fields without a doc: {missing}"
    too_long = [name for name, doc in docs.items() if len(doc) > 120]
    assert not too_long, f"{cls.__name__}: docs longer than one line (120 characters): {too_long}"


def test_a_field_without_a_doc_is_caught():
    @dataclass(frozen=True)
    class Planted:
        documented: int = 1
        """has one"""
        with_metadata: int = field(default=2, metadata={"doc": "from metadata"})
        bare: int = 3

    assert field_docs(Planted) == {"documented": "has one", "with_metadata": "from metadata", "bare": ""}


def test_a_redeclared_field_keeps_its_base_doc():
    assert field_docs(PretrainConfig)["lr"] == field_docs(ScheduleConfig)["lr"]
    assert field_docs(PretrainConfig)["steps"] == "optimizer steps of the pretraining"


def test_every_config_class_of_the_library_is_checked():
    import dataclasses
    import importlib
    import pkgutil

    import llmrl

    found = set()
    for m in pkgutil.walk_packages(llmrl.__path__, "llmrl."):
        if m.name.endswith(("modal_app", "hf_backend", "gpu_check", "math_data")):
            continue  # optional extras (Modal, transformers, datasets); none defines a *Config
        mod = importlib.import_module(m.name)
        found |= {v for k, v in vars(mod).items()
                  if k.endswith("Config") and dataclasses.is_dataclass(v) and v.__module__ == mod.__name__}
    assert found == set(CONFIGS)
