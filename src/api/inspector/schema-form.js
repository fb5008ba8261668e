// The "try it" form of one tool, generated from its parameters schema.
//
// Each top-level property gets a labelled control: text for strings, number fields for numbers
// and integers, a checkbox (or a three-way select when optional) for booleans, a select for an
// enum, and a JSON text area for nested objects, arrays and anything else. A schema the generator
// cannot lay out as fields (no properties object, or a top-level oneOf / anyOf / allOf / $ref)
// gets the raw JSON editor only; every form can switch to it.
//
// Numbers keep the digits the user typed: they travel as raw JSON text (JSON.rawJSON), so an
// integer past 2^53 reaches the tool exactly. Every element is built with textContent and
// properties, never from HTML text: schemas come from plugins.

/** A JSON number as JSON writes it. */
const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/** Top-level keywords that make a schema more than a list of fields. */
const COMPOSITE_KEYWORDS = ["oneOf", "anyOf", "allOf", "$ref", "not", "if"];

let nextId = 0;

/** A fresh id for a label's `for`, unrelated to any name a plugin chose. */
export function freshId(prefix) {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

/** Parses JSON text keeping every number's digits (where the browser can: JSON.rawJSON). */
export function parseExact(text) {
  if (typeof JSON.rawJSON !== "function") {
    return JSON.parse(text);
  }
  return JSON.parse(text, (_key, value, context) =>
    typeof value === "number" && context && typeof context.source === "string"
      ? JSON.rawJSON(context.source)
      : value,
  );
}

/** A number from a schema or listing read by parseExact (a raw JSON number), or NaN. */
export function numberOf(value) {
  if (typeof value === "number") return value;
  if (typeof JSON.isRawJSON === "function" && JSON.isRawJSON(value)) return Number(value.rawJSON);
  return Number.NaN;
}

/** A number typed by the user, as JSON with its digits. */
function exactNumber(text) {
  return typeof JSON.rawJSON === "function" ? JSON.rawJSON(text) : Number(text);
}

/** A value as the text a field shows. */
function asText(value) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

/** A problem with what the user entered; `element` is where to put the focus. */
export class ArgumentError extends Error {
  constructor(message, element) {
    super(message);
    this.element = element;
  }
}

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** The kind of control a property schema gets. */
function controlKind(schema) {
  if (!isPlainObject(schema)) return "json";
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return "enum";
  if ("const" in schema) return "enum";
  let type = schema.type;
  if (Array.isArray(type)) {
    const concrete = type.filter((t) => t !== "null");
    type = concrete.length === 1 ? concrete[0] : undefined;
  }
  if (["string", "integer", "number", "boolean"].includes(type)) return type;
  return "json";
}

/** Why a schema cannot be shown as fields, or null when it can. */
function whyNoFields(schema) {
  if (!isPlainObject(schema)) return "the parameters schema is not a JSON object";
  const composite = COMPOSITE_KEYWORDS.find((k) => k in schema);
  if (composite) return `the parameters schema uses ${composite}`;
  if (schema.type !== undefined && schema.type !== "object") {
    return `the parameters schema's type is ${JSON.stringify(schema.type)}, not "object"`;
  }
  if (schema.properties !== undefined && !isPlainObject(schema.properties)) {
    return "the parameters schema's properties is not an object";
  }
  return null;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** One field: its row and how to read and write its value (undefined: not set). */
function field(name, schema, required) {
  const kind = controlKind(schema);
  const id = freshId("arg");
  const row = element("div", "field");
  row.dataset.field = name;
  const label = element("label");
  label.htmlFor = id;
  label.append(element("code", "field-name", name));
  label.append(" ", element("span", "field-type", kind === "json" ? "JSON" : kind));
  if (required) label.append(" ", element("span", "required", "required"));
  row.append(label);

  let input;
  let read;
  let write;
  if (kind === "boolean" && required) {
    input = element("input");
    input.type = "checkbox";
    read = () => input.checked;
    write = (v) => {
      input.checked = v === true;
    };
  } else if (kind === "boolean" || kind === "enum") {
    input = element("select");
    const choices = kind === "boolean" ? [true, false] : schema.enum ?? [schema.const];
    if (!required) input.append(new Option("(not set)", ""));
    choices.forEach((choice, i) => input.append(new Option(asText(choice), String(i))));
    read = () => (input.value === "" ? undefined : choices[Number(input.value)]);
    write = (v) => {
      const i = choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v));
      input.value = i >= 0 ? String(i) : required ? "0" : "";
    };
  } else if (kind === "integer" || kind === "number") {
    input = element("input");
    input.type = "number";
    input.step = kind === "integer" ? "1" : "any";
    if (!Number.isNaN(numberOf(schema.minimum))) input.min = String(numberOf(schema.minimum));
    if (!Number.isNaN(numberOf(schema.maximum))) input.max = String(numberOf(schema.maximum));
    read = () => {
      const text = input.value.trim();
      if (text === "") return undefined;
      if (!JSON_NUMBER.test(text) || (kind === "integer" && !Number.isInteger(Number(text)))) {
        throw new ArgumentError(`${name} must be ${kind === "integer" ? "an integer" : "a number"}`, input);
      }
      return exactNumber(text);
    };
    write = (v) => {
      input.value = asText(v);
    };
  } else if (kind === "string") {
    input = element("input");
    input.type = "text";
    input.autocomplete = "off";
    if (numberOf(schema.maxLength) >= 0) input.maxLength = numberOf(schema.maxLength);
    read = () => (input.value === "" && !required ? undefined : input.value);
    write = (v) => {
      input.value = asText(v);
    };
  } else {
    input = element("textarea");
    input.rows = 3;
    input.spellcheck = false;
    input.placeholder = schema?.type === "array" ? "[ ]" : "{ }";
    read = () => {
      const text = input.value.trim();
      if (text === "") return undefined;
      try {
        return parseExact(text);
      } catch (e) {
        throw new ArgumentError(`${name} is not valid JSON: ${e.message}`, input);
      }
    };
    write = (v) => {
      input.value = v === undefined ? "" : JSON.stringify(v, null, 2);
    };
  }
  input.id = id;
  input.name = name;
  if (required && input.type !== "checkbox") input.required = true;
  row.append(input);
  if (isPlainObject(schema) && typeof schema.description === "string" && schema.description) {
    const hint = element("p", "hint", schema.description);
    hint.id = `${id}-hint`;
    input.setAttribute("aria-describedby", hint.id);
    row.append(hint);
  }
  if (isPlainObject(schema) && "default" in schema) write(schema.default);
  return { name, row, read, write };
}

