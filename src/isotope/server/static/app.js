// isotope's search page: calls POST /search or /ask (streamed), GET /chunks/{id}/questions,
// POST /feedback (the thumbs on each result), and with a knowledge graph GET /entities and
// GET /graph (a result's names, and an entity's neighbourhood as a small picture).
// Everything from the index is inserted as text (never as HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const keyField = $("key");
keyField.value = sessionStorage.getItem("isotope-key") || "";
let running = null; // the AbortController of the search or answer in flight
let withGraph = false; // the index has a knowledge graph (GET /health says)

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = keyField.value.trim();
  if (key) { h.Authorization = "Bearer " + key; sessionStorage.setItem("isotope-key", key); }
  return h;
}

// What went wrong, said to a person at a browser (not in terms of HTTP headers).
function explain(status, message) {
  if (status === 401) return "this server asks for an API key: paste it in the key field and search again";
  if (status === 403 && /only read/.test(message)) return "this API key may only read";
  if (status === 413) return "the request is too large for this server";
  if (status === 429 || status === 503) return "the server is busy or cannot reach its index: try again in a moment";
  return message || `the server answered ${status}`;
}

// a project of a server of several is at /p/NAME/: its page calls its own routes
const BASE = location.pathname.startsWith("/p/") ? location.pathname.split("/").slice(0, 3).join("/") : "";

async function send(method, path, body, signal) {
  let reply;
  try {
    reply = await fetch(BASE + path, { method, headers: headers(), body: body && JSON.stringify(body), signal });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new Error(`cannot reach the server at ${location.host}: is isotope serve still running?`);
  }
  if (!reply.ok) {
    const data = await reply.json().catch(() => ({}));
    throw new Error(explain(reply.status, data.error));
  }
  return reply;
}

async function call(method, path, body, signal) {
  return (await send(method, path, body, signal)).json();
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const child of children) node.append(child);
  return node;
}

