"""A realtime app that talks to its model through runtime-tools' relay, with the official OpenAI
Python SDK (`pip install "openai[realtime]"`).

It points the SDK's websocket at the server instead of the provider, declares a tool of its own,
asks one question, and prints what happens: the session's tools (its own and the ones plugins
registered, merged in by the server), the model's tool calls (the server runs the registered
tools itself; the app answers only its own), and the model's answer.

    python3 examples/realtime_app.py [--server ws://127.0.0.1:48911/v1] [--character Mio]
                                     [--model gpt-realtime] [--question "..."]

The character needs a [character.session] in the server's configuration (see the README);
the server holds the API key (`api_key_env`), so the app's own key is unused.
"""

import argparse
import asyncio
import datetime
import json

from openai import AsyncOpenAI

# The app's own tool: answered here, never by the server.
APP_TOOL = {
    "type": "function",
    "name": "app_clock",
    "description": "The current time where the user is.",
    "parameters": {"type": "object", "properties": {}},
}


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="ws://127.0.0.1:48911/v1")
    parser.add_argument("--character", default=None)
    parser.add_argument("--model", default="gpt-realtime")
    parser.add_argument("--question", default="What is the weather in Tokyo?")
    args = parser.parse_args()

    client = AsyncOpenAI(api_key="held-by-the-server", websocket_base_url=args.server)
    query = {"character": args.character} if args.character else {}
    async with client.realtime.connect(model=args.model, extra_query=query) as connection:
        await connection.session.update(
            session={"type": "realtime", "output_modalities": ["text"], "tools": [APP_TOOL]}
        )
        async for event in connection:
            if event.type == "session.updated":
                names = [tool.name for tool in event.session.tools or []]
                print(f"session tools: {', '.join(names)}", flush=True)
                await connection.conversation.item.create(
                    item={
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": args.question}],
                    }
                )
                await connection.response.create()
            elif event.type == "response.function_call_arguments.done":
                if event.name == APP_TOOL["name"]:
                    now = datetime.datetime.now().strftime("%H:%M")
                    print(f"answering {event.name} myself", flush=True)
                    await connection.conversation.item.create(
                        item={
                            "type": "function_call_output",
                            "call_id": event.call_id,
                            "output": json.dumps({"time": now}),
                        }
                    )
                    await connection.response.create()
                else:
                    # A registered tool: the server runs it and answers the model.
                    print(f"the model calls {event.name}; the server answers it", flush=True)
            elif event.type == "response.output_text.delta":
                print(f"model: {event.delta}", flush=True)
            elif event.type == "response.done":
                calls = [o for o in event.response.output or [] if o.type == "function_call"]
                if not calls:
                    print("done", flush=True)
                    return


if __name__ == "__main__":
    asyncio.run(main())
