#!/usr/bin/env node
// Receives tutti's webhooks and verifies each one with jose.
//
// tutti POSTs each event as JSON (Content-Type: application/webhook+json)
// with an `Authorization` header holding a JWT, HS256 under
// `webhooks.secret` (or `auth.secret` when that is unset), whose claims are:
//
//   iss     the server's `webhooks.api_key` (default "tutti")
//   sha256  base64 (standard alphabet, padded) of the SHA-256 of the raw body
//   iat     issued at, seconds since the Unix epoch
//   exp     iat + 300
//
// A receiver checks the signature, the expiry (60 s of clock skew allowed)
// and that the raw body it got hashes to `sha256`; only then does it parse
// the body. Each verified event is printed as one line of JSON; a request
// that fails is answered 401 and reported on stderr.
//
// Usage:
//
//   TUTTI_WEBHOOKS_SECRET=... node verify-webhook.mjs [--host 127.0.0.1] [--port 9000]
//
// (TUTTI_AUTH_SECRET is used when TUTTI_WEBHOOKS_SECRET is unset, as the
// server does; TUTTI_WEBHOOKS_API_KEY sets the expected issuer.) Point
// `webhooks.urls` at http://HOST:PORT/. See docs/api/backends.md.

import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { jwtVerify } from 'jose';

const MAX_BODY = 1 << 20;
const LEEWAY = 60;

/** The event in `body` (a Buffer) if `authorization` is tutti's signature of it; else throws. */
export async function verify(key, issuer, authorization, body) {
  let token = (authorization ?? '').trim();
  if (token.startsWith('Bearer ')) token = token.slice('Bearer '.length);
  if (!token) throw new Error('no Authorization header');
  let payload;
  try {
    ({ payload } = await jwtVerify(token, key, {
      algorithms: ['HS256'],
      issuer,
      clockTolerance: LEEWAY,
      requiredClaims: ['iss', 'sha256', 'iat', 'exp'],
    }));
  } catch (e) {
    throw new Error(`bad token: ${e.code ?? e.message}`);
  }
  const digest = Buffer.from(createHash('sha256').update(body).digest('base64'));
  const signed = Buffer.from(String(payload.sha256));
  if (digest.length !== signed.length || !timingSafeEqual(digest, signed)) {
    throw new Error('the body does not match the signed sha256');
  }
  return JSON.parse(body.toString('utf8'));
}

function main() {
  const { values } = parseArgs({
    options: { host: { type: 'string', default: '127.0.0.1' }, port: { type: 'string', default: '9000' } },
  });
  const secret = process.env.TUTTI_WEBHOOKS_SECRET || process.env.TUTTI_AUTH_SECRET || '';
  if (Buffer.byteLength(secret) < 32) {
    console.error("set TUTTI_WEBHOOKS_SECRET (or TUTTI_AUTH_SECRET) to the server's signing secret");
    process.exit(1);
  }
  const key = new TextEncoder().encode(secret);
  const issuer = process.env.TUTTI_WEBHOOKS_API_KEY || 'tutti';
  const answer = (res, status, text) => res.writeHead(status, { 'Content-Type': 'text/plain' }).end(`${text}\n`);
  const server = createServer((req, res) => {
    if (req.method !== 'POST') return answer(res, 405, 'POST only');
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) req.destroy();
      else chunks.push(c);
    });
    req.on('end', async () => {
      try {
        const event = await verify(key, issuer, req.headers.authorization, Buffer.concat(chunks));
        console.log(JSON.stringify(event));
        answer(res, 200, 'ok');
      } catch (e) {
        console.error(`rejected: ${e.message}`);
        answer(res, 401, e.message);
      }
    });
  });
  server.listen(Number(values.port), values.host, () => {
    const { address, port } = server.address();
    console.log(`listening on http://${address}:${port}/`);
  });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
