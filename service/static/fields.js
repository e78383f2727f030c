// The search page's fields (service.fields): the facet sidebar, the filter chips, the range inputs and a hit's
// fields. app.js calls these; this file holds what a search with fields means on the page:
//   - Which fields there are, and of which type, comes from the published schema (/openapi.json: a search body's
//     `fields` names each field with its type in `x-field-types`, and `facets` lists the keyword and boolean
//     fields). Without it (an older server, a proxy that does not pass it on) the page searches without fields.
//   - The chosen filters live in the URL fragment beside the query, so a filtered list can be linked, reloaded
//     and reached with Back:  #/search?q=spyglass&f=category:books&min=price:5&max=published:2024-05-01
//     (`f` a value of a keyword or boolean field, `min`/`max` the bounds of a number or date field, both
//     inclusive; a field name never holds ":", so the first one splits name from value).
//   - Every chip is a clause of one `and`: each narrows the list, and the facet counts are those of the narrowed
//     set (counted by the server over every matching document, not over the hits shown).
// Field names and values are the collection's data: they reach the page as text nodes, never as HTML.
"use strict";

window.SSIFields = (() => {
  const SCHEMA_URL = "openapi.json";
  const FACETED = new Set(["keyword", "keyword_list", "boolean"]);
  const ORDERED = new Set(["integer", "float", "date"]);
  const MAX_FACETS = 8; // the service's default SSI_MAX_FACETS
  const MAX_RETURNED = 64; // a search's `fields` holds at most 64 names (service.fields.http)

  // The collection's fields, {name: type}, read once from the published schema; {} when it cannot be read.
  let schemaPromise = null;
  function fieldTypes() {
    if (schemaPromise === null) {
      schemaPromise = fetch(SCHEMA_URL, { headers: { Accept: "application/json" } })
        .then((response) => (response.ok ? response.json() : null))
        .then((schema) => typesOf(schema))
        .catch(() => ({}));
    }
    return schemaPromise;
  }

  function typesOf(schema) {
    const properties = schema?.components?.schemas?.SearchRequest?.properties || {};
    const types = {};
    const listed = properties.fields?.["x-field-types"];
    if (listed && typeof listed === "object") {
      for (const [name, type] of Object.entries(listed)) if (typeof type === "string") types[name] = type;
    }
    // A schema that lists only the faceted names (no types): take them as keywords.
    for (const name of properties.facets?.items?.enum || []) if (!(name in types)) types[name] = "keyword";
    return types;
  }

  // --- The filters of a URL, and back ---------------------------------------------------------------------
  function split(entry) {
    const at = entry.indexOf(":");
    return at > 0 ? [entry.slice(0, at), entry.slice(at + 1)] : null;
  }

  // {terms: [[field, value], ...], min: {field: value}, max: {field: value}} from the fragment's parameters.
  function parse(params) {
    const state = { terms: [], min: {}, max: {} };
    for (const entry of params.getAll("f")) {
      const pair = split(entry);
      if (pair && !state.terms.some(([f, v]) => f === pair[0] && v === pair[1])) state.terms.push(pair);
    }
    for (const bound of ["min", "max"]) {
      for (const entry of params.getAll(bound)) {
        const pair = split(entry);
        if (pair && pair[1] !== "") state[bound][pair[0]] = pair[1];
      }
    }
    return state;
  }

  function toParams(query, state) {
    const params = new URLSearchParams({ q: query });
    for (const [field, value] of state.terms) params.append("f", `${field}:${value}`);
    for (const bound of ["min", "max"]) {
      for (const [field, value] of Object.entries(state[bound])) params.append(bound, `${field}:${value}`);
    }
    return params;
  }

  const isEmpty = (state) => !state.terms.length && !Object.keys(state.min).length && !Object.keys(state.max).length;

  // A value as the field's type has it in a filter (the URL holds text). A field the schema did not name is
  // sent as text, or as a number when it reads as one; the server names a value of the wrong type (a 422).
  function typed(type, value) {
    if (type === "boolean") return value === "true";
    if (type === "integer" || type === "float") return Number(value);
    if (type === undefined && value.trim() !== "" && Number.isFinite(Number(value))) return Number(value);
    return value;
  }

  // The day after an ISO date (YYYY-MM-DD), so that "to 2024-05-01" includes all of that day.
  function nextDay(day) {
    const when = new Date(`${day}T00:00:00Z`);
    if (Number.isNaN(when.getTime())) return day; // not a plain date: the server names the problem
    when.setUTCDate(when.getUTCDate() + 1);
    return when.toISOString().slice(0, 10);
  }

  // The request's `filter`: every chip a clause of one `and`; null without chips.
  function filterOf(state, types) {
    const clauses = state.terms.map(([field, value]) => ({ term: { [field]: typed(types[field], value) } }));
    for (const field of new Set([...Object.keys(state.min), ...Object.keys(state.max)])) {
      const type = types[field];
      const bounds = {};
      if (field in state.min) bounds.gte = typed(type, state.min[field]);
      if (field in state.max) {
        if (type === "date" && /^\d{4}-\d{2}-\d{2}$/.test(state.max[field])) bounds.lt = nextDay(state.max[field]);
        else bounds.lte = typed(type, state.max[field]);
      }
      clauses.push({ range: { [field]: bounds } });
    }
    if (!clauses.length) return null;
    return clauses.length === 1 ? clauses[0] : { and: clauses };
  }

  // What a search asks of the fields: the filter, the facets (on a list's first page) and every field per hit.
  function request(state, types, withFacets) {
    const extra = {};
    const filter = filterOf(state, types);
    if (filter) extra.filter = filter;
    const names = Object.keys(types).sort();
    const faceted = names.filter((name) => FACETED.has(types[name]));
    if (withFacets && faceted.length) extra.facets = faceted.slice(0, MAX_FACETS);
    if (names.length) extra.fields = names.slice(0, MAX_RETURNED);
    return extra;
  }

  // --- Drawing ----------------------------------------------------------------------------------------------
  const { el } = window.SSIDom;

  const shown = (value) => (Array.isArray(value) ? value.map(String).join(", ") : String(value));

  // Where the keyboard's focus goes once the list a click asked for is drawn (the clicked control is gone
  // then): the value's button again, or the range's input; else the first chip.
  let refocus = null;

  function restoreFocus(aside, list) {
    const wanted = refocus;
    refocus = null;
    if (!wanted) return;
    const same = (node) => node.dataset.field === wanted.field && node.dataset[wanted.key] === wanted.value;
    const controls = [...aside.querySelectorAll("button[data-field], input[data-field]")];
    const target = controls.find(same) || list.querySelector("button");
    if (target && !target.closest("[hidden]")) target.focus();
  }

  // The chips of the chosen filters; `change(state)` gets the filters without the clicked one.
  function drawChips(list, state, change) {
    const chip = (label, focus, without) => {
      const button = el("button", { type: "button", class: "chip", "aria-label": `Remove the filter ${label}` },
        el("span", { text: label }), el("span", { class: "chip-x", "aria-hidden": "true", text: "×" }));
      button.addEventListener("click", () => {
        refocus = focus;
        change(without());
      });
      return el("li", {}, button);
    };
    const items = state.terms.map(([field, value], i) =>
      chip(`${field}: ${value}`, { field, key: "value", value },
        () => ({ ...state, terms: state.terms.filter((_, j) => j !== i) })));
    for (const [bound, sign] of [["min", "≥"], ["max", "≤"]]) {
      for (const [field, value] of Object.entries(state[bound])) {
        items.push(chip(`${field} ${sign} ${value}`, { field, key: "bound", value: bound }, () => {
          const rest = { ...state[bound] };
          delete rest[field];
          return { ...state, [bound]: rest };
        }));
      }
    }
    list.replaceChildren(...items);
    list.hidden = !items.length;
  }

  // The facet sidebar from a search's answer: per faceted field its most frequent values as buttons (a value
  // already chosen is pressed, and a click takes it off again), then a range form for each number and date field.
  function drawSidebar(aside, answer, state, types, change) {
    const sections = [];
    for (const [field, facet] of Object.entries(answer.facets || {})) {
      const values = Array.isArray(facet?.values) ? facet.values : [];
      if (!values.length) continue;
      const headingId = `facet-${sections.length}`;
      const list = el("ul", { class: "facet-values", "aria-labelledby": headingId });
      for (const { value, count } of values) {
        const text = String(value);
        const chosen = state.terms.some(([f, v]) => f === field && v === text);
        const button = el("button", {
          type: "button",
          class: "facet-value",
          "aria-pressed": String(chosen),
          "data-field": field,
          "data-value": text,
          "aria-label": `${field}: ${text}, ${count} document${count === 1 ? "" : "s"}`,
        }, el("span", { class: "facet-name", text }), el("span", { class: "facet-count", text: String(count) }));
        button.addEventListener("click", () => {
          refocus = { field, key: "value", value: text };
          change(chosen
            ? { ...state, terms: state.terms.filter(([f, v]) => !(f === field && v === text)) }
            : { ...state, terms: [...state.terms, [field, text]] });
        });
        list.append(el("li", {}, button));
      }
      const section = el("section", { class: "facet", "data-field": field },
        el("h3", { id: headingId, text: field }), list);
      if (facet.other > 0) {
        section.append(el("p", { class: "facet-other", text: `${facet.other} more in other values` }));
      }
      sections.push(section);
    }
    const ordered = Object.keys(types).sort().filter((name) => ORDERED.has(types[name]));
    if (ordered.length) sections.push(rangeForm(ordered, state, types, change));
    if (!sections.length) {
      aside.replaceChildren();
      aside.hidden = true;
      return;
    }
    const top = [el("h2", { class: "filters-heading", text: "Filters" })];
    if (typeof answer.matched === "number") {
      const n = answer.matched;
      const counted = isEmpty(state)
        ? `Counts over all ${n} documents`
        : `${n} document${n === 1 ? "" : "s"} match the filters; counts over them`;
      top.push(el("p", { class: "matched", text: counted }));
    }
    aside.replaceChildren(...top, ...sections);
    aside.hidden = false;
  }

  function rangeForm(fields, state, types, change) {
    const form = el("form", { class: "ranges", "aria-label": "Ranges" });
    fields.forEach((field, i) => {
      const type = types[field];
      const input = (bound, label) => {
        const id = `range-${i}-${bound}`;
        const attrs = {
          id,
          name: `${bound}:${field}`,
          type: type === "date" ? "date" : "number",
          "data-field": field,
          "data-bound": bound,
        };
        if (type === "integer") attrs.step = "1";
        if (type === "float") attrs.step = "any";
        const box = el("input", attrs);
        box.value = state[bound][field] ?? "";
        return el("span", { class: "range-bound" }, el("label", { for: id, text: label }), box);
      };
      form.append(el("fieldset", { class: "range", "data-field": field },
        el("legend", { text: field }), input("min", "from"), input("max", "to")));
    });
    form.append(el("button", { type: "submit", text: "Apply" }));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const min = {};
      const max = {};
      for (const box of form.querySelectorAll("input[data-bound]")) {
        if (box.value.trim() !== "") (box.dataset.bound === "min" ? min : max)[box.dataset.field] = box.value.trim();
      }
      const active = document.activeElement;
      if (active instanceof HTMLInputElement && form.contains(active)) {
        refocus = { field: active.dataset.field, key: "bound", value: active.dataset.bound };
      }
      change({ ...state, min, max });
    });
    return form;
  }

  // A hit's fields as a definition list (null when it has none).
  function hitFields(fields) {
    if (!fields || typeof fields !== "object") return null;
    const entries = Object.entries(fields).filter(([, value]) => !(Array.isArray(value) && !value.length));
    if (!entries.length) return null;
    return el("dl", { class: "hit-fields" },
      ...entries.map(([name, value]) =>
        el("div", { "data-field": name }, el("dt", { text: name }), el("dd", { text: shown(value) }))));
  }

  return { fieldTypes, parse, toParams, isEmpty, request, drawChips, drawSidebar, restoreFocus, hitFields };
})();
