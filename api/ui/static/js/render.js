// Messages as DOM: Markdown through marked, sanitized by DOMPurify, code by highlight.js
// (the three vendored scripts, api/ui/static/vendor/).

/** Markdown `text` as sanitized HTML in `element`; `highlight`: color its code blocks too
 *  (done once a reply ends: it is the costly part, and a half-written block would flicker). */
export function renderMarkdown(element, text, highlight) {
  element.innerHTML = window.DOMPurify.sanitize(window.marked.parse(text, { gfm: true, breaks: false }));
  if (highlight) {
    element.querySelectorAll("pre code").forEach((block) => window.hljs.highlightElement(block));
  }
}

function div(className, parent) {
  const element = document.createElement("div");
  element.className = className;
  if (parent) parent.appendChild(element);
  return element;
}

/** The element of one message, with `update(message, finished)` redrawing it. */
export function messageView(message) {
  const element = div(`message ${message.role}`);
  element.dataset.role = message.role;
  div("role", element).textContent = message.role === "user" ? "You" : "Assistant";
  const reasoning = document.createElement("details");
  reasoning.className = "reasoning";
  reasoning.hidden = true;
  reasoning.innerHTML = "<summary>Thinking</summary>";
  const thoughts = div("thoughts", reasoning);
  element.appendChild(reasoning);
  const body = div("body", element);
  const error = div("error", element);
  error.setAttribute("role", "alert");
  const stats = div("stats", element);

  function update(current, finished) {
    if (current.role === "user") {
      body.textContent = current.content;  // what the person typed, as typed
    } else {
      // A structured reply is JSON, not prose: shown as a code block, as it came.
      const text = current.format === "json" ? "```json\n" + (current.content || "") + "\n```" : current.content || "";
      renderMarkdown(body, text, finished);
    }
    reasoning.hidden = !current.reasoning;
    thoughts.textContent = current.reasoning || "";
    // Open while the model thinks and nothing of the answer has come; folded after.
    reasoning.open = !finished && !current.content;
    error.hidden = !current.error;
    error.textContent = current.error || "";
    stats.hidden = !current.stats;
    stats.textContent = current.stats ? describeStats(current.stats) : "";
  }

  update(message, true);
  return { element, update };
}

/** "12.3 tok/s · first token 0.21 s · 18 prompt + 40 completion tokens · stopped". */
export function describeStats(stats) {
  const parts = [];
  if (stats.tokens_per_second != null) parts.push(`${stats.tokens_per_second.toFixed(1)} tok/s`);
  if (stats.ttft != null) parts.push(`first token ${stats.ttft.toFixed(2)} s`);
  if (stats.prompt_tokens != null) {
    parts.push(`${stats.prompt_tokens} prompt + ${stats.completion_tokens} completion tokens`);
  }
  if (stats.finish_reason) parts.push(stats.finish_reason);
  return parts.join(" · ");
}
