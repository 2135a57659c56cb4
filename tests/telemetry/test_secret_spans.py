"""Secret fuzz for traces: a secret placed on every hostile path never reaches an exported span.

The paths: the task text, the child's answer, its stderr, JSON-RPC error text, an
out-of-vocabulary stop reason, tool titles and inputs, session ids, and method names of
notifications and requests the child sends (which the ACP SDK's own spans would carry),
plus credential-shaped ambient variables.  While a run is traced, the same provider is
also the process's global one, so a span any library opens would be exported too.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import opentelemetry.trace
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from supervisor import Registry, SubagentRequest, telemetry
from supervisor.providers import acp, dsh_sdk
from tests.conftest import CHILDREN, PYTHON
from tests.reliability.test_secrets import (
    ACP_PLACEMENTS,
    DSH_SCENARIOS,
    acp_placement,
    run_to_end,
    scrubbed_names,
    secrets,
)
from tests.support.reliability import acp_child, dsh_fake

pytestmark = pytest.mark.anyio

PROBE = "global provider probe"


@contextmanager
def exported() -> Iterator[list[str]]:
    """Trace through a fresh provider, also made the global one; yields the spans as JSON text.

    Non-ASCII stays unescaped, so a secret would appear verbatim.  A probe span from the
    global tracer proves the global capture was live.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    texts: list[str] = []
    telemetry.use(provider)
    try:
        with mock.patch.object(opentelemetry.trace, "_TRACER_PROVIDER", provider):
            yield texts
            opentelemetry.trace.get_tracer("probe").start_span(PROBE).end()
    finally:
        telemetry.use(None)
        provider.shutdown()
    spans = exporter.get_finished_spans()
    texts.extend(json.dumps(json.loads(span.to_json()), ensure_ascii=False) for span in spans)
    assert [s.name for s in spans][-1] == PROBE


def request(secret: str) -> SubagentRequest:
    return SubagentRequest(task=f"the task {secret}", parent_cwd=Path.cwd())


def assert_absent(secrets: list[str], texts: list[str]) -> None:
    assert any('"invoke_agent ' in text for text in texts)
    for text in texts:
        for secret in secrets:
            assert secret not in text


def hostile(placement: str, secret: str) -> dict[str, str]:
    if placement == "output":
        return {"TEXT": secret}
    if placement == "method-name":
        return {"STRANGE_METHOD": secret, "STOP": secret}
    return acp_placement(placement, secret)


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(
    secret=secrets,
    placement=st.sampled_from(["output", "method-name", *ACP_PLACEMENTS]),
    ambient=st.dictionaries(scrubbed_names, secrets, max_size=2),
)
async def test_acp_secrets_never_reach_an_exported_span(
    secret: str, placement: str, ambient: dict[str, str]
) -> None:
    with exported() as texts, mock.patch.dict(os.environ, ambient):
        run = acp.Provider(acp_child(hostile(placement, secret))).create_run(request(secret))
        await run_to_end(run)
    assert_absent([secret, *ambient.values()], texts)


@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(secret=secrets, placement=st.sampled_from(["output", "method-name"]))
async def test_a_conversations_turns_never_export_a_secret(secret: str, placement: str) -> None:
    """Every turn's task and answer, and what the child sends in each, stay out of every turn's span."""
    registry = Registry()
    registry.register(acp.Provider(acp_child(hostile(placement, secret))))
    with exported() as texts:
        async with registry.run("acp", request(secret), conversation=True) as run:
            await run.result()
            await run.send(f"the next task {secret}")
            await run.send(f"one more {secret}")
    assert sum('"invoke_agent ' in text for text in texts) == 3
    assert_absent([secret], texts)


@settings(max_examples=5, deadline=None, derandomize=True, database=None)
@given(secret=secrets, scenario=st.sampled_from(DSH_SCENARIOS))
async def test_dsh_secrets_never_reach_an_exported_span(secret: str, scenario: dict[str, str]) -> None:
    knobs = {**scenario, "SECRET": secret}
    if scenario.get("REASON") == "unknown-kind":
        knobs["REASON"] = secret.replace(":", ";")
    with exported() as texts:
        await run_to_end(dsh_sdk.Provider(dsh_fake(knobs)).create_run(request(secret)))
    assert_absent([secret], texts)


@settings(max_examples=4, deadline=None, derandomize=True, database=None)
@given(secret=secrets, info=st.sampled_from(["unauthorized", {"httpConnectionFailed": {}}, None]))
async def test_codex_secrets_never_reach_an_exported_span(
    secret: str, info: object, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.support.codex import agent_message, standin, turn_completed

    error = {"message": secret, "codexErrorInfo": info, "additionalDetails": secret}
    script = [agent_message(secret, "final_answer"), turn_completed("failed", error=error)]
    with exported() as texts:
        await run_to_end(standin(tmp_path_factory.mktemp("codex"), script=script).create_run(request(secret)))
    assert_absent([secret], texts)


# -- the ACP SDK's own spans, in a fresh interpreter with a global provider ---------------------

SECRET_METHOD = "sk-§method-name-secret§"

GLOBAL_PROBE = f"""
import json, sys
from pathlib import Path
import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the embedder's global provider, before the ACP SDK loads
mode = sys.argv[1]
if mode == "sdk-alone":  # what the SDK does on its own: the hazard this guards against
    import acp.telemetry
    with acp.telemetry.span_context("acp.notification", attributes={{"method": {SECRET_METHOD!r}}}):
        pass
else:
    from supervisor import Registry, SubagentRequest, telemetry
    from supervisor.providers.acp import Config, Provider

    if mode == "use":
        telemetry.use(provider)
    env = {{"ACP_CHILD_STRANGE_METHOD": {SECRET_METHOD!r}, "ACP_CHILD_TEXT": ""}}
    config = Config(command=sys.executable, args=["-I", {str(CHILDREN / "acp_child.py")!r}], env=env)

    async def main():
        registry = Registry()
        registry.register(Provider(config))
        async with registry.run("acp", SubagentRequest(task="hi", parent_cwd=Path.cwd())) as run:
            return (await run.result()).stop_reason

    assert anyio.run(main) == "completed"
trace.get_tracer("probe").start_span({PROBE!r}).end()
spans = [json.loads(s.to_json()) for s in exporter.get_finished_spans()]
print(json.dumps(spans, ensure_ascii=False))
"""


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        ("sdk-alone", ["acp.notification", PROBE]),
        ("global-only", [PROBE]),
        ("use", ["invoke_agent acp", PROBE]),
    ],
)
def test_the_acp_sdks_own_spans_never_export_a_method_name(
    tmp_path: Path, mode: str, names: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run(
        [PYTHON, "-c", GLOBAL_PROBE, mode], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    spans = json.loads(proc.stdout)
    assert [span["name"] for span in spans] == names
    leaked = SECRET_METHOD in proc.stdout
    assert leaked is (mode == "sdk-alone")
