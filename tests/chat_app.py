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
(`exclude_unset`); errors and the client settings as `sdk_commands.py` says.
"""

import asyncio

import openai
from sdk_commands import client_of, dump, error_of, serve


class ChatApp:
    """The commands, and the one stream that may be open between them."""

    def __init__(self):
        self.open_stream = None

    async def handle(self, command):
        cmd = command["cmd"]
        if cmd == "create":
            completion = await client_of(command).chat.completions.create(**command["request"])
            return {"completion": dump(completion)}
        if cmd == "stream":
            stream = await client_of(command).chat.completions.create(
                stream=True, **command["request"]
            )
            chunks = []
            try:
                async for chunk in stream:
                    chunks.append(dump(chunk))
                return {"chunks": chunks}
            except openai.APIError as e:
                return {"chunks": chunks, "error": error_of(e)}
        if cmd == "stream_helper":
            events = []
            async with client_of(command).chat.completions.stream(**command["request"]) as stream:
                async for event in stream:
                    events.append(event.type)
                final = await stream.get_final_completion()
            return {"final": dump(final), "events": events}
        if cmd == "open_stream":
            self.open_stream = await client_of(command).chat.completions.create(
                stream=True, **command["request"]
            )
            async for chunk in self.open_stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    return {"first": dump(chunk)}
            return {"ok": True}
        if cmd == "next":
            try:
                return {"chunk": dump(await self.open_stream.__anext__())}
            except StopAsyncIteration:
                return {"end": True}
        if cmd == "close_stream":
            await self.open_stream.close()
            self.open_stream = None
            return {"ok": True}
        if cmd == "models":
            page = await client_of(command).models.list()
            return {"models": [m.id for m in page.data]}
        return {"error": {"message": f"unknown command {cmd}"}}


asyncio.run(serve(ChatApp().handle))
