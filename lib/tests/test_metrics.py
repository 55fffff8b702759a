"""The metric vocabulary (llmrl.rl.metrics): the docs' table is the library's, every name is covered."""

from pathlib import Path

import pytest

from llmrl import metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_docs_table_is_the_librarys():
    assert metrics.markdown_table() in DOCS.read_text(), "docs/metrics.md is stale: paste `python -m llmrl.rl.metrics`"


def test_names_with_parts_and_eval_prefixes_are_covered():
    assert metrics.entry("reward_tag_mean") == "reward_<component>_mean"
    assert metrics.entry("eval_pass@16") == "pass@<k>" and metrics.entry("pass@16_se") == "pass@<k>_se"
    assert metrics.entry("late_clip_high_of_positive_rare") == "late_clip_high_of_positive_<rare|common>"
    assert metrics.entry("usage_2d+2d_ge100") == "usage_<bucket>"
    assert metrics.entry("eval_entropy_token_mean_nats") == "entropy_token_mean_nats"
    with pytest.raises(KeyError, match="kl_to_reference_nats"):
        metrics.entry("kl_to_reference_nats")  # the former, ambiguous name is gone


def test_every_kl_name_says_its_estimator_and_reduction():
    for name in metrics.METRICS:
        if name.startswith("kl_"):
            assert any(e in name for e in ("_k1_", "_k3_", "_exact_")), name
            assert any(r in name for r in ("_sum_", "_token_mean_")), name
