"""A text chat app that talks to its chat model through runtime-tools, with the official OpenAI
Python SDK (`pip install openai`).

It points the SDK's base URL at the server instead of the model's, declares a tool of its own,
asks one question and prints the answer as it streams in. The server adds the tools plugins
registered and runs their calls itself (the model is asked again with their results); the app
answers only its own tool's calls.

    python3 examples/chat_app.py [--server http://127.0.0.1:48911/v1] [--character Mio]
                                 [--model MODEL] [--question "..."]

The character needs a [character.chat] in the server's configuration (see the README). When
that names an `api_key_env`, the server holds the key and the app's own is unused.
"""

import argparse
import datetime
import json

from openai import OpenAI

# The app's own tool: answered here, never by the server.
APP_TOOL = {
    "type": "function",
    "function": {
        "name": "app_clock",
        "description": "The current time where the user is.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:48911/v1")
    parser.add_argument("--character", default=None)
    parser.add_argument(
        "--model", default="", help="default: the character's chat.model in the configuration"
    )
    parser.add_argument("--question", default="What is the weather in Tokyo?")
    args = parser.parse_args()

    client = OpenAI(
        api_key="held-by-the-server",
        base_url=args.server,
        default_query={"character": args.character} if args.character else None,
    )
    messages = [{"role": "user", "content": args.question}]
    # An empty model is the server's to fill in (the character's `chat.model`).
    request = {"model": args.model, "messages": messages, "tools": [APP_TOOL]}
    while True:
        print("model: ", end="", flush=True)
        with client.chat.completions.stream(**request) as stream:
            for event in stream:
                # Words as they arrive, across the rounds in which the server ran tools.
                if event.type == "content.delta":
                    print(event.delta, end="", flush=True)
            message = stream.get_final_completion().choices[0].message
        print(flush=True)
        if not message.tool_calls:
            print("done", flush=True)
            return
        # Only the app's own calls reach it; the server ran the plugins' already.
        messages.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        for call in message.tool_calls:
            print(f"answering {call.function.name} myself", flush=True)
            now = datetime.datetime.now().strftime("%H:%M")
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"time": now})}
            )


if __name__ == "__main__":
    main()
