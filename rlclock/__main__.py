"""``python -m rlclock``: the rlclock command line."""

from rlclock.cli import main

raise SystemExit(main())
