"""`python -m eventlog`: the `eventlog` command."""

from .cli import main

raise SystemExit(main())
