// The settings panel (sampling, system prompt, API key, structured output) and the theme,
// kept in local storage (storage.js).
import * as storage from "./storage.js";

const $ = (id) => document.getElementById(id);
const FIELDS = ["system", "temperature", "top_p", "max_tokens", "seed", "api_key", "json_mode", "schema"];
const THEMES = ["auto", "light", "dark"];

export function showSettings(settings) {
  for (const name of FIELDS) {
    const input = $(name);
    if (input.type === "checkbox") input.checked = Boolean(settings[name]);
    else input.value = settings[name] ?? "";
  }
  $("schema-label").hidden = !settings.json_mode;
}

export function readSettings(settings) {
  for (const name of FIELDS) {
    const input = $(name);
    settings[name] = input.type === "checkbox" ? input.checked : input.value;
  }
  $("schema-label").hidden = !settings.json_mode;
  storage.saveSettings(settings);
}

export function applyTheme(settings) {
  const theme = settings.theme;
  document.documentElement.dataset.theme = theme;
  $("theme").textContent = `Theme: ${theme}`;
  const dark = theme === "dark" || (theme === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  $("code-dark").disabled = !dark;
  $("code-light").disabled = dark;
}

/** The request's sampling fields and response format; throws Error on a bad value. */
export function samplingFields(settings) {
  const s = settings;
  const fields = {};
  const numbers = { temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens, seed: s.seed };
  for (const [name, value] of Object.entries(numbers)) {
    if (value === "" || value === null || value === undefined) continue;
    const number = Number(value);
    if (!Number.isFinite(number)) throw new Error(`${name} must be a number`);
    fields[name] = number;
  }
  if (s.json_mode) {
    let schema;
    try {
      schema = JSON.parse(s.schema);
    } catch (error) {
      throw new Error(`The JSON schema is not valid JSON: ${error.message}`);
    }
    fields.response_format = { type: "json_schema", json_schema: { name: "reply", schema, strict: true } };
  }
  return fields;
}

export function toggleSettings() {
  const panel = $("settings");
  panel.hidden = !panel.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!panel.hidden));
}

export function nextTheme(settings) {
  settings.theme = THEMES[(THEMES.indexOf(settings.theme) + 1) % THEMES.length];
  storage.saveSettings(settings);
  applyTheme(settings);
}
