"""An app of the Gemini relay, written with the official `google-genai` SDK, for
tests/api/gemini_relay.rs:

    python gemini_app.py SERVER_URL CHARACTER

It connects with `client.aio.live.connect` (its own tool `app_clock`, text answers), prints one
JSON line per event on stdout — `{"connected": true}`, `{"tool_call": [names]}`,
`{"turn_complete": text}` — answers the calls of its own tool itself, and exits after the first
complete turn.

The SDK turns any base URL into `wss://` when it holds an API key (`_websocket_base_url`) and
always passes a TLS context to the websocket (`_websocket_ssl_ctx`), and this server's relay
listens on plain `ws://` on loopback: those two are replaced to keep the scheme and drop TLS.
Everything else — the setup it builds, its headers, the messages it sends and reads — is the
SDK's own.
"""

import asyncio
import json
import sys

from google import genai
from google.genai import types


def say(**event):
    print(json.dumps(event), flush=True)


async def main(server, character):
    client = genai.Client(
        api_key="app-key",
        http_options=types.HttpOptions(base_url=server, headers={"x-character": character}),
    )
    websocket_base = server.replace("http://", "ws://", 1)
    client._api_client._websocket_base_url = lambda *args, **kwargs: websocket_base
    client._api_client._websocket_ssl_ctx = {}
    clock = types.FunctionDeclaration(name="app_clock", description="The app's own clock.")
    config = types.LiveConnectConfig(
        response_modalities=["TEXT"],
        tools=[types.Tool(function_declarations=[clock])],
    )
    async with client.aio.live.connect(model="gemini-test", config=config) as session:
        say(connected=True)
        while True:
            async for message in session.receive():
                if message.tool_call:
                    calls = message.tool_call.function_calls
                    say(tool_call=[call.name for call in calls])
                    own = [call for call in calls if call.name == "app_clock"]
                    if own:
                        await session.send_tool_response(
                            function_responses=[
                                types.FunctionResponse(
                                    id=call.id, name=call.name, response={"time": "12:00"}
                                )
                                for call in own
                            ]
                        )
                if message.server_content and message.server_content.turn_complete:
                    say(turn_complete=message.text)
                    return


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    sys.exit(0)
