"""``python -m supervisor.cli``: the ``subagents`` command."""

import sys

from supervisor.cli._main import main

sys.exit(main())