/**
 * The argument editor of a tool: `element` to insert, `read()` returning the arguments object
 * (or throwing an ArgumentError).
 */
export function argumentsEditor(schema) {
  const box = element("div", "arguments");
  const noFields = whyNoFields(schema);
  const fields = [];
  if (!noFields) {
    const properties = schema.properties ?? {};
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    for (const [name, property] of Object.entries(properties)) {
      fields.push(field(name, property, required.has(name)));
    }
  }

  // A fieldset, so that hiding it in JSON mode also disables its controls: the browser then
  // skips their checks (a hidden required field would otherwise block every submit).
  const fieldBox = element("fieldset", "fields");
  fields.forEach((f) => fieldBox.append(f.row));
  if (!noFields && fields.length === 0) {
    fieldBox.append(element("p", "muted", "This tool takes no arguments."));
  }

  const rawId = freshId("raw");
  const rawBox = element("div", "field raw");
  const rawLabel = element("label", null, "Arguments (a JSON object)");
  rawLabel.htmlFor = rawId;
  const raw = element("textarea");
  raw.id = rawId;
  raw.rows = 6;
  raw.spellcheck = false;
  raw.value = "{}";
  rawBox.append(rawLabel, raw);
  if (noFields) {
    rawBox.append(element("p", "hint", `Raw JSON only: ${noFields}.`));
  }

  const readFields = () => {
    const args = {};
    for (const f of fields) {
      const value = f.read();
      if (value !== undefined) args[f.name] = value;
    }
    return args;
  };
  const readRaw = () => {
    let value;
    try {
      value = parseExact(raw.value.trim() || "{}");
    } catch (e) {
      throw new ArgumentError(`the arguments are not valid JSON: ${e.message}`, raw);
    }
    if (!isPlainObject(value)) {
      throw new ArgumentError("the arguments must be a JSON object", raw);
    }
    return value;
  };

  let rawMode = Boolean(noFields);
  const toggle = element("button", "quiet", "Edit as JSON");
  toggle.type = "button";
  const problem = element("p", "form-problem");
  problem.hidden = true;
  problem.setAttribute("role", "alert");
  const show = () => {
    fieldBox.hidden = rawMode;
    fieldBox.disabled = rawMode;
    rawBox.hidden = !rawMode;
    toggle.setAttribute("aria-pressed", String(rawMode));
  };
  toggle.addEventListener("click", () => {
    if (!rawMode) {
      try {
        raw.value = JSON.stringify(readFields(), null, 2);
      } catch {
        // A field that does not read yet: keep the last JSON text rather than lose it.
      }
      rawMode = true;
    } else {
      let value;
      try {
        value = readRaw();
      } catch (e) {
        problem.textContent = e.message;
        problem.hidden = false;
        return;
      }
      fields.forEach((f) => f.write(value[f.name]));
      rawMode = false;
    }
    problem.hidden = true;
    show();
  });
  if (!noFields) box.append(toggle);
  box.append(fieldBox, rawBox, problem);
  show();
  return {
    element: box,
    read: () => (rawMode ? readRaw() : readFields()),
  };
}
