"""The language-model layer: TinyLM, its seed-stacked form, the decode loop and log-probs, and lab11's enumerable toy LM."""
