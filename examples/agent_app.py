"""An agent app that talks to its model through runtime-tools' Responses API, with the OpenAI
Agents SDK (`pip install openai-agents`) and its default model class (the Responses API).

It points the SDK's default client at the server instead of the model's, gives the agent a tool
of its own, asks one question and prints the answer as it streams in. The server adds the tools
plugins registered and runs their calls itself; the agent runs only its own tool.

    python3 examples/agent_app.py [--server http://127.0.0.1:48911/v1] [--character Mio]
                                  [--model MODEL] [--question "..."]

The character needs a [character.chat] in the server's configuration (see the README). When
that names an `api_key_env`, the server holds the key and the app's own is unused.
"""

import argparse
import asyncio
import datetime

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool
def app_clock() -> str:
    """The current time where the user is."""
    print("answering app_clock myself", flush=True)
    return datetime.datetime.now().strftime("%H:%M")


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:48911/v1")
    parser.add_argument("--character", default=None)
    parser.add_argument("--model", default="qwen2.5")
    parser.add_argument("--question", default="What is the weather in Tokyo?")
    args = parser.parse_args()

    client = AsyncOpenAI(
        api_key="held-by-the-server",
        base_url=args.server,
        default_query={"character": args.character} if args.character else None,
    )
    set_default_openai_client(client, use_for_tracing=False)
    # Traces would go to OpenAI's own service: off, the model is local.
    set_tracing_disabled(True)
    agent = Agent(name="Mio", instructions="You are Mio.", model=args.model, tools=[app_clock])
    result = Runner.run_streamed(agent, args.question)
    speaking = False
    async for event in result.stream_events():
        if event.type != "raw_response_event":
            continue
        # Words as they arrive, across the rounds in which the server ran tools: one line per
        # message of the model's.
        if event.data.type == "response.output_text.delta":
            if not speaking:
                print("model: ", end="", flush=True)
                speaking = True
            print(event.data.delta, end="", flush=True)
        elif event.data.type == "response.output_text.done":
            print(flush=True)
            speaking = False
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
