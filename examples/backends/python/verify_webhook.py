#!/usr/bin/env python3
"""Receives tutti's webhooks and verifies each one with PyJWT.

tutti POSTs each event as JSON (Content-Type: application/webhook+json)
with an `Authorization` header holding a JWT, HS256 under `webhooks.secret`
(or `auth.secret` when that is unset), whose claims are:

    iss     the server's `webhooks.api_key` (default "tutti")
    sha256  base64 (standard alphabet, padded) of the SHA-256 of the raw body
    iat     issued at, seconds since the Unix epoch
    exp     iat + 300

A receiver checks the signature, the expiry (60 s of clock skew allowed)
and that the raw body it got hashes to `sha256`; only then does it parse
the body. Each verified event is printed as one line of JSON; a request
that fails is answered 401 and reported on stderr.

Usage:

    TUTTI_WEBHOOKS_SECRET=... python3 verify_webhook.py [--host 127.0.0.1] [--port 9000]

(TUTTI_AUTH_SECRET is used when TUTTI_WEBHOOKS_SECRET is unset, as the
server does; TUTTI_WEBHOOKS_API_KEY sets the expected issuer.) Point
`webhooks.urls` at http://HOST:PORT/. See docs/api/backends.md.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt

MAX_BODY = 1 << 20
LEEWAY = 60


class Rejected(Exception):
    pass


def verify(secret, issuer, authorization, body):
    """The event in `body` if `authorization` is tutti's signature of it; else raises."""
    token = (authorization or "").strip()
    if token.startswith("Bearer "):
        token = token[len("Bearer ") :]
    if not token:
        raise Rejected("no Authorization header")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=["HS256"],
            issuer=issuer,
            leeway=LEEWAY,
            options={"require": ["iss", "sha256", "iat", "exp"]},
        )
    except jwt.PyJWTError as e:
        raise Rejected(f"bad token: {e}") from e
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    if not hmac.compare_digest(digest, str(claims["sha256"])):
        raise Rejected("the body does not match the signed sha256")
    return json.loads(body)


def handler(secret, issuer):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.answer(413, "body too large")
                return
            body = self.rfile.read(length)
            try:
                event = verify(secret, issuer, self.headers.get("Authorization"), body)
            except Rejected as e:
                print(f"rejected: {e}", file=sys.stderr, flush=True)
                self.answer(401, str(e))
                return
            print(json.dumps(event, sort_keys=True), flush=True)
            self.answer(200, "ok")

        def answer(self, status, text):
            data = (text + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


def main():
    p = argparse.ArgumentParser(description="Receive and verify tutti webhooks.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000, help="0 = any free port (printed)")
    args = p.parse_args()
    secret = os.environ.get("TUTTI_WEBHOOKS_SECRET") or os.environ.get("TUTTI_AUTH_SECRET", "")
    if len(secret.encode()) < 32:
        sys.exit("set TUTTI_WEBHOOKS_SECRET (or TUTTI_AUTH_SECRET) to the server's signing secret")
    issuer = os.environ.get("TUTTI_WEBHOOKS_API_KEY", "tutti")
    server = ThreadingHTTPServer((args.host, args.port), handler(secret, issuer))
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
