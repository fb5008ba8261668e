#!/usr/bin/env python3
"""Instructions the server executes per chat request, counted by valgrind's callgrind: figures
that hold still on a loaded machine, where wall-clock latency does not.

The server runs under `valgrind --tool=callgrind`, against a fake upstream and a tool callback
served by this script (Python threads, outside the counted process). For each scenario, after a
few warm-up requests, every request is counted on its own: the counters are zeroed before it is
sent (`callgrind_control -z`) and dumped (`callgrind_control -d`) when the part measured is done.
A dump's total (`Ir`, instructions executed by every thread of the server) is one sample; the
median of each scenario is printed, and the dumps are kept for `callgrind_annotate`.

Scenarios, for chat completions (`chat-*`) and the Responses API (`responses-*`):
  *-ttft        a streamed request the model answers in words in its one round, up to its first
                text: the upstream holds the rest of its stream until the text has reached the
                client and the counters were dumped (the bench's `ttft` scenarios);
  *-tool-ttft   a streamed request whose model calls the registered tool once, up to the first
                text of the second round;
  *-tool        a whole request whose model calls the registered tool once (two upstream rounds
                and one callback), up to its answer (the bench's one-round request).

usage: benches/http/callgrind.py [--bin PATH] [--requests N] [--warmup N] [--out DIR]
                                 [--scenarios NAME,...]
  --bin   the server binary (default: target/dist/runtime-tools, as the benchmarks run it)
  --out   where the dumps are kept (default: a new temporary directory)
Several binaries: run it once per binary; counts do not depend on the machine's load.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = "get_weather"
WORDS = "It is sunny and 28 degrees in Tokyo."
WORDS_PLEASE = "answer in words"


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def chat_answers():
    header = {"id": "chatcmpl-bench", "created": 1_700_000_000, "model": "bench-model"}
    call = dict(header, object="chat.completion", choices=[{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_bench", "type": "function", "function": {
                    "name": TOOL, "arguments": "{\"city\":\"Tokyo\",\"unit\":\"c\"}"}}]}}],
        usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60})
    words = dict(header, object="chat.completion", choices=[{
        "index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": WORDS}}],
        usage={"prompt_tokens": 70, "completion_tokens": 12, "total_tokens": 82})

    def chunk(delta, finish=None):
        return "data: " + compact(dict(header, object="chat.completion.chunk", choices=[
            {"index": 0, "delta": delta, "finish_reason": finish}])) + "\n\n"

    parts = WORDS.split(" ")
    words_list = [w + " " for w in parts[:-1]] + [parts[-1]]
    first = chunk({"role": "assistant", "content": ""}) + chunk({"content": words_list[0]})
    rest = "".join(chunk({"content": w}) for w in words_list[1:]) + chunk({}, "stop")
    rest += "data: " + compact(dict(header, object="chat.completion.chunk", choices=[], usage={
        "prompt_tokens": 70, "completion_tokens": 12, "total_tokens": 82})) + "\n\ndata: [DONE]\n\n"
    return compact(call), compact(words), first, rest


def responses_answers():
    def response(rid, output, status="completed"):
        return {"id": rid, "object": "response", "created_at": 1_700_000_000, "status": status,
                "model": "bench-model", "output": output,
                "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}}

    call = response("resp_call", [{
        "type": "function_call", "id": "fc_bench", "call_id": "call_bench", "name": TOOL,
        "arguments": "{\"city\":\"Tokyo\",\"unit\":\"c\"}", "status": "completed"}])
    message = {"type": "message", "id": "msg_bench", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": WORDS, "annotations": []}]}
    words = response("resp_words", [message])
    opening = response("resp_words", [], "in_progress")
    parts = WORDS.split(" ")
    words_list = [w + " " for w in parts[:-1]] + [parts[-1]]
    events = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
        {"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "message", "id": "msg_bench", "role": "assistant", "status": "in_progress",
            "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "item_id": "msg_bench",
         "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
    ]
    first_text = len(events)
    events += [{"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_bench",
                "content_index": 0, "delta": w} for w in words_list]
    events += [
        {"type": "response.output_text.done", "output_index": 0, "item_id": "msg_bench",
         "content_index": 0, "text": WORDS},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.completed", "response": words},
    ]
    frames = []
    for number, event in enumerate(events):
        event["sequence_number"] = number
        frames.append(f"event: {event['type']}\ndata: {compact(event)}\n\n")
    return (compact(call), compact(words), "".join(frames[:first_text + 1]),
            "".join(frames[first_text + 1:]))


ANSWERS = {"/v1/chat/completions": chat_answers(), "/v1/responses": responses_answers()}
# Set by the client once the first text arrived (and was counted): the stream goes on.
GATE = threading.Event()


class Fake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path.startswith("/tools/"):
            return self.whole(b'{"output": {"temperature_c": 28}, "is_error": false}')
        request = json.loads(body)
        text = compact(request)
        words = ('"role":"tool"' in text or '"function_call_output"' in text
                 or WORDS_PLEASE in text)
        call, whole, first, rest = ANSWERS[self.path]
        if not words:
            return self.whole(call.encode())
        if not request.get("stream"):
            return self.whole(whole.encode())
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.chunk(first.encode())
        GATE.wait(60)
        GATE.clear()
        self.chunk(rest.encode())
        self.wfile.write(b"0\r\n\r\n")

    def whole(self, data):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def question(path, words, stream):
    content = WORDS_PLEASE if words else "What is the weather in Tokyo?"
    if path == "/v1/chat/completions":
        body = {"model": "bench-model", "messages": [{"role": "user", "content": content}]}
    else:
        body = {"model": "bench-model", "input": content}
    if stream:
        body["stream"] = True
    return compact(body)


def control(flag, pid):
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def one(conn, path, words, stream, pid, counted):
    """One request; the counters zeroed before it and dumped after the part measured."""
    if counted:
        control("-z", pid)
    conn.request("POST", path, body=question(path, words, stream),
                 headers={"content-type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        sys.exit(f"{path}: HTTP {response.status}: {response.read()[:300]!r}")
    if not stream:
        data = response.read()
        if WORDS.encode() not in data:
            sys.exit(f"{path}: the answer lacks the words: {data[:300]!r}")
        if counted:
            control("-d", pid)
        return
    seen = b""
    while b"It " not in seen:
        data = response.read1(65536)
        if not data:
            sys.exit(f"{path}: the stream ended without text: {seen[:300]!r}")
        seen += data
    if counted:
        control("-d", pid)
    GATE.set()
    while response.read1(65536):
        pass


def totals(out, pid):
    """Instructions of each dump of `pid`, in the order dumped."""
    dumps = []
    for name in os.listdir(out):
        prefix = f"callgrind.out.{pid}."
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            dumps.append((int(name[len(prefix):]), os.path.join(out, name)))
    counts = []
    for _, path in sorted(dumps):
        with open(path) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    counts.append(int(line.split()[1]))
                    break
    return counts


def main():
    parser = argparse.ArgumentParser()
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--bin", default=os.path.join(root, "target", "dist", "runtime-tools"))
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--scenarios", default=None)
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="chat-callgrind.")
    os.makedirs(out, exist_ok=True)

    fake = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{fake.server_address[1]}/v1"
    config = os.path.join(out, "chat.toml")
    with open(config, "w") as f:
        f.write(f'bind = "127.0.0.1:0"\n[[character]]\nname = "Mio"\n[character.chat]\n'
                f'url = "{upstream}"\n')
    log = open(os.path.join(out, "server.log"), "w")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.out.%p",
         "--dump-instr=no", args.bin, "serve", "--config", config],
        stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        address = None
        for line in server.stdout:
            if line.startswith("listening on http://"):
                address = line.strip()[len("listening on http://"):]
                break
        if address is None:
            sys.exit("the server did not start (see server.log)")
        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
        host, port = address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        register = {
            "name": TOOL, "description": "Benchmark tool: get the current weather for a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]},
            "callback_url": f"http://127.0.0.1:{fake.server_address[1]}/tools/{TOOL}",
            "role": None, "source": "plugin:bench", "timeout_seconds": 30}
        conn.request("POST", "/api/tools/register", body=compact(register),
                     headers={"content-type": "application/json"})
        answer = conn.getresponse().read()
        if b'"ok":true' not in answer.replace(b" ", b""):
            sys.exit(f"the tool did not register: {answer!r}")

        scenarios = []
        for prefix, path in (("chat", "/v1/chat/completions"), ("responses", "/v1/responses")):
            scenarios += [(f"{prefix}-ttft", path, True, True),
                          (f"{prefix}-tool-ttft", path, False, True),
                          (f"{prefix}-tool", path, False, False)]
        if args.scenarios:
            wanted = args.scenarios.split(",")
            scenarios = [s for s in scenarios if s[0] in wanted]
        order = []
        for name, path, words, stream in scenarios:
            for _ in range(args.warmup):
                one(conn, path, words, stream, server.pid, False)
            for _ in range(args.requests):
                one(conn, path, words, stream, server.pid, True)
                order.append(name)
        time.sleep(0.5)
        counts = totals(out, server.pid)
        if len(counts) < len(order):
            sys.exit(f"{len(counts)} dumps for {len(order)} requests in {out}")
        # The dumps asked for are the last ones (a dump at exit may follow).
        counts = counts[:len(order)]
        print(f"# {args.bin}: instructions per request (callgrind Ir, every thread), "
              f"median of {args.requests} (min-max); dumps in {out}")
        for name, *_ in scenarios:
            values = [c for n, c in zip(order, counts) if n == name]
            print(f"{name:<20} {statistics.median(values):>12.0f}  "
                  f"({min(values)}-{max(values)})")
    finally:
        server.terminate()
        server.wait(timeout=60)
        fake.shutdown()


if __name__ == "__main__":
    main()
