"""Runs an MCP server on stdio and tells a test every message that passes, both ways.

usage: mcp_tap.py PORT COMMAND [ARG...]

Connects to 127.0.0.1:PORT (the test listens there), starts COMMAND, and passes its stdin to it
and its stdout back unchanged, line by line (MCP's stdio transport is one JSON-RPC message per
line). For each message it first sends the test one JSON line: {"to": "server", "message": M} for
what the client wrote, {"to": "client", "message": M} for what the server answered. It exits with
the server.
"""

import json
import socket
import subprocess
import sys
import threading


def main():
    port = int(sys.argv[1])
    report = socket.create_connection(("127.0.0.1", port)).makefile("w", encoding="utf-8")
    lock = threading.Lock()
    server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def tell(to, line):
        try:
            message = json.loads(line)
        except ValueError:
            message = line.decode("utf-8", "replace")
        with lock:
            report.write(json.dumps({"to": to, "message": message}) + "\n")
            report.flush()

    def pump(source, sink, to):
        for line in iter(source.readline, b""):
            tell(to, line)
            sink.write(line)
            sink.flush()
        sink.close()

    threading.Thread(target=pump, args=(sys.stdin.buffer, server.stdin, "server"), daemon=True).start()
    pump(server.stdout, sys.stdout.buffer, "client")
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
