// POST /v1/chat/completions with stream: true, read as server-sent events.

/** An error answer of the API: its HTTP status and the message its error body gives. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function authHeaders(apiKey) {
  return apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
}

/** The message of an OpenAI-shaped error body ({"error": {"message": ...}}), else the text. */
function errorMessage(text, status) {
  try {
    const body = JSON.parse(text);
    if (body && body.error && body.error.message) return body.error.message;
  } catch {
    // not JSON: the text itself
  }
  return text.trim() || `HTTP ${status}`;
}

/** The served models' ids (GET /v1/models). */
export async function listModels(apiKey) {
  const response = await fetch("/v1/models", { headers: authHeaders(apiKey) });
  const text = await response.text();
  if (!response.ok) throw new ApiError(response.status, errorMessage(text, response.status));
  return JSON.parse(text).data.map((model) => model.id);
}

/** Each chunk of a streamed chat completion, until `data: [DONE]`. Aborting `signal`
 *  closes the connection, which ends the generation in the server's engine. */
export async function* streamChat(body, apiKey, signal) {
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders(apiKey) },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!response.ok) throw new ApiError(response.status, errorMessage(await response.text(), response.status));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const data = eventData(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (data === null) continue;
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      // An error after the stream began comes as an event of its own.
      if (chunk.error) throw new ApiError(response.status, chunk.error.message || "the generation failed");
      yield chunk;
    }
  }
}

/** The data of one SSE event (its `data:` lines joined), or null for a comment. */
function eventData(event) {
  const lines = event.split("\n").filter((line) => line.startsWith("data:"));
  if (lines.length === 0) return null;
  return lines.map((line) => line.slice(5).replace(/^ /, "")).join("\n");
}
