// The chat page: the same public API any client uses (/v1/models, /v1/chat/completions
// streamed), with the API key when one is set. State lives in local storage (storage.js).
import { messageView } from "./render.js";
import * as panel from "./settings.js";
import * as storage from "./storage.js";
import { ApiError, listModels, streamChat } from "./stream.js";

const $ = (id) => document.getElementById(id);

const state = {
  settings: storage.loadSettings(),
  conversations: storage.loadConversations(),
  current: null,  // the open conversation
  model: null,    // the served model's id, from /v1/models
  running: null,  // the AbortController of the generation under way
};

function currentConversation() {
  let conversation = state.conversations.find((c) => c.id === state.current);
  if (!conversation) {
    conversation = storage.newConversation();
    state.conversations.unshift(conversation);
    state.current = conversation.id;
  }
  return conversation;
}

function keep() {
  // Empty conversations are not worth a line in the list once another is opened.
  state.conversations = state.conversations.filter((c) => c.messages.length || c.id === state.current);
  storage.saveConversations(state.conversations);
  storage.saveCurrentId(state.current);
}

// ---- the conversation list and messages ---------------------------------------------------

function showConversations() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of state.conversations) {
    if (!conversation.messages.length && conversation.id !== state.current) continue;
    const item = document.createElement("li");
    item.classList.toggle("current", conversation.id === state.current);
    const open = document.createElement("button");
    open.className = "open";
    open.textContent = conversation.title;
    open.addEventListener("click", () => openConversation(conversation.id));
    const remove = document.createElement("button");
    remove.className = "delete";
    remove.textContent = "×";
    remove.title = "Delete this conversation";
    remove.setAttribute("aria-label", `Delete ${conversation.title}`);
    remove.addEventListener("click", () => deleteConversation(conversation.id));
    item.append(open, remove);
    list.appendChild(item);
  }
}

function showMessages() {
  const container = $("messages");
  container.replaceChildren();
  for (const message of currentConversation().messages) {
    container.appendChild(messageView(message).element);
  }
  container.scrollTop = container.scrollHeight;
}

function openConversation(id) {
  if (state.running) return;  // one generation at a time; stop it first
  state.current = id;
  keep();
  showConversations();
  showMessages();
  $("input").focus();
}

function deleteConversation(id) {
  if (state.running && id === state.current) return;
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (id === state.current) state.current = null;
  currentConversation();
  keep();
  showConversations();
  showMessages();
}

function startNewConversation() {
  if (state.running) return;
  const conversation = storage.newConversation();
  state.conversations.unshift(conversation);
  openConversation(conversation.id);
}

// ---- sending ----------------------------------------------------------------------------

/** The dialogue so far, for the request: the system prompt, then every turn but `reply` (the
 *  one being written) and replies that failed or were stopped before their first word. */
function requestMessages(conversation, reply) {
  const messages = [];
  if (state.settings.system.trim()) messages.push({ role: "system", content: state.settings.system });
  for (const message of conversation.messages) {
    if (message === reply || (message.role === "assistant" && !message.content)) continue;
    messages.push({ role: message.role, content: message.content });
  }
  return messages;
}

async function servedModel() {
  if (!state.model) {
    state.model = (await listModels(state.settings.api_key))[0];
    $("model").textContent = state.model;
  }
  return state.model;
}

function setRunning(controller) {
  state.running = controller;
  $("send").hidden = Boolean(controller);
  $("stop").hidden = !controller;
}

async function send(text) {
  const conversation = currentConversation();
  let sampling;
  try {
    sampling = panel.samplingFields(state.settings);
    $("settings-error").hidden = true;
  } catch (error) {
    $("settings-error").textContent = error.message;
    $("settings-error").hidden = false;
    $("settings").hidden = false;
    return;
  }
  if (!conversation.messages.length) conversation.title = storage.titleFrom(text);
  const user = { role: "user", content: text };
  conversation.messages.push(user);
  $("messages").appendChild(messageView(user).element);
  const reply = { role: "assistant", content: "", reasoning: "" };
  if (sampling.response_format) reply.format = "json";
  const view = messageView(reply);
  $("messages").appendChild(view.element);
  conversation.messages.push(reply);
  keep();
  showConversations();
  const controller = new AbortController();
  setRunning(controller);
  try {
    await generate(conversation, reply, view, sampling, controller.signal);
  } finally {
    setRunning(null);
    view.update(reply, true);
    keep();
    $("input").focus();
  }
}

