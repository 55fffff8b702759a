"""The tasks layer: the addition task and its tokens, rewards, and the task protocol every trainer calls (imports only the core)."""
