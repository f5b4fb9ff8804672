"""`python -m streamcap.cli`."""

from streamcap.cli import main

raise SystemExit(main())
