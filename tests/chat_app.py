"""A chat app driven by a test: the official OpenAI Python SDK's chat-completions client, with its
base URL pointed at the server.

Reads one JSON command per line on stdin and answers each with one JSON line on stdout. Every
command but "next", "close_stream" and "quit" takes the client's settings:

  "base": the base URL (http://127.0.0.1:PORT/v1), "api_key", "query" (the client's
  default_query), "headers" (its default_headers), and "request": the keyword arguments of the
  call (model, messages, tools, ...).

  {"cmd": "create", ...}         client.chat.completions.create(**request)
                                 -> {"completion": C} or {"error": E}
  {"cmd": "stream", ...}         create(stream=True), read to the end
                                 -> {"chunks": [C, ...]} (and "error": E if it broke off)
  {"cmd": "stream_helper", ...}  client.chat.completions.stream(**request): the SDK's own
                                 accumulation -> {"final": C, "events": [type, ...]}
  {"cmd": "open_stream", ...}    create(stream=True), read until the first chunk with text
                                 -> {"first": C}; the stream stays open
  {"cmd": "next"}                the open stream's next chunk -> {"chunk": C} or {"end": true}
  {"cmd": "close_stream"}        closes the open stream (and its connection)
  {"cmd": "models", ...}         client.models.list() -> {"models": [id, ...]} or {"error": E}
  {"cmd": "quit"}

Chunks and completions are the SDK's parsed objects dumped with the fields the server sent
(`exclude_unset`). An error is {"status": HTTP status or null, "class": the SDK's exception
class, "body": the error body the SDK parsed, "message": its text}. The client never retries.
"""

import asyncio
import json
import sys

import openai
from openai import AsyncOpenAI


def client_of(command):
    return AsyncOpenAI(
        api_key=command.get("api_key") or "sk-app",
        base_url=command["base"],
        default_query=command.get("query") or None,
        default_headers=command.get("headers") or None,
        max_retries=0,
        timeout=60,
    )


def dump(model):
    return model.model_dump(mode="json", exclude_unset=True)


def error_of(e):
    return {
        "status": getattr(e, "status_code", None),
        "class": type(e).__name__,
        "body": getattr(e, "body", None),
        "message": str(e),
    }


async def main():
    loop = asyncio.get_running_loop()
    open_stream = None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        cmd = command["cmd"]
        answer = {"ok": True}
        try:
            if cmd == "quit":
                break
            elif cmd == "create":
                client = client_of(command)
                completion = await client.chat.completions.create(**command["request"])
                answer = {"completion": dump(completion)}
            elif cmd == "stream":
                client = client_of(command)
                stream = await client.chat.completions.create(stream=True, **command["request"])
                chunks = []
                try:
                    async for chunk in stream:
                        chunks.append(dump(chunk))
                    answer = {"chunks": chunks}
                except openai.APIError as e:
                    answer = {"chunks": chunks, "error": error_of(e)}
            elif cmd == "stream_helper":
                client = client_of(command)
                events = []
                async with client.chat.completions.stream(**command["request"]) as stream:
                    async for event in stream:
                        events.append(event.type)
                    final = await stream.get_final_completion()
                answer = {"final": dump(final), "events": events}
            elif cmd == "open_stream":
                client = client_of(command)
                open_stream = await client.chat.completions.create(
                    stream=True, **command["request"]
                )
                async for chunk in open_stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        answer = {"first": dump(chunk)}
                        break
            elif cmd == "next":
                try:
                    answer = {"chunk": dump(await open_stream.__anext__())}
                except StopAsyncIteration:
                    answer = {"end": True}
            elif cmd == "close_stream":
                await open_stream.close()
                open_stream = None
            elif cmd == "models":
                client = client_of(command)
                page = await client.models.list()
                answer = {"models": [m.id for m in page.data]}
            else:
                answer = {"error": {"message": f"unknown command {cmd}"}}
        except openai.APIError as e:
            answer = {"error": error_of(e)}
        except Exception as e:  # noqa: BLE001 - every failure is the test's to read
            answer = {"error": {"status": None, "class": type(e).__name__, "message": str(e)}}
        print(json.dumps(answer), flush=True)


asyncio.run(main())