// The chunk's text with each matched question's atom highlighted.
function highlighted(text, atoms) {
  const spans = [];
  for (const atom of new Set(atoms.filter(Boolean))) {
    const at = text.indexOf(atom);
    if (at >= 0) spans.push([at, at + atom.length]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  const out = el("div", { className: "chunk" });
  let done = 0;
  for (const [start, end] of spans) {
    if (start < done) continue;
    out.append(text.slice(done, start), el("mark", { textContent: text.slice(start, end) }));
    done = end;
  }
  out.append(text.slice(done));
  return out;
}

// Thumbs on a result: POST /feedback for this search (its query_id) and this chunk.
function thumbs(queryId, chunkId) {
  const said = el("span", { className: "said" });
  const mark = (useful) => async () => {
    try {
      const done = await call("POST", "/feedback", { query_id: queryId, chunk_id: chunkId, useful });
      said.textContent = !useful ? "noted: not first again for this question"
        : done.learned === "learned" ? "thanks: learned as a question of this passage"
        : done.learned === "pending" ? "thanks: the question waits for review"
        : done.learned === "waiting" ? "thanks: learned once the passage has its questions" : "thanks";
    } catch (error) { said.textContent = error.message; }
  };
  return el("span", { className: "thumbs" },
    el("button", { type: "button", className: "up", title: "this answered my question", textContent: "useful", onclick: mark(true) }),
    el("button", { type: "button", className: "down", title: "this did not help", textContent: "not useful", onclick: mark(false) }),
    said);
}

// How a result's score was made (the response's explain object), as a small table.
function explained(told) {
  const rows = Object.entries(told.signals).map(([name, s]) => el("tr", {},
    el("td", { textContent: name }),
    el("td", { textContent: s.rank == null ? "—" : String(s.rank) }),
    el("td", { textContent: s.raw == null ? "—" : s.raw.toFixed(3) }),
    el("td", { textContent: s.standardized == null ? "—" : s.standardized.toFixed(3) }),
    el("td", { textContent: s.weight.toFixed(2) }),
    el("td", { textContent: s.contribution == null ? "—" : s.contribution.toFixed(3) })));
  const head = el("tr", {}, ...["signal", "rank", "raw", "standardised", "weight", "contribution"]
    .map((t) => el("th", { textContent: t })));
  return el("details", { className: "explain" }, el("summary", { textContent: "how it ranked" }),
    el("table", {}, head, ...rows),
    el("p", { textContent: told.fused == null ? `score ${told.score.toFixed(3)}`
      : `fused ${told.fused.toFixed(3)}${told.scale !== 1 ? ` × ${told.scale.toFixed(2)}` : ""} → score ${told.score.toFixed(3)}` }));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

const AROUND = 10; // most neighbours drawn around an entity
function short(text, most = 28) { return text.length > most ? text.slice(0, most - 1) + "…" : text; }

// An entity's neighbourhood (GET /graph's reply, one hop) as a small picture: the entity
// in the middle, what it is related to around it, each line named by its relations
// (→ from the entity, ← to it). A neighbour is clicked to be put in the middle.
function picture(data, into) {
  const names = Object.fromEntries(data.entities.map((e) => [e.key, e.name]));
  names[data.center.key] = data.center.name;
  const lines = new Map(); // neighbour key -> its relations' labels
  let cut = data.truncated;
  for (const r of data.relations) {
    const out = r.subject === data.center.key, other = out ? r.object : r.subject;
    if ((!out && r.object !== data.center.key) || other === data.center.key) continue;
    if (!lines.has(other) && lines.size >= AROUND) { cut = true; continue; }
    const said = lines.get(other) || [];
    said.push(out ? `${r.predicate} →` : `← ${r.predicate}`);
    lines.set(other, said);
  }
  // (a row for one or two neighbours, a ring for more)
  const W = 620, H = lines.size > 2 ? 300 : 120, cx = W / 2, cy = H / 2;
  const drawing = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "neighbourhood", role: "img" });
  drawing.append(svg("title", {}, `${data.center.name} and what the passages relate it to`));
  const keys = [...lines.keys()];
  keys.forEach((key, i) => {
    const angle = Math.PI + 2 * Math.PI * i / keys.length; // the first on the left
    const x = cx + 230 * Math.cos(angle), y = cy + (cy - 35) * Math.sin(angle);
    const label = short([...new Set(lines.get(key))].join("; "), 40);
    const node = svg("g", { class: "neighbour", tabindex: 0 });
    node.append(svg("title", {}, `show ${names[key] || key}`), svg("circle", { cx: x, cy: y, r: 6 }),
      svg("text", { x, y: y + (y < cy - 1 ? -10 : 18), "text-anchor": "middle" }, short(names[key] || key)));
    node.addEventListener("click", () => neighbourhood(names[key] || key, into));
    drawing.append(svg("line", { x1: cx, y1: cy, x2: x, y2: y }),
      svg("text", { x: (cx + x) / 2, y: (cy + y) / 2 - 4, "text-anchor": "middle", class: "relation" }, label), node);
  });
  drawing.append(svg("circle", { cx, cy, r: 9, class: "center" }),
    svg("text", { x: cx, y: cy + 24, "text-anchor": "middle", class: "center" }, short(data.center.name, 40)));
  const said = keys.length ? `${data.center.name} (${data.center.type}), named in ${data.center.chunks} passage(s)`
    : `${data.center.name}: no relation read for it`;
  into.replaceChildren(el("p", { textContent: said + (cut ? " (some relations left out)" : "") }), drawing);
}

async function neighbourhood(name, into) {
  try {
    picture(await call("GET", `/graph?hops=1&entity=${encodeURIComponent(name)}`), into);
  } catch (error) { into.replaceChildren(el("p", { className: "note", textContent: error.message })); }
}

// The names read from a result's passage (GET /entities?chunk=), each opening its
// neighbourhood's picture.
function entitiesOf(chunkId) {
  const box = el("details", { className: "entities" }, el("summary", { textContent: "names in this passage" }));
  box.addEventListener("toggle", async () => {
    if (!box.open || box.dataset.loaded) return;
    box.dataset.loaded = "1";
    try {
      const found = await call("GET", `/entities?top=30&chunk=${encodeURIComponent(chunkId)}`);
      if (!found.length) { box.append(el("p", { textContent: "no names were read from this passage" })); return; }
      const into = el("div", { className: "picture" });
      box.append(el("p", {}, ...found.map((e) => el("button", {
        type: "button", className: "entity", title: `${e.type}, named in ${e.chunks} passage(s)`,
        textContent: e.name, onclick: () => neighbourhood(e.name, into) }))), into);
    } catch (error) { box.append(el("p", { className: "note", textContent: error.message })); }
  });
  return box;
}

function showResult(result, queryId) {
  const chunk = result.chunk;
  const place = chunk.metadata.page ? ` (page ${chunk.metadata.page})`
    : (chunk.metadata.headings || []).length ? " > " + chunk.metadata.headings.join(" > ") : "";
  const matched = el("ul", { className: "matched" },
    ...result.matched_questions.map((q) =>
      el("li", {}, q.text, " ", el("span", { textContent: `(${q.score.toFixed(2)})` }))));
  const questions = el("details", { className: "questions" }, el("summary", { textContent: "all generated questions" }));
  // the question view: every question of the chunk; with an administrator's key (or none),
  // questions are added, disabled and enabled by hand here
  const note = el("p", { className: "note" });
  const edit = (method, path, body) => async () => {
    try { await send(method, path, body); await load(); }
    catch (error) { note.textContent = error.message; }
  };
  const load = async () => {
    const data = await call("GET", `/chunks/${encodeURIComponent(chunk.id)}/questions`);
    const field = el("input", { type: "text", placeholder: "add a question to this passage", maxLength: 1000 });
    const add = el("form", { className: "add" }, field, el("button", { type: "submit", textContent: "add" }));
    add.addEventListener("submit", (event) => {
      event.preventDefault();
      edit("POST", `/chunks/${encodeURIComponent(chunk.id)}/questions`, { text: field.value })();
    });
    const q = (path) => `/questions/${encodeURIComponent(path)}`;
    questions.replaceChildren(questions.firstChild, data.waiting
      ? el("p", { className: "waiting", textContent: "questions not generated yet" })
      : el("ul", {}, ...data.questions.map((item) => item.kept
        ? el("li", {}, item.text, " ", el("span", { textContent: (item.origin !== "generated" ? `(${item.origin}) ` : "") + "— " + item.atom }),
          " ", el("button", { type: "button", className: "disable", textContent: "disable", onclick: edit("DELETE", q(item.id)) }))
        : el("li", { className: "dropped", title: item.reason }, el("s", { textContent: item.text }), " ",
          el("span", { textContent: "— dropped: " + item.reason }),
          item.reason.startsWith("disabled by hand") ? el("button", { type: "button", className: "enable", textContent: "enable", onclick: edit("POST", q(item.id) + "/enable") }) : ""))),
      add, note);
  };
  questions.addEventListener("toggle", async () => {
    if (!questions.open || questions.dataset.loaded) return;
    questions.dataset.loaded = "1";
    try { await load(); } catch (error) { questions.append(el("p", { textContent: error.message })); }
  });
  return el("div", { className: "result" },
    el("div", { className: "meta" },
      el("b", { textContent: `[${result.rank}]` }),
      el("span", { className: "source", textContent: chunk.source + place }),
      el("span", { textContent: "score " + result.score.toFixed(3) }),
      result.has_questions ? "" : el("span", { className: "waiting", textContent: "waiting for questions" }),
      queryId ? thumbs(queryId, chunk.id) : ""),
    highlighted(chunk.text, result.matched_questions.map((q) => q.atom)),
    result.matched_questions.length ? el("div", {}, el("b", { textContent: "Matched questions" }), matched) : "",
    result.bridge ? el("p", { className: "bridge", textContent: "reached through the knowledge graph: " + result.bridge.join("; ") }) : "",
    result.explain ? explained(result.explain) : "",
    withGraph ? entitiesOf(chunk.id) : "",
    questions);
}

function showResults(data) {
  $("status").replaceChildren(
    `${data.results.length} results · suggested action: `,
    el("span", { className: "action", id: "action", textContent: data.suggested_action }),
    ` · top score ${data.top_score.toFixed(3)}`);
  $("results").replaceChildren(...data.results.map((r) => showResult(r, data.query_id)));
}

const KIND = { generated: "", quoted: "quoted from the best match · ", declined: "" };

function showAnswer(text, citations, kind, confidence) {
  const trust = kind !== "declined" && typeof confidence === "number"
    ? `answer confidence ${confidence.toFixed(2)} · ` : "";
  $("answer").textContent = text + (citations && citations.length
    ? `\n\n${KIND[kind] || ""}${trust}cites ${citations.map((n) => `[${n}]`).join(" ")}` : "");
  $("answer").style.display = "block";
}

// POST /ask as server-sent events: results at once, the answer as it is written.
async function ask(body, signal) {
  const reply = await send("POST", "/ask", { ...body, stream: true }, signal);
  const reader = reply.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", written = "";
  $("answer").textContent = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const name = (block.match(/^event: (.*)$/m) || [])[1];
      const data = JSON.parse((block.match(/^data: (.*)$/m) || [, "{}"])[1]);
      if (name === "results") {
        showResults(data);
        $("answer").style.display = "block";
        $("answer").textContent = "writing the answer…";
      } else if (name === "token") {
        written += data.text;
        $("answer").textContent = written;
      } else if (name === "answer") {
        showAnswer(data.answer || "", data.citations, data.answer_kind, data.answer_confidence);
      } else if (name === "error") {
        throw new Error(data.error);
      }
    }
  }
}

