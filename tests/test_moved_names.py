"""An author's name imported from ``supervisor`` (0.2's place) warns once, naming its new place.

Once per name and process, whichever way it is read first (``from supervisor import X``
reads it twice: the import system's probe, then the statement), pointing at the caller's
line.  Each case runs in a fresh interpreter: the process's own memory of having warned
would hide the warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import supervisor

MOVED = sorted(supervisor._MOVED_TO_PROVIDER)

PROBE = textwrap.dedent(
    """
    import json, sys, warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(sys.argv[1], "<the caller>", "exec"), {})
    print(json.dumps([[w.category.__name__, str(w.message), w.filename, w.lineno] for w in caught]))
    """
)


def warnings_of(statement: str) -> list[list[Any]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, statement], capture_output=True, text=True, check=True, timeout=60
    )
    caught: list[list[Any]] = json.loads(done.stdout)
    return caught


def test_an_authors_name_imported_from_the_root_warns_once_naming_its_new_place() -> None:
    assert "ProviderRun" in MOVED
    statement = "\n".join(f"from supervisor import {name}" for name in MOVED)
    assert warnings_of(statement) == [
        [
            "DeprecationWarning",
            f"supervisor.{name} is a provider author's name: import it from supervisor.provider "
            "(importing it from supervisor is removed in 0.5)",
            "<the caller>",
            line,
        ]
        for line, name in enumerate(MOVED, start=1)
    ]


def test_an_authors_name_read_as_an_attribute_of_the_root_warns_once() -> None:
    assert [w[:1] for w in warnings_of("import supervisor\nsupervisor.ProviderRun")] == [
        ["DeprecationWarning"]
    ]


def test_the_new_places_and_the_callers_names_do_not_warn() -> None:
    assert warnings_of("from supervisor.provider import ProviderRun, RunContext") == []
    assert warnings_of("from supervisor import Registry, SubagentRequest, supervise") == []


def test_each_moved_name_warns_once_per_process_whichever_way_it_is_read_first() -> None:
    statement = (
        "from supervisor import ProviderRun\n"  # 1
        "from supervisor import ProviderRun\n"
        "import supervisor\n"
        "supervisor.ProviderRun\n"
        "supervisor.RunContext\n"  # 5
        "supervisor.RunContext\n"
        "from supervisor import RunContext, StepFailed\n"  # 7
        "assert hasattr(supervisor, 'StepFailed')\n"
    )
    assert [(w[1].split()[0], w[3]) for w in warnings_of(statement)] == [
        ("supervisor.ProviderRun", 1),
        ("supervisor.RunContext", 5),
        ("supervisor.StepFailed", 7),
    ]


def test_a_moved_name_made_an_error_fails_every_read() -> None:
    """Under ``-W error::DeprecationWarning`` the import fails, and a second try fails again."""
    script = textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("error", DeprecationWarning)
        for attempt in range(2):
            try:
                from supervisor import ProviderRun
            except DeprecationWarning as exc:
                print("refused:", str(exc).split()[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "refused: supervisor.ProviderRun\n" * 2
