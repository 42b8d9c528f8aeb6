"""The version of rlclock (one place; the package metadata reads it too)."""

__version__ = "0.2.0"
