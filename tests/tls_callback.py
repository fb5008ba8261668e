"""An HTTPS plugin callback on 127.0.0.1 (Python's ssl, that is OpenSSL), with the test-only
self-signed certificate of tests/tls/.

Prints `listening PORT`, then one line per connection: `answered` when a request came over TLS
and was answered, or `handshake failed: REASON` when the client ended the TLS handshake.
"""

import json
import pathlib
import socket
import ssl
import sys

HERE = pathlib.Path(__file__).parent


def main() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(HERE / "tls" / "self-signed.pem", HERE / "tls" / "self-signed.key")
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening {listener.getsockname()[1]}", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            tls = context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as e:
            print(f"handshake failed: {e}", flush=True)
            conn.close()
            continue
        with tls:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                request += chunk
            body = json.dumps({"output": "over tls"}).encode()
            tls.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            print("answered", flush=True)


if __name__ == "__main__":
    sys.exit(main())
