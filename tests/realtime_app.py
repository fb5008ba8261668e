"""A realtime app driven by a test: the official OpenAI Python SDK's realtime client, connected
through the server's relay.

Reads one JSON command per line on stdin and answers each with one JSON line on stdout:

  {"cmd": "connect", "base": "ws://127.0.0.1:PORT/v1", "model": M, "query": {...}, "api_key": K}
      -> {"ok": true} or {"error": TEXT, "status": HTTP status of a refused handshake or null}
  {"cmd": "send", "event": {...}}      the SDK's typed send (validates and serialises the event)
  {"cmd": "send_raw", "text": T}       a text frame exactly as given
  {"cmd": "send_binary", "b64": B}     a binary frame
  {"cmd": "recv"}                      -> {"text": T} or {"binary_b64": B} (the next frame, as
                                          received; text frames are also parsed by the SDK,
                                          whose event type is in "type")
  {"cmd": "wait_close"}                -> {"code": C, "reason": R, "skipped": N}: reads until
                                          the server closes, counting the frames skipped
  {"cmd": "close", "code": C, "reason": R}
  {"cmd": "quit"}

Between commands the app reads nothing: a test that sends no "recv" has an app that stops
reading (the SDK's websocket then stops reading the socket once its small queue is full).
"""

import asyncio
import base64
import json
import sys

from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed, InvalidStatus


async def next_frame(connection):
    # The SDK hands out each frame's bytes (`recv_bytes`); whether the frame was text or binary
    # is known only to the websocket underneath.
    frame = await connection._connection.recv()
    if isinstance(frame, bytes):
        return {"binary_b64": base64.b64encode(frame).decode()}
    event = connection.parse_event(frame)
    return {"text": frame, "type": getattr(event, "type", None)}


async def main():
    loop = asyncio.get_running_loop()
    client = None
    connection = None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        cmd = command["cmd"]
        answer = {"ok": True}
        try:
            if cmd == "connect":
                client = AsyncOpenAI(
                    api_key=command.get("api_key") or "unused-by-the-relay",
                    websocket_base_url=command["base"],
                )
                connection = await client.realtime.connect(
                    model=command["model"], extra_query=command.get("query") or {}
                ).enter()
            elif cmd == "send":
                await connection.send(command["event"])
            elif cmd == "send_raw":
                await connection.send_raw(command["text"])
            elif cmd == "send_binary":
                await connection.send_raw(base64.b64decode(command["b64"]))
            elif cmd == "recv":
                answer = await next_frame(connection)
            elif cmd == "wait_close":
                skipped = 0
                try:
                    while True:
                        await connection.recv_bytes()
                        skipped += 1
                except ConnectionClosed as closed:
                    received = closed.rcvd
                    answer = {
                        "code": received.code if received else None,
                        "reason": received.reason if received else None,
                        "skipped": skipped,
                    }
            elif cmd == "close":
                await connection.close(code=command["code"], reason=command["reason"])
            elif cmd == "quit":
                print(json.dumps(answer), flush=True)
                break
            else:
                answer = {"error": f"unknown command {cmd!r}"}
        except InvalidStatus as refused:
            answer = {"error": str(refused), "status": refused.response.status_code}
        except Exception as error:  # reported to the test, which asserts on it
            answer = {"error": f"{type(error).__name__}: {error}", "status": None}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
