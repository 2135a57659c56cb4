"""The kinds' discovery reads one entry-point group without parsing every distribution's
entry points: what it finds must be exactly what ``importlib.metadata.entry_points(group=...)``
finds (the same points, in the same order, the first of two same-named distributions kept)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

from supervisor._kinds import PROVIDERS_GROUP
from supervisor.common._entry_points import group_entry_points, normalize

GROUP = PROVIDERS_GROUP


def described(points: list[EntryPoint]) -> list[tuple[str, str, str, str | None]]:
    return [
        (p.group, p.name, p.value, None if p.dist is None else str(p.dist.locate_file(""))) for p in points
    ]


def distribution(where: Path, name: str, entry_points_text: str | None) -> None:
    info = where / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points_text is not None:
        (info / "entry_points.txt").write_text(entry_points_text)


@pytest.mark.parametrize("group", [GROUP, "console_scripts", "pydantic", "no.such.group"])
def test_the_installed_environment_reads_the_same(group: str) -> None:
    assert described(group_entry_points(group)) == described(list(entry_points(group=group)))


def test_shadowed_odd_and_unrelated_distributions_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    distribution(
        first, "plain-kind", f"[{GROUP}]\nalpha = plain_kind:KIND\nbeta = plain_kind.sdk:KIND [sdk]\n"
    )
    distribution(first, "no-points", None)
    distribution(first, "other-tools", "[console_scripts]\nsome-tool = other_tools:main\n")
    distribution(first, "mentions-only", f"[console_scripts]\n{GROUP} = mentions:main\n")
    distribution(first, "doubled-brackets", f"[[{GROUP}]]\ngamma = doubled:KIND\n")
    distribution(first, "spaced", f"[ {GROUP} ]\ndelta = spaced:KIND\n")  # not the group
    # the same distribution twice on the path: the first copy wins, kinds or not
    distribution(first, "Shadow.Kind", "[console_scripts]\nshadow = shadow:main\n")
    distribution(second, "shadow-kind", f"[{GROUP}]\nepsilon = shadow:KIND\n")
    distribution(first, "winner", f"[{GROUP}]\nzeta = winner_first:KIND\n")
    distribution(second, "winner", f"[{GROUP}]\nzeta = winner_second:KIND\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))

    expected = list(entry_points(group=GROUP))
    found = group_entry_points(GROUP)
    assert described(found) == described(expected)
    names = [p.name for p in found if p.dist is not None and str(first) in str(p.dist.locate_file(""))]
    assert sorted(names) == ["alpha", "beta", "gamma", "zeta"]  # in the directory's order
    assert "epsilon" not in [p.name for p in found]


def test_names_are_normalised_as_importlib_does() -> None:
    assert normalize("Subagent.Supervisor--x") == "subagent_supervisor_x"
    assert normalize("subagent-supervisor") == "subagent_supervisor"
