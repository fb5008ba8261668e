"""A scripted fake of the OpenAI Responses API (`POST /v1/responses`) on loopback, for the tests
of the server's `/v1/responses`. It refuses, as the real API does, every request the real API
would refuse, and tells the test what it got:

- every request body is checked against openai-python's own types
  (`openai.types.responses.response_create_params.ResponseCreateParams*`, and through them the
  input item and tool types), strictly: every TypedDict forbids unknown keys, and lazily
  checked iterables are walked, so an unknown field or a wrong shape is a 400;
- a `previous_response_id` must name a response it issued and stored (`store` not false);
- the conversation the model would see (the stored chain, then the input) must answer every
  `function_call` with a `function_call_output` before the next user message and by its end
  ("No tool output found for function call ..."), and every output must answer a call
  ("No tool call found for function call output ...");
- an item it issued that is sent back by id must be one it stored, unless it carries its
  content (a reasoning item without `encrypted_content` under `store: false` is unknown); a
  reasoning item must be followed by the item that followed it, and a call that followed a
  reasoning item needs that item ("... provided without its required ...").

Each request takes the next scripted answer. Its answers and stream events are checked against
openai-python's `Response` and `ResponseStreamEvent` types before they go out.

Reads one JSON command per line on stdin, answers each with one JSON line on stdout; the first
line it prints is `listening http://127.0.0.1:PORT`.

  {"cmd": "script", "answers": [A, ...]}   queue answers; A is one of
      {"output": [ITEM, ...], "usage": [in, out]?, "status": "completed"?,
       "incomplete_details": {...}?, "chunks": N?}   (N: text deltas per message, default 3)
      {"status_code": 404, "body": {...}}            an error answer
    and ITEM one of {"type": "message", "text": T}, {"type": "reasoning", "summary": T},
      {"type": "function_call", "call_id": C, "name": N, "arguments": TEXT}
  {"cmd": "requests"}  -> {"requests": [{"body", "authorization", "stream", "refused"}, ...]}
  {"cmd": "quit"}
"""

import asyncio
import json
import socket
import time
import typing

import typing_extensions
import uvicorn
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses import response_create_params as params
from pydantic import ConfigDict, TypeAdapter
from pydantic_core import ValidationError
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from sdk_commands import serve

_forbidden = set()


def forbid_extra(tp):
    """Every TypedDict reachable from `tp` refuses keys it does not declare."""
    if id(tp) in _forbidden:
        return
    _forbidden.add(id(tp))
    if typing_extensions.is_typeddict(tp):
        tp.__pydantic_config__ = ConfigDict(extra="forbid")
        for hint in typing.get_type_hints(tp, include_extras=True).values():
            forbid_extra(hint)
        return
    for arg in typing.get_args(tp):
        forbid_extra(arg)


forbid_extra(params.ResponseCreateParamsNonStreaming)
forbid_extra(params.ResponseCreateParamsStreaming)
STREAMING = TypeAdapter(params.ResponseCreateParamsStreaming)
NON_STREAMING = TypeAdapter(params.ResponseCreateParamsNonStreaming)
EVENT = TypeAdapter(ResponseStreamEvent)


def walk(value):
    """Pulls every lazily validated iterable, so what it holds is checked too."""
    if isinstance(value, dict):
        for v in value.values():
            walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            walk(v)
    elif hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        for v in value:
            walk(v)


