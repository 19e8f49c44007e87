/**
 * A server-sent events parser (the WHATWG `text/event-stream` format) over a fetch body, so
 * the watch stream needs no EventSource (Node has none, and a browser's cannot send the
 * lease's token).
 */

export interface SseEvent {
  /** The `event:` field; `message` when the event named none. */
  event: string;
  /** The `data:` lines, joined with newlines. */
  data: string;
  /** The `id:` field, when there was one. */
  id?: string;
}

/** Turns decoded text, in chunks of any size, into events. */
export class SseParser {
  private buffer = "";
  private started = false;
  private afterCR = false;
  private event = "";
  private data: string[] = [];
  private id: string | undefined;

  /** Feeds the next chunk of text; returns the events it completed. */
  feed(chunk: string): SseEvent[] {
    if (!this.started && chunk.length > 0) {
      this.started = true;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    // A "\r\n" split between chunks: its "\n" ends no second line.
    if (this.afterCR && chunk.startsWith("\n")) chunk = chunk.slice(1);
    this.afterCR = false;
    this.buffer += chunk;
    const events: SseEvent[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (match === null) break;
      if (match[0] === "\r" && match.index === this.buffer.length - 1) {
        this.afterCR = true;
      }
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const event = this.line(line);
      if (event !== undefined) events.push(event);
    }
    return events;
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") {
      if (this.data.length === 0) {
        this.event = "";
        return undefined;
      }
      const event: SseEvent = { event: this.event || "message", data: this.data.join("\n") };
      if (this.id !== undefined) event.id = this.id;
      this.event = "";
      this.data = [];
      return event;
    }
    if (line.startsWith(":")) return undefined; // a comment: the keep-alive
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      default: // `retry` and unknown fields: nothing to do here
    }
    return undefined;
  }
}

/**
 * The events of a `text/event-stream` body, until it ends. `onBytes` is called for every
 * chunk read, keep-alive comments included (what an idle watchdog needs).
 */
export async function* readEvents(
  body: ReadableStream<Uint8Array>,
  onBytes: () => void = () => {},
): AsyncGenerator<SseEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  const parser = new SseParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      onBytes();
      yield* parser.feed(decoder.decode(value, { stream: true }));
    }
  } finally {
    // Stops the body (and so the connection) when the caller leaves early.
    reader.cancel().catch(() => {});
  }
}
