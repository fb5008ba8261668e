"""Validates Gemini Live client messages against the official `google-genai` SDK's own types.

Reads one JSON message per line on stdin and checks each with `google.genai.types.LiveClientMessage`
(JSON mode: bytes as base64, as on the wire). The SDK's models forbid fields they do not define,
so a misspelt or invented field fails too. Exits 1 naming the first bad message.
"""

import json
import sys

from google.genai import types


def main():
    count = 0
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            types.LiveClientMessage.model_validate_json(line)
        except Exception as error:  # pydantic.ValidationError, with every failing field
            print(f"invalid client message {line[:300]}: {error}", file=sys.stderr)
            return 1
        kinds = [key for key, value in json.loads(line).items() if value is not None]
        if len(kinds) != 1:
            print(f"a client message carries exactly one of its kinds, not {kinds}", file=sys.stderr)
            return 1
        count += 1
    print(f"{count} client messages valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
