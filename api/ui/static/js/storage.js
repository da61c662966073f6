// Conversations and settings, kept in this browser's local storage (never on the server).
const CONVERSATIONS = "flint.conversations.v1";
const SETTINGS = "flint.settings.v1";
const CURRENT = "flint.current.v1";

const EXAMPLE_SCHEMA = `{
  "type": "object",
  "properties": {"answer": {"type": "string"}},
  "required": ["answer"]
}`;

export const DEFAULT_SETTINGS = {
  system: "", temperature: 0.7, top_p: 1, max_tokens: 512, seed: "", api_key: "",
  json_mode: false, schema: EXAMPLE_SCHEMA, theme: "auto",
};

function read(key, fallback) {
  try {
    const text = localStorage.getItem(key);
    return text === null ? fallback : JSON.parse(text);
  } catch {
    return fallback;  // a value another version wrote, or storage turned off
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (error) {
    console.warn("local storage is full or off; this conversation will not be kept", error);
  }
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  write(SETTINGS, settings);
}

/** Every conversation, newest first: {id, title, created, messages: [{role, content, ...}]}. */
export function loadConversations() {
  const conversations = read(CONVERSATIONS, []);
  return Array.isArray(conversations) ? conversations : [];
}

export function saveConversations(conversations) {
  write(CONVERSATIONS, conversations);
}

export function loadCurrentId() {
  return read(CURRENT, null);
}

export function saveCurrentId(id) {
  write(CURRENT, id);
}

export function newConversation() {
  const id = (crypto.randomUUID && crypto.randomUUID()) || String(Date.now()) + Math.random().toString(16).slice(2);
  return { id, title: "New chat", created: Date.now(), messages: [] };
}

/** A title from the first user message: its first line, shortened. */
export function titleFrom(text) {
  const line = text.trim().split("\n")[0];
  return line.length > 48 ? line.slice(0, 47) + "…" : line || "New chat";
}
