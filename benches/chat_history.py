#!/usr/bin/env python3
"""How long the server takes to answer a chat request that carries a long history, and whether
another character's request waits for it meanwhile (docs/reliability.md, "One request ...").

The server runs as a child process with two characters, Mio and Kai, each chatting through a
fake upstream served by this script (Python threads, outside the measured process), Mio with a
registered tool whose callback this script serves too. Mio first gets a kept turn (its model
calls the server's tool and the app's own), so that every later request of Mio's is put
together again with the kept turns. Then, for each size N:

  responses-N   a `/v1/responses` request (`store: false`) of N items: the person's message and
                N - 1 `function_call` items, every one with the kept turn's app call id (one
                run of the model's items, which the server reads and looks up once);
  chat-N        a `/v1/chat/completions` request of N messages at most: the person's message
                and (N - 1) / 2 assistant turns with a call, each answered (ids nothing kept
                has).

Each is sent `--repeat` times; the median wall time to the server's answer is printed (the
upstream answers at once), and, while each request runs, the longest time another character's
request (Kai's chat, on a connection of its own, sent every 50 ms) took.

usage: benches/chat_history.py [--bin PATH] [--sizes N,...] [--repeat N]
  --bin   the server binary (default: target/release/runtime-tools)
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


def free_server(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Upstream(BaseHTTPRequestHandler):
    """Mio's and Kai's upstream: a kept turn for Mio's first request, words for every other."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path.endswith("/responses"):
            if body.get("input") == [{"role": "user", "content": "first"}]:
                output = [
                    {"type": "function_call", "id": "fc_s", "call_id": "call_s",
                     "name": "get_weather", "arguments": "{}", "status": "completed"},
                    {"type": "function_call", "id": "fc_a", "call_id": "call_a",
                     "name": "app_clock", "arguments": "{}", "status": "completed"},
                ]
            else:
                output = [{"type": "message", "id": "msg_1", "role": "assistant",
                           "status": "completed",
                           "content": [{"type": "output_text", "text": "ok",
                                        "annotations": []}]}]
            answer = {"id": "resp_1", "object": "response", "status": "completed",
                      "output": output}
        else:
            answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": "ok"}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Callback(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        data = b'{"output": "sunny"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def post(port, path, body, timeout=600):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request("POST", path, data, {"content-type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, answer


def responses_body(n):
    items = [{"role": "user", "content": "hi"}]
    items += [{"type": "function_call", "id": f"fc_{k}", "call_id": "call_a",
               "name": "app_clock", "arguments": "{}"} for k in range(n - 1)]
    return json.dumps({"store": False, "input": items,
                       "tools": [{"type": "function", "name": "app_clock",
                                  "parameters": {"type": "object"}}]}).encode()


def chat_body(n):
    messages = [{"role": "user", "content": "hi"}]
    for k in range((n - 1) // 2):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"x_{k}", "type": "function",
             "function": {"name": "app_clock", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"x_{k}", "content": "10:00"})
    return json.dumps({"messages": messages}).encode()


def timed(port, path, body):
    """The request's wall time, and the longest another character's request took meanwhile."""
    done = threading.Event()
    longest = [0.0]

    def probe():
        while not done.is_set():
            start = time.monotonic()
            post(port, "/v1/chat/completions?character=Kai",
                 {"messages": [{"role": "user", "content": "hi"}]})
            longest[0] = max(longest[0], time.monotonic() - start)
            done.wait(0.05)

    prober = threading.Thread(target=probe)
    start = time.monotonic()
    prober.start()
    status, answer = post(port, path, body)
    elapsed = time.monotonic() - start
    done.set()
    prober.join()
    if status != 200:
        sys.exit(f"{path}: HTTP {status}: {answer[:300]!r}")
    return elapsed, longest[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/release/runtime-tools")
    parser.add_argument("--sizes", default="4000,8000,16000,65536")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    upstream = free_server(Upstream)
    callback = free_server(Callback)
    base = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(f'bind = "127.0.0.1:0"\n'
                 f'[[character]]\nname = "Mio"\n[character.chat]\nurl = "{base}"\n'
                 f'[[character]]\nname = "Kai"\n[character.chat]\nurl = "{base}"\n')
    config.close()
    server = subprocess.Popen([args.bin, "serve", "--workers", "2", "--config", config.name],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        status, answer = post(port, "/api/tools/register", {
            "name": "get_weather", "description": "weather", "role": "Mio",
            "parameters": {"type": "object"},
            "callback_url": f"http://127.0.0.1:{callback.server_address[1]}/weather"})
        assert status == 200, answer
        status, answer = post(port, "/v1/responses?character=Mio", {
            "input": "first", "tools": [{"type": "function", "name": "app_clock",
                                         "parameters": {"type": "object"}}]})
        assert status == 200 and b"call_a" in answer, answer
        print(f"{'scenario':<16} {'median s':>9} {'other request, longest s':>25}")
        for n in (int(s) for s in args.sizes.split(",")):
            for name, path, body in (
                (f"responses-{n}", "/v1/responses?character=Mio", responses_body(n)),
                (f"chat-{n}", "/v1/chat/completions?character=Mio", chat_body(n)),
            ):
                runs = [timed(port, path, body) for _ in range(args.repeat)]
                median = statistics.median(r[0] for r in runs)
                longest = max(r[1] for r in runs)
                print(f"{name:<16} {median:>9.3f} {longest:>25.3f}", flush=True)
    finally:
        server.terminate()
        server.wait()
        os.unlink(config.name)


if __name__ == "__main__":
    main()