// The filter field: "type=pdf, year>=2020" as the filters of /search (as --where does:
// key=value, key!=value, key>=value, key>value, key<=value, key<value; a key given twice
// with = means any of its values; numbers compared as numbers).
const OPS = [["!=", "ne"], [">=", "gte"], ["<=", "lte"], [">", "gt"], ["<", "lt"], ["=", "eq"]];
function parseWhere(text) {
  const filters = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const found = OPS.find(([sign]) => part.includes(sign));
    if (!found) throw new Error(`filter "${part}": write key=value, key>=value, ...`);
    const [sign, op] = found;
    const at = part.indexOf(sign);
    const key = part.slice(0, at).trim(), raw = part.slice(at + sign.length).trim();
    if (!key) throw new Error(`filter "${part}": the key is missing`);
    const value = raw !== "" && !isNaN(Number(raw)) ? Number(raw) : raw;
    if (op === "eq") {
      const had = filters[key];
      filters[key] = had === undefined ? value : [].concat(had, value);
    } else {
      filters[key] = Object.assign(typeof filters[key] === "object" && !Array.isArray(filters[key]) ? filters[key] : {}, { [op]: value });
    }
  }
  return Object.keys(filters).length ? filters : null;
}

$("stop").addEventListener("click", () => { if (running) running.abort(); });

