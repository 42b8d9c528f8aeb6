"""Subcommands of the ``rlclock`` CLI: one module each, exposing ``register(subparsers)``."""
