"""A Responses API app driven by a test: the official OpenAI Python SDK's `responses` client and
the OpenAI Agents SDK with its default model class, their base URL pointed at the server.

Reads one JSON command per line on stdin and answers each with one JSON line on stdout. Every
command but "quit" takes the client's settings: "base" (http://127.0.0.1:PORT/v1), "api_key",
"query" (the client's default_query).

  {"cmd": "create", "request": R}   client.responses.create(**R) -> {"response": RESPONSE}
  {"cmd": "stream", "request": R}   client.responses.stream(**R): every event the helper gives,
                                    and its final response -> {"events": [E, ...], "final": RESPONSE}
  {"cmd": "raw_stream", "request": R}  client.responses.create(stream=True, **R), read to the end
                                    -> {"events": [E, ...]}
  {"cmd": "agent", "input": TEXT, "streamed": bool, "store": bool?, "chain": bool?,
   "reasoning": bool?}
      an Agent (model "fake-model" from the default provider, with its own tool `app_clock`)
      run on TEXT after the previous agent run's items (its history, as the SDK keeps it), or
      with chain, continued by the previous run's last response id; Runner.run or
      Runner.run_streamed -> {"final_output", "items": [item types], "model_class",
      "last_response_id", "events": [stream event types]}
  {"cmd": "quit"}

Objects are the SDK's parsed objects dumped with the fields the server sent (`exclude_unset`);
errors and the client settings as `sdk_commands.py` says.
"""

import asyncio

from agents import (
    Agent,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models.multi_provider import MultiProvider
from openai.types.shared import Reasoning
from sdk_commands import client_of, dump, serve

MODEL = "fake-model"


@function_tool
def app_clock() -> str:
    """The app's own clock: the time where the person is."""
    return "10:00"


class Agents:
    """The Agents SDK's runs of one conversation."""

    def __init__(self):
        self.history = None
        self.last_response_id = None

    async def run(self, command):
        set_tracing_disabled(True)
        set_default_openai_api("responses")
        set_default_openai_client(client_of(command), use_for_tracing=False)
        settings = ModelSettings(store=command.get("store"))
        if command.get("reasoning"):
            settings = ModelSettings(
                store=command.get("store"),
                reasoning=Reasoning(effort="low", summary="auto"),
                response_include=["reasoning.encrypted_content"],
            )
        agent = Agent(
            name="Mio",
            instructions="You are Mio.",
            model=MODEL,
            tools=[app_clock],
            model_settings=settings,
        )
        chain = command.get("chain")
        if chain or self.history is None:
            run_input = command["input"]
        else:
            run_input = self.history + [{"role": "user", "content": command["input"]}]
        previous = self.last_response_id if chain else None
        events = []
        if command.get("streamed"):
            result = Runner.run_streamed(agent, run_input, previous_response_id=previous)
            async for event in result.stream_events():
                if event.type == "raw_response_event":
                    events.append(event.data.type)
        else:
            result = await Runner.run(agent, run_input, previous_response_id=previous)
        self.history = result.to_input_list()
        self.last_response_id = result.last_response_id
        return {
            "final_output": result.final_output,
            "items": [item.type for item in result.new_items],
            "model_class": type(MultiProvider().get_model(MODEL)).__name__,
            "last_response_id": result.last_response_id,
            "events": events,
        }


AGENTS = Agents()


async def handle(command):
    cmd = command["cmd"]
    if cmd == "create":
        response = await client_of(command).responses.create(**command["request"])
        return {"response": dump(response)}
    if cmd == "stream":
        events = []
        async with client_of(command).responses.stream(**command["request"]) as stream:
            async for event in stream:
                events.append(dump(event))
            final = await stream.get_final_response()
        return {"events": events, "final": dump(final)}
    if cmd == "raw_stream":
        stream = await client_of(command).responses.create(stream=True, **command["request"])
        return {"events": [dump(event) async for event in stream]}
    if cmd == "agent":
        return await AGENTS.run(command)
    return {"error": {"message": f"unknown command {cmd}"}}


asyncio.run(serve(handle))
