"""The run engine: the authors' base run (:mod:`supervisor.run._base`) over its composed parts.

Each part is a module of its own with one job and the cancellation rules it keeps:
start and publication (``_start``), the turn loop (``_turns``), limits and idle watching
(``_watch``), teardown and dispose (``_teardown``), the single settlement (``_settle``),
over one shared record of the run's facts (``_state``), built in order by ``_parts``.
Nothing here is public by its own path: callers import from :mod:`supervisor`, authors
from :mod:`supervisor.provider`.
"""