/** Streams the reply into `reply` and its view, then sets its stats from the usage. */
async function generate(conversation, reply, view, sampling, signal) {
  const sent = performance.now();
  let firstToken = null;
  let usage = null;
  let finishReason = null;
  let redraw = 0;
  try {
    const body = { model: await servedModel(), messages: requestMessages(conversation, reply), ...sampling };
    for await (const chunk of streamChat(body, state.settings.api_key, signal)) {
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      const delta = choice.delta || {};
      if (delta.content || delta.reasoning_content) firstToken ??= performance.now();
      reply.content += delta.content || "";
      reply.reasoning += delta.reasoning_content || "";
      finishReason = choice.finish_reason || finishReason;
      // One redraw a frame, however many chunks arrive in it.
      redraw ||= requestAnimationFrame(() => {
        redraw = 0;
        view.update(reply, false);
        scrollToEnd();
      });
    }
  } catch (error) {
    // Stopped (the fetch's signal aborted), or failed: either way the text so far is kept.
    if (error.name === "AbortError") finishReason = "stopped";
    else reply.error = error instanceof ApiError ? `${error.status}: ${error.message}` : String(error.message || error);
    if (error instanceof ApiError && error.status === 401) state.model = null;
  }
  cancelAnimationFrame(redraw);  // the last redraw, highlighted, comes from send()
  reply.stats = replyStats(sent, firstToken, usage, finishReason);
}

function replyStats(sent, firstToken, usage, finishReason) {
  const ended = performance.now();
  const stats = { finish_reason: finishReason };
  if (firstToken !== null) stats.ttft = (firstToken - sent) / 1000;
  if (usage) {
    stats.prompt_tokens = usage.prompt_tokens;
    stats.completion_tokens = usage.completion_tokens;
    const seconds = (ended - (firstToken ?? sent)) / 1000;
    // Tokens after the first, over the time after it: the decode rate, as the API's clients count it.
    if (usage.completion_tokens > 1 && seconds > 0) stats.tokens_per_second = (usage.completion_tokens - 1) / seconds;
  }
  return stats;
}

function scrollToEnd() {
  const container = $("messages");
  container.scrollTop = container.scrollHeight;
}

function stop() {
  if (state.running) state.running.abort();
}

// ---- wiring -----------------------------------------------------------------------------

function onSubmit(event) {
  event.preventDefault();
  const input = $("input");
  const text = input.value;
  if (!text.trim() || state.running) return;
  input.value = "";
  send(text);
}

function onInputKey(event) {
  // Enter sends, Shift+Enter adds a line; not while an input method composes a character.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
}

function onPageKey(event) {
  if (event.key === "Escape" && state.running) stop();
  if (event.key.toLowerCase() === "o" && event.ctrlKey && event.shiftKey) {
    event.preventDefault();
    startNewConversation();
  }
}

function start() {
  state.current = storage.loadCurrentId();
  currentConversation();
  panel.showSettings(state.settings);
  panel.applyTheme(state.settings);
  showConversations();
  showMessages();
  $("composer").addEventListener("submit", onSubmit);
  $("input").addEventListener("keydown", onInputKey);
  document.addEventListener("keydown", onPageKey);
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", startNewConversation);
  $("toggle-settings").addEventListener("click", panel.toggleSettings);
  $("theme").addEventListener("click", () => panel.nextTheme(state.settings));
  $("settings").addEventListener("input", () => panel.readSettings(state.settings));
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  $("api_key").addEventListener("change", () => { state.model = null; });
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => panel.applyTheme(state.settings));
  servedModel().catch((error) => { $("model").textContent = `(${error.message})`; });
}

// Module scripts run after the deferred vendor scripts, so marked, DOMPurify and hljs are there.
start();
