// The room WebSocket's messages (protocol 1), as docs/api/websocket.md
// describes them and docs/api/websocket.schema.json defines them. Types
// only: nothing here is emitted as code. A server may add message types
// and fields within a version; the client skips what it does not know.
export {};
