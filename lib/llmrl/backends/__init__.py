"""The backends layer: the policy backend protocol, its registry and the TinyLM plug-in.

Other plug-ins (hw4's character and Hugging Face backends) live above and are loaded by entry
name (:mod:`llmrl.backends.registry`); nothing here imports them."""
