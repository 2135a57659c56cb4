"""An author's name imported from ``supervisor`` (0.2's place) warns once, naming its new place.

Each import runs in a fresh interpreter: a module cache (or a warnings registry) already
holding the name would hide a second warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import supervisor

MOVED = sorted(supervisor._MOVED_TO_PROVIDER)

PROBE = textwrap.dedent(
    """
    import json, sys, warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(sys.argv[1], "<the caller>", "exec"), {})
    print(json.dumps([[w.category.__name__, str(w.message), w.filename] for w in caught]))
    """
)


def warnings_of(statement: str) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, statement], capture_output=True, text=True, check=True, timeout=60
    )
    caught: list[list[str]] = json.loads(done.stdout)
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
        ]
        for name in MOVED
    ]


def test_an_authors_name_read_as_an_attribute_of_the_root_warns_once() -> None:
    assert [w[:1] for w in warnings_of("import supervisor\nsupervisor.ProviderRun")] == [
        ["DeprecationWarning"]
    ]


def test_the_new_places_and_the_callers_names_do_not_warn() -> None:
    assert warnings_of("from supervisor.provider import ProviderRun, RunContext") == []
    assert warnings_of("from supervisor import Registry, SubagentRequest, supervise") == []
