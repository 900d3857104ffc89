#!/usr/bin/env node
// Mints a tutti access token with jose and prints it.
//
// A tutti token is a JWT signed with HS256 under the server's `auth.secret`
// (or, with key rotation, under one of `auth.keys`, named by the `kid`
// header). Its claims:
//
//   room   the room id it is for, or "*" for every room
//   sub    the participant's identity (at most 128 bytes)
//   perms  a list of "speak", "listen", "admin"
//   iat    issued at, seconds since the Unix epoch
//   exp    expires at, seconds since the Unix epoch
//
// Usage:
//
//   TUTTI_AUTH_SECRET=... node mint-token.mjs ROOM IDENTITY [--perms speak,listen] [--ttl 3600] [--kid KEY_ID]
//
// With --kid, TUTTI_AUTH_SECRET is the secret of the `auth.keys` entry with
// that id. See docs/api/backends.md.

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { SignJWT } from 'jose';

const PERMS = ['speak', 'listen', 'admin'];

/** A token for `identity` in `room` with `perms`, valid for `ttl` seconds. */
export async function mint(secret, room, identity, perms, ttl, kid, now = Math.floor(Date.now() / 1000)) {
  const header = kid ? { alg: 'HS256', typ: 'JWT', kid } : { alg: 'HS256', typ: 'JWT' };
  return new SignJWT({ room, perms })
    .setProtectedHeader(header)
    .setSubject(identity)
    .setIssuedAt(now)
    .setExpirationTime(now + ttl)
    .sign(new TextEncoder().encode(secret));
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      perms: { type: 'string', default: 'speak,listen' },
      ttl: { type: 'string', default: '3600' },
      kid: { type: 'string' },
    },
  });
  if (positionals.length !== 2) fail('usage: node mint-token.mjs ROOM IDENTITY [--perms speak,listen] [--ttl 3600] [--kid ID]');
  const [room, identity] = positionals;
  const secret = process.env.TUTTI_AUTH_SECRET ?? '';
  if (Buffer.byteLength(secret) < 32) fail("set TUTTI_AUTH_SECRET to the server's auth.secret (at least 32 bytes)");
  const perms = values.perms.split(',').map((p) => p.trim()).filter(Boolean);
  const unknown = perms.filter((p) => !PERMS.includes(p));
  if (unknown.length) fail(`unknown permission(s) ${unknown.join(', ')}: use ${PERMS.join(', ')}`);
  const ttl = Number(values.ttl);
  if (!Number.isInteger(ttl) || ttl < 0) fail('--ttl is a whole number of seconds, at least 0');
  console.log(await mint(secret, room, identity, perms, ttl, values.kid));
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