$("search").addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = $("query").value.trim();
  if (!query) return;
  if (running) running.abort();
  const controller = running = new AbortController();
  const body = { query, explain: true };
  if ($("mode").value) body.mode = $("mode").value;
  try {
    const filters = parseWhere($("where").value);
    if (filters) body.filters = filters;
  } catch (error) {
    $("status").textContent = "error: " + error.message;
    return;
  }
  $("status").textContent = "searching…";
  $("answer").style.display = "none";
  $("results").replaceChildren();
  $("stop").hidden = false;
  try {
    if ($("ask").checked) await ask(body, controller.signal);
    else showResults(await call("POST", "/search", body, controller.signal));
  } catch (error) {
    if (error.name === "AbortError") {
      if ($("answer").style.display === "block") $("answer").textContent += " … (stopped)";
      else $("status").textContent = "stopped";
    } else {
      $("status").textContent = "error: " + error.message;
    }
  } finally {
    if (running === controller) { running = null; $("stop").hidden = true; }
  }
});

// The answer box starts unticked when the answer model is the local one: on a laptop's
// CPU an answer takes many seconds (results always come first).
fetch(BASE + "/health").then((r) => r.json()).then((health) => {
  if (health.graph) {
    withGraph = true;
    $("mode").append(el("option", { textContent: "graph" }));
  }
  if (health.answer_model_local) {
    $("ask").checked = false;
    $("ask-note").textContent = "(the answer model runs on this machine's CPU: seconds per answer)";
  }
}).catch(() => {});
