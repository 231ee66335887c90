#!/usr/bin/env python3
"""A second, independent reading of the relay's JSON values: Google's protobuf library
(`google.protobuf.json_format`) checks that each is the proto3 canonical JSON of the envelope
the ledger stored, in both directions.

    json_mapping.py < PAIRS

PAIRS: one JSON object a line, {"protobuf": <the stored envelope, base64>, "json": <the
published value, as text>}. For each, the JSON parsed strictly (an unknown field fails)
must equal the decoded envelope, and the envelope printed as canonical JSON
(`MessageToDict`: lowerCamelCase, 64-bit integers as strings, enums by name, defaults left
out) must equal the published JSON. Run with the Python consumer's venv (deploy/test's
LEDGER_PYTHON), whose events.proto classes it reuses.

Exits 0 when every pair holds; otherwise 1, with one line per pair that does not.
"""

import base64
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "proto/consumers/python"))

from consumer import generated_classes  # noqa: E402
from google.protobuf import json_format  # noqa: E402


def check(events, line):
    pair = json.loads(line)
    stored = events.Envelope.FromString(base64.b64decode(pair["protobuf"]))
    try:
        parsed = json_format.Parse(pair["json"], events.Envelope())
    except json_format.ParseError as error:
        return f"{stored.event_id}: not the canonical JSON of an envelope: {error}"
    if parsed != stored:
        return f"{stored.event_id}: the JSON reads as another envelope than the stored one"
    printed = json_format.MessageToDict(stored)
    if printed != json.loads(pair["json"]):
        return f"{stored.event_id}: canonical JSON {printed} but published {pair['json']}"
    return None


def main():
    events = generated_classes()
    failures = 0
    pairs = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        pairs += 1
        problem = check(events, line)
        if problem:
            failures += 1
            print(problem)
    print(f"{pairs - failures} of {pairs} pairs are the canonical JSON of their envelope")
    sys.exit(1 if failures or not pairs else 0)


if __name__ == "__main__":
    main()
