"""What the SDK apps a test drives share (`chat_app.py`, `responses_app.py`): the line protocol —
one JSON command per line on stdin, one JSON answer per line on stdout, until stdin ends or the
command is "quit" — the OpenAI client a command's settings describe, and how an SDK object or
error is written back.

A command's client settings: "base" (the base URL), "api_key", "query" (the client's
default_query), "headers" (its default_headers). The client never retries.

An error is {"error": {"status": HTTP status or null, "class": the SDK's exception class,
"body": the error body the SDK parsed, "message": its text}}.
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
    """The SDK's parsed object with the fields the server sent (`exclude_unset`); its union
    types are filled in loosely, so without warnings about them."""
    return model.model_dump(mode="json", exclude_unset=True, warnings=False)


def error_of(e):
    return {
        "status": getattr(e, "status_code", None),
        "class": type(e).__name__,
        "body": getattr(e, "body", None),
        "message": str(e),
    }


async def serve(handle):
    """Answers each command with `await handle(command)`; a failure is the command's answer."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        try:
            answer = await handle(command)
        except openai.APIError as e:
            answer = {"error": error_of(e)}
        except Exception as e:  # noqa: BLE001 - every failure is the test's to read
            answer = {"error": {"status": None, "class": type(e).__name__, "message": str(e)}}
        print(json.dumps(answer), flush=True)
