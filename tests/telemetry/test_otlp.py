"""The real CLI with the real OTLP/HTTP exporter, sending to a receiver on 127.0.0.1 written here.

The receiver decodes each ``ExportTraceServiceRequest`` with ``opentelemetry-proto`` (a
dependency of the exporter), the way a collector would.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import CHILDREN, PYTHON

ACP_ARGV = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver: every decoded request, with its path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, ExportTraceServiceRequest]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                message = ExportTraceServiceRequest()
                message.ParseFromString(body)
                receiver.received.append((self.path, message))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        """Every span received, with its resource's attributes."""
        found: list[tuple[dict[str, Any], Span]] = []
        for _, request in self.received:
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope_spans.spans)
        return found


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    items: list[KeyValue] = list(pairs)
    return {kv.key: value(kv.value) for kv in items}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join()


def subagents() -> list[str]:
    script = Path(PYTHON).parent / "subagents"
    return [str(script)] if script.exists() else [PYTHON, "-m", "supervisor.cli"]


@pytest.mark.parametrize("switch", ["--otel", "environment"])
def test_the_cli_exports_the_run_span_over_otlp_http(receiver: Receiver, tmp_path: Path, switch: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    env["TRACEPARENT"] = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"  # e.g. set by an agent running us
    flags = ["--otel"] if switch == "--otel" else []
    child = ["--env", "ACP_CHILD_ECHO_ENV=TRACEPARENT", "--env", "ACP_CHILD_TEXT="]
    proc = subprocess.run(
        [*subagents(), "run", *flags, "--json", *child, "hello", "--", *ACP_ARGV],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)

    assert [path for path, _ in receiver.received] == ["/v1/traces"]
    ((resource, span),) = receiver.spans()
    assert resource["service.name"] == "subagents"
    assert span.name == "invoke_agent acp"
    assert span.kind == Span.SpanKind.SPAN_KIND_CLIENT
    assert span.trace_id.hex() == PARENT_TRACE  # the CLI continued the trace it was given
    assert span.parent_span_id.hex() == PARENT_SPAN
    assert attributes(span.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acp",
        "gen_ai.agent.name": "acp",
        "gen_ai.agent.id": document["run_id"],
        "gen_ai.conversation.id": document["run_id"],
        "subagent.kind": "acp",
        "subagent.turn": 1,
        "subagent.stop_reason": "completed",
        "subagent.quiescent": True,
        "process.exit.code": 0,
        **({"subagent.containment": document["containment"]} if document.get("containment") else {}),
        **{
            f"subagent.resources.{k}": v
            for k, v in (document.get("resources") or {}).items()
            if v is not None
        },
    }
    assert [event.name for event in span.events] == [entry["event"] for entry in document["audit"]]
    # The child saw our span as its parent.
    assert document["output"] == f"TRACEPARENT=00-{PARENT_TRACE}-{span.span_id.hex()}-01\n"


@pytest.mark.anyio
async def test_mcp_turns_continue_each_callers_trace_from_meta_traceparent(
    receiver: Receiver, tmp_path: Path
) -> None:
    """``subagents mcp --otel``: each tool call's ``params._meta.traceparent`` parents the turn it
    runs; the conversation's spans share its run id; the real OTLP exporter sends them here."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from supervisor.mcp._answers import result_facts

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "TRACEPARENT"}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    command = subagents()
    params = StdioServerParameters(
        command=command[0], args=[*command[1:], "mcp", "--otel"], cwd=str(tmp_path), env=env
    )
    first_parent = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
    second_trace, second_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        first = await session.call_tool(
            "run_subagent",
            {"task": "what is 2+2?", "keep_alive": True},
            meta=cast(Any, {"traceparent": first_parent}),
        )
        first_facts = result_facts(first)
        assert first_facts is not None
        run_id = first_facts["run_id"]
        second = await session.call_tool(
            "send_subagent",
            {"run_id": run_id, "task": "and 3+3?\n@usage"},
            meta=cast(Any, {"traceparent": f"00-{second_trace}-{second_span}-01"}),
        )
        assert not second.is_error
        closed = await session.call_tool("close_subagent", {"run_id": run_id})
        assert not closed.is_error
    # The server flushed its spans before it exited (the client closed its stdin).
    turns = [span for _, span in receiver.spans() if span.name == "invoke_agent acp"]
    assert [attributes(span.attributes)["subagent.turn"] for span in turns] == [1, 2]
    one, two = turns
    assert (one.trace_id.hex(), one.parent_span_id.hex()) == (PARENT_TRACE, PARENT_SPAN)
    assert (two.trace_id.hex(), two.parent_span_id.hex()) == (second_trace, second_span)
    for span in turns:
        facts = attributes(span.attributes)
        assert facts["gen_ai.conversation.id"] == run_id
        assert facts["gen_ai.provider.name"] == "acp"
        assert facts["subagent.stop_reason"] == "completed"
    second_facts = result_facts(second)
    usage = second_facts["usage"] if second_facts else None
    assert usage is not None
    assert attributes(two.attributes)["gen_ai.usage.input_tokens"] == usage["input_tokens"] == 2
    assert attributes(two.attributes)["gen_ai.usage.output_tokens"] == usage["output_tokens"] == 5
    assert "gen_ai.usage.input_tokens" not in attributes(one.attributes)
    assert attributes(two.attributes)["subagent.quiescent"] is True  # the close's teardown
    assert [e.name for e in two.events][:1] == ["turn_sent"]
