// isotope's search page: calls POST /search or /ask and GET /chunks/{id}/questions.
// Everything from the index is inserted as text (never as HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const keyField = $("key");
keyField.value = sessionStorage.getItem("isotope-key") || "";

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = keyField.value.trim();
  if (key) { h.Authorization = "Bearer " + key; sessionStorage.setItem("isotope-key", key); }
  return h;
}

async function call(method, path, body) {
  const reply = await fetch(path, { method, headers: headers(), body: body && JSON.stringify(body) });
  const data = await reply.json().catch(() => ({ error: reply.statusText }));
  if (!reply.ok) throw new Error(data.error || reply.statusText);
  return data;
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

function showResult(result) {
  const chunk = result.chunk;
  const place = chunk.metadata.page ? ` (page ${chunk.metadata.page})`
    : (chunk.metadata.headings || []).length ? " > " + chunk.metadata.headings.join(" > ") : "";
  const matched = el("ul", { className: "matched" },
    ...result.matched_questions.map((q) =>
      el("li", {}, q.text, " ", el("span", { textContent: `(${q.score.toFixed(2)})` }))));
  const questions = el("details", {}, el("summary", { textContent: "all generated questions" }));
  questions.addEventListener("toggle", async () => {
    if (!questions.open || questions.dataset.loaded) return;
    questions.dataset.loaded = "1";
    try {
      const data = await call("GET", `/chunks/${encodeURIComponent(chunk.id)}/questions`);
      questions.append(data.waiting ? el("p", { className: "waiting", textContent: "questions not generated yet" })
        : el("ul", {}, ...data.questions.map((q) => q.kept
          ? el("li", {}, q.text, " ", el("span", { textContent: "— " + q.atom }))
          : el("li", { className: "dropped", title: q.reason }, el("s", { textContent: q.text }), " ",
            el("span", { textContent: "— dropped: " + q.reason })))));
    } catch (error) { questions.append(el("p", { textContent: error.message })); }
  });
  return el("div", { className: "result" },
    el("div", { className: "meta" },
      el("b", { textContent: `[${result.rank}]` }),
      el("span", { className: "source", textContent: chunk.source + place }),
      el("span", { textContent: "score " + result.score.toFixed(3) }),
      result.has_questions ? "" : el("span", { className: "waiting", textContent: "waiting for questions" })),
    highlighted(chunk.text, result.matched_questions.map((q) => q.atom)),
    result.matched_questions.length ? el("div", {}, el("b", { textContent: "Matched questions" }), matched) : "",
    questions);
}

$("search").addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = $("query").value.trim();
  if (!query) return;
  const body = { query };
  if ($("mode").value) body.mode = $("mode").value;
  $("status").textContent = "searching…";
  $("answer").style.display = "none";
  $("results").replaceChildren();
  try {
    const data = await call("POST", $("ask").checked ? "/ask" : "/search", body);
    $("status").replaceChildren(
      `${data.results.length} results · suggested action: `,
      el("span", { className: "action", id: "action", textContent: data.suggested_action }),
      ` · top score ${data.top_score.toFixed(3)}`);
    if (data.answer) {
      $("answer").textContent = data.answer + (data.citations.length ? `\n\ncites ${data.citations.map((n) => `[${n}]`).join(" ")}` : "");
      $("answer").style.display = "block";
    }
    $("results").replaceChildren(...data.results.map(showResult));
  } catch (error) {
    $("status").textContent = "error: " + error.message;
  }
});
