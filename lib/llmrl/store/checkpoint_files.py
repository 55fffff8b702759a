"""The old name of :mod:`llmrl.store.cache_files` (the cache's checkpoint file format and folder).

Renamed because beside :mod:`llmrl.sft.checkpoints` (the course's SFT checkpoints) the old name read
as a second home of the checkpoints; kept so that imports by the old name (hw4's ``charlm.py``) still
work: the same objects under the same names.
"""

from .cache_files import FORMAT_VERSION, cache_dir, load_state, save_state

__all__ = ["FORMAT_VERSION", "cache_dir", "load_state", "save_state"]
