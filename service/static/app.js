// The search page: a query box, ranked hits with the two parts of each score, "similar documents"
// and a document view; a collection with fields gets a facet sidebar, filter chips and ranges (fields.js).
// The state lives in the URL fragment so links, reloads and Back work:
//   #/search?q=...   hits for a query (&f=..., &min=..., &max=...: its filters, fields.js)
//   #/doc/ID         one document               #/similar/ID     documents like document ID
// A click on a search result is reported to the service (POST /clicks, with the answer's impression), and
// how long the user read it when they come back: the traffic log the model learns from.
// Every text that comes from the server (titles, snippets, document text, ids, error messages) is
// inserted with textContent or as text nodes, never as HTML: documents are untrusted input.
"use strict";

(() => {
  const PAGE_SIZE = 10;
  // Relative URLs, so the page also works behind a proxy that mounts the service under a prefix.
  const API = {
    search: "search",
    document: (id) => `documents/${encodeURIComponent(id)}`,
    similar: (id, k, offset) => `documents/${encodeURIComponent(id)}/similar?k=${k}&offset=${offset}`,
    model: "model",
    match: "match",
    clicks: "clicks",
  };
  const MAX_DWELL_MS = 86_400_000; // the service's bound on dwell_ms (one day)

  const $ = (id) => document.getElementById(id);
  const form = $("search-form");
  const input = $("q");
  const status = $("status");
  const intro = $("intro");
  const results = $("results");
  const heading = $("results-heading");
  const hitList = $("hits");
  const more = $("more");
  const docView = $("document");
  const matchView = $("match");
  const sidebar = $("filters");
  const chips = $("chips");
  const Fields = window.SSIFields;
  const { el } = window.SSIDom;

  // What "More results" continues: a function of the offset that returns a promise of a response.
  let nextPage = null;
  let offset = 0;
  let renderToken = 0;

  function setStatus(message, isError = false) {
    status.textContent = message;
    status.classList.toggle("error", isError);
  }

  function show(section) {
    intro.hidden = section !== intro;
    results.hidden = section !== results;
    docView.hidden = section !== docView;
    matchView.hidden = section !== matchView;
    // The sidebar and the chips belong to a search's list; the view that has them draws them again.
    sidebar.hidden = true;
    chips.hidden = true;
  }

  // FastAPI answers errors as {"detail": "..."} or {"detail": [{"loc": [...], "msg": "..."}]}.
  async function errorMessage(response) {
    let detail = "";
    try {
      const body = await response.json();
      if (typeof body.detail === "string") detail = body.detail;
      else if (Array.isArray(body.detail)) detail = body.detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
      else if (body.detail) detail = JSON.stringify(body.detail);
    } catch {
      detail = response.statusText;
    }
    return `Error ${response.status}${detail ? ": " + detail : ""}`;
  }

  async function fetchJson(url, options) {
    const response = await fetch(url, { headers: { Accept: "application/json" }, ...options });
    if (!response.ok) {
      const error = new Error(await errorMessage(response));
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  function words(text) {
    return (text.toLowerCase().match(/[\p{L}\p{N}]+/gu) || []);
  }

  // The snippet as text nodes, with the query's words wrapped in <mark>.
  function highlighted(text, queryWords) {
    const span = el("span");
    if (!queryWords.size) {
      span.textContent = text;
      return span;
    }
    let last = 0;
    for (const match of text.matchAll(/[\p{L}\p{N}]+/gu)) {
      if (!queryWords.has(match[0].toLowerCase())) continue;
      span.append(text.slice(last, match.index), el("mark", { text: match[0] }));
      last = match.index + match[0].length;
    }
    span.append(text.slice(last));
    return span;
  }

  const fmt = (x) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(3) : "–");

  function scoreLine(hit, maxScore) {
    const semantic = Math.max(0, hit.semantic);
    const lexical = Math.max(0, hit.lexical);
    // A hybrid bundle's third part, λ e(q)·e(d) of its pre-trained sentence encoder (null for any other bundle).
    const hybrid = typeof hit.sentence === "number";
    const sentence = hybrid ? Math.max(0, hit.sentence) : 0;
    const scale = maxScore > 0 ? 100 / maxScore : 0;
    // Widths go through the CSSOM (not a style attribute), which a strict Content-Security-Policy allows.
    const semanticBar = el("span", { class: "meter-semantic" });
    const lexicalBar = el("span", { class: "meter-lexical" });
    semanticBar.style.width = `${Math.min(100, semantic * scale)}%`;
    lexicalBar.style.width = `${Math.min(100, lexical * scale)}%`;
    const bars = [semanticBar, lexicalBar];
    if (hybrid) {
      const sentenceBar = el("span", { class: "meter-sentence" });
      sentenceBar.style.width = `${Math.min(100, sentence * scale)}%`;
      bars.push(sentenceBar);
    }
    const meter = el("span", { class: "meter", title: "the parts of the score" }, ...bars);
    const line = el(
      "div",
      { class: "scores" },
      el("span", { class: "score-total", text: `score ${fmt(hit.score)}` }),
      meter,
      el("span", { class: "part semantic", "data-part": "semantic" }, "semantic ", el("b", { text: fmt(hit.semantic) })),
      el("span", { class: "part lexical", "data-part": "lexical" }, "lexical ", el("b", { text: fmt(hit.lexical) })),
    );
    if (hybrid) {
      line.append(
        el("span", { class: "part sentence", "data-part": "sentence", title: "the sentence encoder's part" }, "encoder ",
          el("b", { text: fmt(hit.sentence) })),
      );
    }
    if (hit.lexical === 0) {
      line.append(el("span", { class: "meaning-only", title: "no word in common with the query", text: "found by meaning" }));
    }
    return line;
  }

  function renderHit(hit, queryWords, maxScore) {
    const title = hit.title || hit.id;
    const header = el(
      "div",
      {},
      el("a", { class: "hit-title", href: `#/doc/${encodeURIComponent(hit.id)}`, text: title }),
      el("span", { class: "hit-id", text: hit.id }),
    );
    const similar = el("a", {
      class: "similar-link",
      href: `#/similar/${encodeURIComponent(hit.id)}`,
      text: "Similar documents",
    });
    const line = scoreLine(hit, maxScore);
    line.append(similar);
    const item = el(
      "li",
      { class: "hit", "data-id": hit.id },
      header,
      el("p", { class: "snippet" }, highlighted(hit.snippet || "", queryWords)),
    );
    const fields = Fields.hitFields(hit.fields);
    if (fields) item.append(fields);
    item.append(line);
    return item;
  }

  function describe(body, shown) {
    const parts = [`${shown} result${shown === 1 ? "" : "s"}`];
    if (typeof body.took_ms === "number") parts.push(`${body.took_ms.toFixed(1)} ms`);
    if (typeof body.candidates === "number") parts.push(`${body.candidates} candidates scored exactly`);
    return parts.join(" · ");
  }

  // Shows a list of hits, with "More results" asking `loader(offset)` for the next page; `drawn(body)` is told
  // each first page's answer (a search draws its facets from it).
  async function showHits(title, loader, queryWords, drawn = null) {
    const token = ++renderToken;
    show(results);
    heading.textContent = title;
    hitList.replaceChildren();
    more.hidden = true;
    nextPage = loader;
    offset = 0;
    await loadPage(token, queryWords, true, drawn);
  }

  async function loadPage(token, queryWords, first, drawn = null) {
    setStatus(first ? "Searching…" : "Loading more…");
    more.disabled = true;
    try {
      const body = await nextPage(offset);
      if (token !== renderToken) return; // a newer view replaced this one meanwhile
      const hits = Array.isArray(body.hits) ? body.hits : [];
      // Each page of a list is its own answer with its own impression (null: the service records no traffic).
      const impression = typeof body.impression === "string" && body.impression ? body.impression : null;
      const maxScore = Math.max(0, ...hits.map((h) => h.score), ...Array.from(hitList.children, (li) => Number(li.dataset.score) || 0));
      for (const hit of hits) {
        const item = renderHit(hit, queryWords, maxScore);
        item.dataset.score = String(hit.score);
        if (impression) item.dataset.impression = impression;
        hitList.append(item);
      }
      offset += hits.length;
      more.hidden = hits.length < PAGE_SIZE;
      setStatus(hitList.children.length ? describe(body, hitList.children.length) : "No results.");
      if (first && drawn) drawn(body);
      if (first) more.onclick = () => loadPage(token, queryWords, false);
    } catch (error) {
      if (token === renderToken) setStatus(error.message, true);
    } finally {
      more.disabled = false;
    }
  }

  // A search with the filters of the URL (fields.js): its chips show at once, so a filter the server refuses
  // (a field gone, a bad value in a hand-made link) can still be removed; the sidebar comes with the answer.
  // The list is cleared at once (showHits) and the field types awaited by the first page's request.
  function search(query, filters) {
    input.value = query;
    document.title = `${query} – SSI search`;
    const queryWords = new Set(words(query));
    let types = {};
    const change = (state) => {
      location.hash = `#/search?${Fields.toParams(query, state)}`;
    };
    const ask = async (from) => {
      types = await Fields.fieldTypes();
      const body = { query, k: PAGE_SIZE, offset: from, ...Fields.request(filters, types, from === 0) };
      const post = (request) =>
        fetchJson(API.search, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json" },
          body: JSON.stringify(request),
        });
      // Facets the server will not count (a field of another collection, fewer SSI_MAX_FACETS than the page
      // asks): the list without the sidebar, rather than no list.
      return post(body).catch((error) => {
        if (error.status !== 422 || !body.facets || !/facets/.test(error.message)) throw error;
        delete body.facets;
        return post(body);
      });
    };
    const drawn = (body) => {
      Fields.drawSidebar(sidebar, body, filters, types, change);
      Fields.restoreFocus(sidebar, chips);
    };
    const shown = showHits(`Results for “${query}”`, ask, queryWords, drawn);
    Fields.drawChips(chips, filters, change); // after show(), which hides them
    return shown;
  }

  async function similar(id) {
    const token = ++renderToken;
    input.value = "";
    document.title = `Similar to ${id} – SSI search`;
    let title = id;
    try {
      const doc = await fetchJson(API.document(id));
      title = doc.title || id;
    } catch {
      // The similar list still loads (and reports its own error) if the document cannot be fetched.
    }
    if (token !== renderToken) return; // the user moved on meanwhile
    return showHits(`Documents similar to “${title}”`, (from) => fetchJson(API.similar(id, PAGE_SIZE, from)), new Set());
  }

  async function showDocument(id) {
    const token = ++renderToken;
    setStatus("Loading…");
    try {
      const doc = await fetchJson(API.document(id));
      if (token !== renderToken) return;
      document.title = `${doc.title || doc.id} – SSI search`;
      $("doc-title").textContent = doc.title || doc.id;
      $("doc-id").textContent = doc.id;
      const paragraphs = String(doc.text || "").split(/\n\s*\n/).filter((p) => p.trim());
      $("doc-text").replaceChildren(...paragraphs.map((p) => el("p", { text: p })));
      $("doc-similar").setAttribute("href", `#/similar/${encodeURIComponent(doc.id)}`);
      $("doc-match").setAttribute("href", `#/match/${encodeURIComponent(doc.id)}`);
      show(docView);
      setStatus("");
    } catch (error) {
      if (token === renderToken) {
        show(null);
        setStatus(error.message, true);
      }
    }
  }

  // An advert: its text, its metadata, the score split and why it matched (shared and related words).
  function renderAd(ad, maxScore) {
    const meta = [ad.category && `category ${ad.category}`, ad.advertiser && `advertiser ${ad.advertiser}`,
      ad.budget ? "budget left" : "no budget"].filter(Boolean).join(" · ");
    const why = el("p", { class: "why" });
    if (ad.shared_words.length) why.append(el("b", { text: "shared: " }), ad.shared_words.join(", "), "  ");
    if (ad.related_words.length) why.append(el("b", { text: "related page words: " }), ad.related_words.join(", "));
    return el(
      "li",
      { class: "hit", "data-id": ad.id },
      el("div", {}, el("span", { class: "hit-title", text: ad.title || ad.id }), el("span", { class: "hit-id", text: ad.id })),
      el("p", { class: "snippet", text: ad.text }),
      el("p", { class: "ad-meta", text: meta }),
      why,
      scoreLine(ad, maxScore),
    );
  }

  // POST /match with a page text or the id of a stored document; shows the adverts with their score split.
  async function matchAds(request) {
    const token = ++renderToken;
    show(matchView);
    document.title = "Match ads – SSI search";
    $("ads").replaceChildren();
    if (!request) return setStatus("");
    setStatus("Matching…");
    try {
      const body = await fetchJson(API.match, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ ...request, k: PAGE_SIZE }),
      });
      if (token !== renderToken) return;
      const ads = body.results[0].ads;
      const maxScore = Math.max(0, ...ads.map((a) => a.score));
      $("ads").replaceChildren(...ads.map((ad) => renderAd(ad, maxScore)));
      setStatus(ads.length ? `${ads.length} adverts · ${body.took_ms.toFixed(1)} ms · ${body.results[0].page_words} page words` : "No adverts.");
    } catch (error) {
      if (token === renderToken) setStatus(error.message, true);
    }
  }

  // --- Clicks: the answer's impression and the clicked id go back to the service --------------------------
  // Sent with fetch keepalive (a report outlives the page if it is left or closed, and carries headers,
  // which navigator.sendBeacon cannot), never awaited: a report that fails changes nothing on the page.
  function reportClick(impression, id, dwellMs) {
    const report = { impression, id };
    if (typeof dwellMs === "number" && Number.isFinite(dwellMs)) {
      report.dwell_ms = Math.min(MAX_DWELL_MS, Math.max(0, Math.round(dwellMs)));
    }
    try {
      fetch(API.clicks, {
        method: "POST",
        keepalive: true,
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify(report),
      }).catch(() => {});
    } catch {
      // A browser without fetch keepalive: the click is not reported, the link still works.
    }
  }

  // The result being read: opened from a list at `since`; `away` once the user is on it (its document view
  // here, or another tab or window). Its dwell time is reported when they come back.
  let reading = null;

  function readingHere() {
    const path = location.hash.replace(/^#/, "");
    if (reading === null || !path.startsWith("/doc/")) return false;
    try {
      return decodeURIComponent(path.slice("/doc/".length)) === reading.id;
    } catch {
      return false; // a malformed %-escape: not this document's view
    }
  }

  function endReading() {
    if (reading && reading.away) reportClick(reading.impression, reading.id, performance.now() - reading.since);
    reading = null;
  }

  // A click (or a middle click: a new tab) on a link of a result that an impression named: the title opens the
  // document, "Similar documents" asks for more like it; both say the result looked worth opening.
  function onResultClick(event) {
    if (event.type === "auxclick" && event.button !== 1) return;
    const link = event.target instanceof Element ? event.target.closest("a") : null;
    const item = link ? link.closest("li.hit") : null;
    if (!item || !hitList.contains(item) || !item.dataset.impression) return;
    endReading();
    reportClick(item.dataset.impression, item.dataset.id);
    const opens = link.classList.contains("hit-title");
    reading = opens ? { impression: item.dataset.impression, id: item.dataset.id, since: performance.now(), away: false } : null;
  }
  hitList.addEventListener("click", onResultClick);
  hitList.addEventListener("auxclick", onResultClick);

  // In this tab: the document view opens (reading), then any other view ends the reading.
  function followReading() {
    if (!reading) return;
    if (readingHere()) reading.away = true;
    else endReading();
  }
  // In another tab or window (a result opened with a middle click): away while this page is hidden or
  // unfocused, back when it is shown again on the list.
  function leftPage() {
    if (reading) reading.away = true;
  }
  function cameBack() {
    if (reading && reading.away && !readingHere()) endReading();
  }
  document.addEventListener("visibilitychange", () => (document.visibilityState === "hidden" ? leftPage() : cameBack()));
  window.addEventListener("blur", leftPage);
  window.addEventListener("focus", cameBack);
  // Closed or navigated away while reading: that was the whole visit.
  window.addEventListener("pagehide", () => {
    if (reading && readingHere()) endReading();
  });

  function home() {
    renderToken++;
    input.value = "";
    document.title = "SSI search";
    show(intro);
    setStatus("");
  }

  function route() {
    const hash = location.hash.replace(/^#/, "");
    const [path, queryString = ""] = hash.split("?");
    try {
      if (path === "/search") {
        const params = new URLSearchParams(queryString);
        const query = params.get("q") || "";
        return query.trim() ? search(query, Fields.parse(params)) : home();
      }
      if (path.startsWith("/doc/")) return showDocument(decodeURIComponent(path.slice("/doc/".length)));
      if (path.startsWith("/similar/")) return similar(decodeURIComponent(path.slice("/similar/".length)));
      if (path === "/match") return matchAds(null);
      if (path.startsWith("/match/")) return matchAds({ page_id: decodeURIComponent(path.slice("/match/".length)) });
    } catch (error) {
      setStatus(`Bad link: ${error.message}`, true); // e.g. a malformed %-escape
      return;
    }
    return home();
  }

  async function showModel() {
    try {
      const model = await fetchJson(API.model);
      const parts = [`model ${model.form ?? "?"}`, `N = ${model.n_dims ?? "?"}`, `D = ${model.vocab_size ?? "?"}`];
      if (model.created_at) parts.push(`trained ${model.created_at}`);
      if (model.content_hash) parts.push(`hash ${String(model.content_hash).slice(0, 12)}`);
      $("model").textContent = parts.join(" · ");
    } catch (error) {
      $("model").textContent = `model information unavailable (${error.message})`;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = input.value.trim();
    if (!query) {
      input.focus();
      return;
    }
    const target = `#/search?${new URLSearchParams({ q: query })}`;
    if (location.hash === target) route(); // same query again: search again
    else location.hash = target;
  });
  $("match-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const page = $("page").value;
    if (page.trim()) matchAds({ page });
  });
  // "Back" returns to the list the document was opened from; opened directly, it goes to the start page.
  let viewsVisited = 0;
  $("doc-back").addEventListener("click", (event) => {
    if (viewsVisited > 0) {
      event.preventDefault();
      history.back();
    }
  });
  window.addEventListener("hashchange", () => {
    viewsVisited++;
    followReading();
    route();
  });
  route();
  showModel();
  Fields.fieldTypes(); // read once, early: the first search does not wait for it
})();