class Refused(Exception):
    def __init__(self, message, param=None, code=None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class Upstream:
    def __init__(self):
        self.answers = []
        self.requests = []
        self.stored = {}  # response id -> the conversation it ends (input items + output)
        self.issued = {}  # item id -> the item as issued (for ids sent back)
        self.stored_items = set()  # ids of items of stored responses
        self.follows = {}  # reasoning id -> identity of the item after it
        self.preceded = {}  # call item id -> the reasoning id before it
        self.counter = 0

    def next_id(self, prefix):
        self.counter += 1
        return f"{prefix}_{self.counter:04d}fake"

    # --- checks -------------------------------------------------------------------------
    def check(self, body):
        adapter = STREAMING if body.get("stream") else NON_STREAMING
        try:
            walk(adapter.validate_python(body))
        except ValidationError as e:
            raise Refused(f"the request does not match ResponseCreateParams: {e}") from None
        previous = body.get("previous_response_id")
        history = []
        if previous is not None:
            if previous not in self.stored:
                raise Refused(
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_id",
                    "previous_response_not_found",
                )
            history = list(self.stored[previous])
        items = body.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for position, item in enumerate(items):
            self.check_item(item, items[position + 1] if position + 1 < len(items) else None,
                            history + items[:position])
        self.check_calls(history + items)
        return history + items

    def check_item(self, item, following, before):
        item_id = item.get("id")
        kind = item.get("type")
        if item_id is None or kind not in ("reasoning", "message", "function_call"):
            return
        if item_id not in self.issued:
            raise Refused(f"Item with id '{item_id}' not found.", "input")
        if kind == "reasoning":
            if "encrypted_content" not in item and item_id not in self.stored_items:
                raise Refused(
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                    "is set to false. Try again with `store` set to true, or remove this item "
                    "from your input.",
                    "input",
                )
            if self.follows.get(item_id) is not None and (
                following is None or identity(following) != self.follows[item_id]
            ):
                raise Refused(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required "
                    "following item.",
                    "input",
                )
        if kind == "function_call" and item_id in self.preceded:
            reasoning = self.preceded[item_id]
            if not any(b.get("id") == reasoning for b in before):
                raise Refused(
                    f"Item '{item_id}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{reasoning}'.",
                    "input",
                )

    @staticmethod
    def check_calls(conversation):
        pending = {}
        for item in conversation:
            kind = item.get("type")
            if kind == "function_call":
                pending[item["call_id"]] = item
            elif kind == "function_call_output":
                if pending.pop(item["call_id"], None) is None:
                    raise Refused(
                        "No tool call found for function call output with call_id "
                        f"{item['call_id']}.",
                        "input",
                    )
            elif item.get("role") == "user" and pending:
                raise Refused(f"No tool output found for function call {next(iter(pending))}.",
                              "input")
        if pending:
            raise Refused(f"No tool output found for function call {next(iter(pending))}.",
                          "input")

    # --- answers ------------------------------------------------------------------------
    def output_items(self, script, body):
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        items = []
        for item in script:
            kind = item["type"]
            if kind == "message":
                items.append({
                    "id": self.next_id("msg"), "type": "message", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": item["text"],
                                 "annotations": [], "logprobs": []}],
                })
            elif kind == "reasoning":
                reasoning = {
                    "id": self.next_id("rs"), "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": item["summary"]}],
                }
                if encrypted:
                    reasoning["encrypted_content"] = f"enc:{reasoning['id']}"
                items.append(reasoning)
            elif kind == "function_call":
                items.append({
                    "id": self.next_id("fc"), "type": "function_call",
                    "call_id": item["call_id"], "name": item["name"],
                    "arguments": item["arguments"], "status": "completed",
                })
        for position, item in enumerate(items):
            self.issued[item["id"]] = item
            if item["type"] == "reasoning" and position + 1 < len(items):
                self.follows[item["id"]] = identity(items[position + 1])
                if items[position + 1]["type"] == "function_call":
                    self.preceded[items[position + 1]["id"]] = item["id"]
        return items

    def response(self, body, answer, conversation):
        usage = answer.get("usage", [10, 5])
        output = self.output_items(answer["output"], body)
        response = {
            "id": self.next_id("resp"), "object": "response", "created_at": int(time.time()),
            "status": answer.get("status", "completed"), "error": None,
            "incomplete_details": answer.get("incomplete_details"),
            "instructions": body.get("instructions"), "model": body.get("model", "fake-model"),
            "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store", True), "temperature": 1.0,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
            "top_p": 1.0, "truncation": "disabled", "metadata": body.get("metadata") or {},
            "usage": {
                "input_tokens": usage[0],
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage[1], "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage[0] + usage[1],
            },
        }
        Response.model_validate(response)
        if body.get("store", True) is not False:
            self.stored[response["id"]] = conversation + output
            self.stored_items.update(item["id"] for item in output)
        return response

    def events(self, response, chunks):
        opening = dict(response, status="in_progress", output=[], usage=None)
        events = [
            {"type": "response.created", "response": opening},
            {"type": "response.in_progress", "response": opening},
        ]
        for index, item in enumerate(response["output"]):
            base = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": dict(item, status="in_progress", content=[])})
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                events.append(dict(base, type="response.content_part.added", content_index=0,
                                   part=part))
                for piece in pieces(text, chunks):
                    events.append(dict(base, type="response.output_text.delta", content_index=0,
                                       delta=piece, logprobs=[]))
                events.append(dict(base, type="response.output_text.done", content_index=0,
                                   text=text, logprobs=[]))
                events.append(dict(base, type="response.content_part.done", content_index=0,
                                   part=item["content"][0]))
            elif item["type"] == "function_call":
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": dict(item, status="in_progress", arguments="")})
                for piece in pieces(item["arguments"], 2):
                    events.append(dict(base, type="response.function_call_arguments.delta",
                                       delta=piece))
                events.append(dict(base, type="response.function_call_arguments.done",
                                   arguments=item["arguments"], name=item["name"]))
            elif item["type"] == "reasoning":
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": dict(item, summary=[])})
                text = item["summary"][0]["text"]
                summary = dict(base, summary_index=0)
                events.append(dict(summary, type="response.reasoning_summary_part.added",
                                   part={"type": "summary_text", "text": ""}))
                for piece in pieces(text, 2):
                    events.append(dict(summary, type="response.reasoning_summary_text.delta",
                                       delta=piece))
                events.append(dict(summary, type="response.reasoning_summary_text.done",
                                   text=text))
                events.append(dict(summary, type="response.reasoning_summary_part.done",
                                   part={"type": "summary_text", "text": text}))
            events.append({"type": "response.output_item.done", "output_index": index,
                           "item": item})
        terminal = {"completed": "response.completed", "incomplete": "response.incomplete",
                    "failed": "response.failed"}[response["status"]]
        events.append({"type": terminal, "response": response})
        for number, event in enumerate(events):
            event["sequence_number"] = number
            EVENT.validate_python(event)
        return events

    async def handle(self, request):
        raw = await request.body()
        record = {
            "authorization": request.headers.get("authorization"),
            "refused": None,
        }
        self.requests.append(record)
        try:
            body = json.loads(raw)
        except ValueError:
            record["refused"] = "not JSON"
            return error(400, "the body is not JSON")
        record["body"], record["stream"] = body, bool(body.get("stream"))
        try:
            conversation = self.check(body)
        except Refused as e:
            record["refused"] = e.message
            return error(400, e.message, e.param, e.code)
        if not self.answers:
            record["refused"] = "no scripted answer left"
            return error(500, "no scripted answer left")
        answer = self.answers.pop(0)
        if "status_code" in answer:
            return JSONResponse(answer.get("body", {}), status_code=answer["status_code"])
        response = self.response(body, answer, conversation)
        if not body.get("stream"):
            return JSONResponse(response)
        events = self.events(response, answer.get("chunks", 3))

        async def frames():
            for event in events:
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                await asyncio.sleep(0)

        return StreamingResponse(frames(), media_type="text/event-stream")


def identity(item):
    return item.get("call_id") if item.get("type") == "function_call" else item.get("id")


def pieces(text, n):
    """`text` in `n` parts (fewer for a short text), none empty."""
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n) if text else 1
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def error(status, message, param=None, code=None):
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}
    return JSONResponse(body, status_code=status)


async def main():
    upstream = Upstream()
    app = Starlette(routes=[Route("/v1/responses", upstream.handle, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    print(f"listening http://127.0.0.1:{sock.getsockname()[1]}", flush=True)

    async def control(command):
        if command["cmd"] == "script":
            upstream.answers.extend(command["answers"])
            return {"ok": True}
        if command["cmd"] == "requests":
            return {"requests": upstream.requests}
        return {"error": f"unknown command {command['cmd']}"}

    await serve(control)
    server.should_exit = True
    await serving


asyncio.run(main())
