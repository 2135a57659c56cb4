"""The narrow interface the API renderers use to answer one HTTP request."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

HangOutcome = Literal["released", "timeout", "gone"]


class Wire(Protocol):
    """One HTTP exchange, as seen by a renderer.

    Every method returns normally even when the client has gone away; `alive` then turns false
    and the renderer should stop (the remaining writes are dropped).
    """

    @property
    def alive(self) -> bool: ...

    def send_json(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None: ...

    def start_sse(self) -> None: ...

    def event(self, name: str, data: Mapping[str, Any]) -> None: ...

    def sleep(self, seconds: float) -> bool:
        """Wait; False when the server is closing or the client has gone."""
        ...

    def hang(self, timeout_s: float | None) -> HangOutcome: ...

    def cut(self) -> None:
        """Close the connection in the middle of the body (no terminal chunk)."""
        ...


NewId = Callable[[str], str]
"""`new_id("resp")` -> a fresh id such as "resp_mock_7"."""
