"""Agents: recipes (typed config), PPO construction, callbacks and the training loop (no CLI parsing)."""
