"""Validates OpenAI Realtime client events against the official GA schema.

Reads one JSON event per line on stdin and checks each against the `openai` package's
`RealtimeClientEvent` (a machine-readable copy of the GA client-event schema), refusing any
field the schema does not define. Exits 1 naming the first bad event.
"""

import json
import sys
import typing

from openai.types.realtime import RealtimeClientEvent
from pydantic import BaseModel

# RealtimeClientEvent is Annotated[Union[...], discriminator="type"]: one model per event type.
MODELS = {
    typing.get_args(model.model_fields["type"].annotation)[0]: model
    for model in typing.get_args(typing.get_args(RealtimeClientEvent)[0])
}


def extra_fields(model, path="event"):
    """Yields the paths of fields the schema does not define (the models allow extras)."""
    if isinstance(model, BaseModel):
        for name in (model.model_extra or {}):
            yield f"{path}.{name}"
        for name in type(model).model_fields:
            yield from extra_fields(getattr(model, name), f"{path}.{name}")
    elif isinstance(model, (list, tuple)):
        for i, item in enumerate(model):
            yield from extra_fields(item, f"{path}[{i}]")


def main():
    count = 0
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        event = json.loads(line)
        model_class = MODELS.get(event.get("type"))
        if model_class is None:
            print(f"unknown client event type {event.get('type')!r}", file=sys.stderr)
            return 1
        try:
            model = model_class.model_validate(event)
        except Exception as error:  # pydantic.ValidationError, with every failing field
            print(f"invalid client event {event.get('type')!r}: {error}", file=sys.stderr)
            return 1
        extras = list(extra_fields(model))
        if extras:
            print(f"client event {event.get('type')!r} has fields the schema lacks: {extras}",
                  file=sys.stderr)
            return 1
        count += 1
    print(f"{count} client events valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
