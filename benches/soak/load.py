"""Steady load for benches/soak/run.sh: a local plugin callback and 8 client threads looping
register / list / invoke / unregister against the server at ADDR for DURATION seconds. Prints
the running request count once a second, and ERROR lines for any unexpected answer."""
import http.client, http.server, json, socketserver, sys, threading, time

addr, duration = sys.argv[1], float(sys.argv[2])
host, port = addr.rsplit(":", 1)

class Callback(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["content-length"])))
        body = json.dumps({"output": {"echo": call["arguments"]}, "is_error": False}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

callback = Server(("127.0.0.1", 0), Callback)
threading.Thread(target=callback.serve_forever, daemon=True).start()
callback_url = f"http://127.0.0.1:{callback.server_address[1]}/cb"

count = 0
lock = threading.Lock()
deadline = time.monotonic() + duration

def client(n):
    global count
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    def call(method, path, body=None):
        headers = {"content-type": "application/json"} if body is not None else {}
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            print(f"ERROR {method} {path}: {r.status} {data[:200]!r}", flush=True)
        return json.loads(data)
    i = 0
    while time.monotonic() < deadline:
        name = f"soak_{n}_{i % 50}"
        call("POST", "/api/tools/register", {"name": name, "description": "soak " * 20,
             "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
             "callback_url": callback_url, "source": f"plugin:soak{n}"})
        call("GET", "/api/tools")
        result = call("POST", "/api/tools/invoke", {"name": name, "arguments": {"q": "x" * 100}})
        if result.get("is_error"):
            print(f"ERROR invoke: {result}", flush=True)
        if i % 3 == 0:
            call("POST", "/api/tools/unregister", {"name": name})
        i += 1
        with lock:
            count += 4 if i % 3 == 1 else 3

threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    time.sleep(1)
    print(count, flush=True)
print(count, flush=True)
