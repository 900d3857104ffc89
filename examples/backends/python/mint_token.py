#!/usr/bin/env python3
"""Mints a tutti access token with PyJWT and prints it.

A tutti token is a JWT signed with HS256 under the server's `auth.secret`
(or, with key rotation, under one of `auth.keys`, named by the `kid`
header). Its claims:

    room   the room id it is for, or "*" for every room
    sub    the participant's identity (at most 128 bytes)
    perms  a list of "speak", "listen", "admin"
    iat    issued at, seconds since the Unix epoch
    exp    expires at, seconds since the Unix epoch

Usage:

    TUTTI_AUTH_SECRET=... python3 mint_token.py ROOM IDENTITY \
        [--perms speak,listen] [--ttl 3600] [--kid KEY_ID]

With --kid, TUTTI_AUTH_SECRET is the secret of the `auth.keys` entry
with that id. See docs/api/backends.md.
"""

import argparse
import os
import sys
import time

import jwt

PERMS = ("speak", "listen", "admin")


def mint(secret, room, identity, perms, ttl, kid=None, now=None):
    """A token for `identity` in `room` with `perms`, valid for `ttl` seconds."""
    now = int(time.time()) if now is None else now
    claims = {"room": room, "sub": identity, "perms": list(perms), "iat": now, "exp": now + ttl}
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims, secret, algorithm="HS256", headers=headers)


def main():
    p = argparse.ArgumentParser(description="Mint a tutti access token (HS256 JWT).")
    p.add_argument("room", help='a room id (1 to 64 letters, digits, "-" or "_"), or "*" for every room')
    p.add_argument("identity", help="the participant's identity (the sub claim)")
    p.add_argument("--perms", default="speak,listen", help="comma-separated: speak, listen, admin")
    p.add_argument("--ttl", type=int, default=3600, help="seconds until it expires (default 3600)")
    p.add_argument("--kid", help="the id of the auth.keys entry whose secret TUTTI_AUTH_SECRET holds")
    args = p.parse_args()

    secret = os.environ.get("TUTTI_AUTH_SECRET", "")
    if len(secret.encode()) < 32:
        sys.exit("set TUTTI_AUTH_SECRET to the server's auth.secret (at least 32 bytes)")
    perms = [x.strip() for x in args.perms.split(",") if x.strip()]
    unknown = [x for x in perms if x not in PERMS]
    if unknown:
        sys.exit(f"unknown permission(s) {unknown}: use {', '.join(PERMS)}")
    if args.ttl < 0:
        sys.exit("--ttl must be at least 0")
    print(mint(secret, args.room, args.identity, perms, args.ttl, kid=args.kid))


if __name__ == "__main__":
    main()
