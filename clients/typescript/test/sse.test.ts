// The event-stream parser, on input cut at every possible place.
import assert from "node:assert/strict";
import { test } from "node:test";
import { SseParser, readEvents, type SseEvent } from "leasehold";

const STREAM =
  "\uFEFF: watching\n\n" +
  ": keep-alive\r\n\r\n" +
  "event: lost\r\n" +
  'data: {"lease_id":"x","reason":"force_released"}\r\n\r\n' +
  "data: one\rdata: two\r\rid: 7\nevent:  spaced\ndata\n\n" +
  "retry: 1000\nunknown: field\n\n" +
  "event: cut\ndata: never finished";

const EXPECTED: SseEvent[] = [
  { event: "lost", data: '{"lease_id":"x","reason":"force_released"}' },
  { event: "message", data: "one\ntwo" },
  { event: " spaced", data: "", id: "7" },
];

function parse(chunks: string[]): SseEvent[] {
  const parser = new SseParser();
  return chunks.flatMap((chunk) => parser.feed(chunk));
}

test("parses events, comments, CR/LF/CRLF line ends, multi-line data; drops an unfinished event", () => {
  assert.deepEqual(parse([STREAM]), EXPECTED);
});

test("the same events whatever the chunking (every split point, and one character at a time)", () => {
  for (let i = 0; i <= STREAM.length; i++) {
    assert.deepEqual(parse([STREAM.slice(0, i), STREAM.slice(i)]), EXPECTED, `split at ${i}`);
  }
  assert.deepEqual(parse([...STREAM]), EXPECTED);
});

test("readEvents decodes UTF-8 split across chunks", async () => {
  const bytes = new TextEncoder().encode("event: lost\ndata: {\"lock\":\"d\u00e9ploy\u{1F512}\"}\n\n");
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const byte of bytes) controller.enqueue(Uint8Array.of(byte));
      controller.close();
    },
  });
  let chunks = 0;
  const events: SseEvent[] = [];
  for await (const event of readEvents(body, () => chunks++)) events.push(event);
  assert.deepEqual(events, [{ event: "lost", data: '{"lock":"d\u00e9ploy\u{1F512}"}' }]);
  assert.equal(chunks, bytes.length);
});
