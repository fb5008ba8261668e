"""Judges schemas and instances with the reference Python implementation of JSON Schema.

Reads one JSON object per line on stdin: {"schema": S} asks whether S is a valid draft 2020-12
schema; {"schema": S, "instance": I} asks whether I is valid under S, with formats asserted.
Writes one verdict per line: "schema-invalid", "valid" or "invalid".
"""

import json
import sys

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

for line in sys.stdin:
    request = json.loads(line)
    schema = request["schema"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        print("schema-invalid")
        continue
    if "instance" not in request:
        print("valid")
        continue
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    print("valid" if validator.is_valid(request["instance"]) else "invalid")
