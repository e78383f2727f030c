"""The search page in a real browser against a real server.

A small demo collection (plus one hostile document) is trained into a bundle, `ssi serve` runs it on
a free loopback port, and headless Debian Chromium, driven by Playwright, uses the page as a person
would: types a query, reads the hits and their semantic/lexical parts, follows "Similar documents",
opens a document, and its clicks on results reach the service's traffic log; the documents carry fields, so
the page offers facets, filter chips and ranges (service/static/fields.js). Screenshots go to artifacts/
(gitignored) and their paths are printed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import httpx
import pytest

from ssi.traffic import EVENTS_FILE, ShownResult, read_events
from training.demo_corpus import DemoConfig, generate, write

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
SSI = Path(sys.executable).with_name("ssi")

# A document whose id, title and text try to run code if the page ever inserted them as HTML.
EVIL_ID = "evil/<b>\"quoted\" & 'id'"
EVIL_TITLE = "<img src=x onerror=\"window.__xss='title'\"> Spyglass & telescope notes"
EVIL_TEXT = (
    "<script>window.__xss='text'</script> The spyglass and the telescope are often discussed together. "
    "<img src=y onerror=\"window.__xss='snippet'\"> Anyone who studies the xssprobe soon learns about the lens."
)
# A second document with the rare word "xssprobe", so the word is in the vocabulary (min_df 2) and a
# search for it finds the hostile document by its lexical part, whatever the model learned.
TWIN = {"id": "xss-twin", "title": "A plain twin", "text": "The xssprobe is often discussed together with the comet."}
# A value of a field that would run code if the facet sidebar, a chip or a hit's fields took it as HTML.
EVIL_TOPIC = "<img src=z onerror=\"window.__xss='facet'\"> stars & <b>bold</b>"


def _fields(doc_id: str) -> dict:
    """A demo document's fields, from its id (astronomy-007): its topic, tags, a flag and a year."""
    topic, number = doc_id.rsplit("-", 1)
    n = int(number)
    tags = ["even"] * (n % 2 == 0) + ["round"] * (n % 5 == 0)
    return {"topic": topic, "tags": tags, "featured": n % 3 == 0, "year": 2000 + n % 10}


pytestmark = pytest.mark.browser


def _require_browser() -> None:
    if Path(CHROMIUM).is_file():
        return
    message = f"{CHROMIUM} is missing: install Debian's browser (apt-get install chromium chromium-driver)"
    if os.environ.get("SSI_REQUIRE_BROWSER") == "1":
        pytest.fail(message + " (SSI_REQUIRE_BROWSER=1 makes this an error)")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _clean_env() -> dict[str, str]:
    """This process's environment without SSI_* settings, so a developer's shell cannot change the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSI_")}
    env["PATH"] = f"{SSI.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _build_bundle(data: Path) -> None:
    """A small demo collection with one hostile document, trained the way the quick start trains."""
    source = data / "input"
    write(generate(DemoConfig(topics=6, seed=5)), source)
    corpus = source / "corpus.jsonl"
    docs = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    evil_fields = {"topic": EVIL_TOPIC, "tags": [EVIL_TOPIC]}
    evil = {"id": EVIL_ID, "title": EVIL_TITLE, "text": EVIL_TEXT, "fields": evil_fields}
    with corpus.open("w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps({**doc, "fields": _fields(doc["id"])}) + "\n")
        handle.write(json.dumps(evil) + "\n")
        handle.write(json.dumps(TWIN) + "\n")  # a document without fields
    # A fixed number of epochs (not only a time budget), so the model does not depend on the machine's speed.
    subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "train-bundle.sh"),
            "--data",
            str(data),
            "--input",
            str(source),
            "--minutes",
            "3",
            "--",
            "--epochs",
            "150",
            "--seed",
            "1",
            "--no-progress",
        ],
        env=_clean_env(),
        check=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's folder: input, bundle, corpus and its cache (whose stores/ hold the traffic log)."""
    return tmp_path_factory.mktemp("served")


@pytest.fixture(scope="module")
def server(served_dir: Path) -> Iterator[str]:
    _require_browser()
    data = served_dir
    _build_bundle(data)
    port = _free_port()
    log_path = data / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(SSI),
                "serve",
                "--bundle",
                str(data / "bundle"),
                "--corpus",
                str(data / "corpus.jsonl"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--cache-dir",
                str(data / "cache"),
            ],
            env=_clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                log_tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"ssi serve exited with {process.returncode}:\n{log_tail}")
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"ssi serve not ready after 180 s:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless chromium for the module: each test gets a context of its own (`page`), as fresh as a new
    profile (no cookies, storage or cache shared), without a browser start per test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1100, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        problems: list[str] = []  # JavaScript errors and console errors seen while testing
        page.problems = problems
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
        yield page
    finally:
        context.close()


def _screenshot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def _hits(page: object) -> list[dict]:
    """What the page shows for each hit: id, title, and the numbers of the score and its two parts."""
    return page.eval_on_selector_all(
        "#hits .hit",
        """items => items.map(li => ({
            id: li.dataset.id,
            title: li.querySelector('.hit-title').textContent,
            score: parseFloat(li.querySelector('.score-total').textContent.replace('score', '')),
            semantic: parseFloat(li.querySelector('.part.semantic b').textContent),
            lexical: parseFloat(li.querySelector('.part.lexical b').textContent),
            similar: li.querySelector('a.similar-link').getAttribute('href'),
        }))""",
    )


def test_search_similar_and_document_view(server: str, page: object) -> None:
    page.goto(f"{server}/")
    assert page.title() == "SSI search"
    page.fill("#q", "spyglass")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits .hit")
    page.wait_for_function("document.querySelector('#status').textContent.includes('result')")
    shown = _hits(page)
    _screenshot(page, "search-page.png")

    # The page shows the server's ranking, in order, with both parts of every score.
    api = httpx.post(f"{server}/search", json={"query": "spyglass", "k": 10, "offset": 0}, timeout=30).json()["hits"]
    assert [h["id"] for h in shown] == [h["id"] for h in api]
    assert len(shown) == 10
    for hit, truth in zip(shown, api, strict=True):
        assert hit["semantic"] == pytest.approx(truth["semantic"], abs=1e-3)
        assert hit["lexical"] == pytest.approx(truth["lexical"], abs=1e-3)
        assert hit["score"] == pytest.approx(hit["semantic"] + hit["lexical"], abs=2e-3)
        assert hit["title"] == (truth["title"] or truth["id"])

    # Found by meaning: hits that share no word with the query are still on its topic (astronomy).
    meaning_only = [h for h in shown if h["lexical"] == 0]
    assert meaning_only, "the top 10 should include documents that do not contain the query word"
    on_topic = [h for h in meaning_only if h["id"].startswith("astronomy-")]
    assert len(on_topic) >= 0.7 * len(meaning_only), meaning_only
    assert page.locator("#hits .meaning-only").count() == len(meaning_only)

    # "More results" appends the next page, as the API pages it.
    page.click("#more")
    page.wait_for_function("document.querySelectorAll('#hits .hit').length > 10")
    page_two = httpx.post(f"{server}/search", json={"query": "spyglass", "k": 10, "offset": 10}, timeout=30).json()
    assert [h["id"] for h in _hits(page)] == [h["id"] for h in api + page_two["hits"]]

    # "Similar documents" of the first hit: a new list, without the document itself.
    first = shown[0]
    page.locator("#hits .hit").first.locator("a.similar-link").click()
    page.wait_for_function("document.querySelector('#results-heading').textContent.startsWith('Documents similar to')")
    page.wait_for_function("document.querySelector('#status').textContent.includes('result')")
    hash_path = page.evaluate("location.hash")
    assert hash_path.startswith("#/similar/") and unquote(hash_path.removeprefix("#/similar/")) == first["id"]
    similar = _hits(page)
    assert similar and first["id"] not in {h["id"] for h in similar}
    truth = httpx.get(f"{server}/documents/{quote(first['id'], safe='')}/similar", params={"k": 10}, timeout=30).json()
    assert [h["id"] for h in similar] == [h["id"] for h in truth["hits"]]
    _screenshot(page, "similar-page.png")

    # The document view of one of them, and Back returns to the list.
    target = similar[0]
    page.locator("#hits .hit").first.locator("a.hit-title").click()
    page.wait_for_selector("#document:not([hidden])")
    document = httpx.get(f"{server}/documents/{quote(target['id'], safe='')}", timeout=30).json()
    assert page.text_content("#doc-title") == document["title"]
    assert page.text_content("#doc-id") == document["id"]
    assert document["text"].split(".")[0] in page.text_content("#doc-text")
    _screenshot(page, "document-page.png")
    page.click("#doc-back")
    page.wait_for_selector("#results:not([hidden]) #hits .hit")
    assert [h["id"] for h in _hits(page)] == [h["id"] for h in similar]
    page.go_back()  # the browser's Back too: to the search results
    page.wait_for_function("document.querySelector('#results-heading').textContent.startsWith('Results for')")
    assert page.input_value("#q") == "spyglass"

    assert not page.problems, page.problems


def test_untrusted_text_is_shown_as_text_never_run(server: str, page: object) -> None:
    page.goto(f"{server}/#/doc/{quote(EVIL_ID, safe='')}")
    page.wait_for_selector("#document:not([hidden])")
    assert page.text_content("#doc-title") == EVIL_TITLE
    assert page.text_content("#doc-id") == EVIL_ID
    assert "<script>" in page.text_content("#doc-text")
    assert page.locator("#document img, #document script, #document b").count() == 0

    # Its similar documents, and a search that finds it: the snippet and title stay text too.
    page.click("#doc-similar")
    page.wait_for_function("document.querySelector('#results-heading').textContent.startsWith('Documents similar to')")
    page.fill("#q", "xssprobe")
    page.press("#q", "Enter")
    page.wait_for_selector("#hits .hit")
    # Where the model ranks it varies; page on ("More results") until the page shows it.
    ranked = httpx.post(f"{server}/search", json={"query": "xssprobe", "k": 100}, timeout=30).json()["hits"]
    position = [h["id"] for h in ranked].index(EVIL_ID)
    for shown in range(10, position + 1, 10):
        page.click("#more")
        page.wait_for_function(f"document.querySelectorAll('#hits .hit').length > {shown}")
    evil = page.locator(f"#hits .hit[data-id='{EVIL_ID.replace(chr(39), chr(92) + chr(39))}']")
    assert evil.count() == 1
    assert evil.locator(".hit-title").text_content() == EVIL_TITLE
    assert page.locator("#hits img, #hits script").count() == 0
    _screenshot(page, "hostile-document.png")

    assert page.evaluate("window.__xss") is None
    assert not page.problems, page.problems


def test_errors_are_reported_on_the_page(server: str, page: object) -> None:
    page.goto(f"{server}/#/doc/{quote('no such document', safe='')}")
    page.wait_for_function("document.querySelector('#status').classList.contains('error')")
    assert page.text_content("#status").startswith("Error 404")
    # The console error of the failed fetch is expected here; nothing else may break.
    assert all("404" in problem for problem in page.problems), page.problems


def _logged(
    log: Path, impression: str, settled: Callable[[list[ShownResult]], bool], timeout: float = 10.0
) -> list[ShownResult]:
    """The impression's shown results in the server's traffic log, once `settled(rows)` holds (the click is
    committed before the page's request is answered; its impression within the writer's 0.1 s)."""
    deadline = time.monotonic() + timeout
    rows: list[ShownResult] = []
    while time.monotonic() < deadline:
        rows = [r for r in read_events(log) if r.impression == impression] if log.exists() else []
        if settled(rows):
            break
        time.sleep(0.1)
    return rows


def test_a_click_on_a_result_reaches_the_traffic_log_at_its_position(
    server: str, served_dir: Path, page: object
) -> None:
    page.goto(f"{server}/")
    page.fill("#q", "spyglass")
    page.press("#q", "Enter")
    page.wait_for_function("document.querySelectorAll('#hits .hit').length >= 3")
    items = page.locator("#hits .hit")
    impression = items.first.get_attribute("data-impression")
    assert impression, "the page keeps the answer's impression on each result"
    shown = [h["id"] for h in _hits(page)]

    # The third result's title: the page reports the click, then opens the document as before.
    target = items.nth(2)
    with page.expect_response(lambda r: r.url.endswith("/clicks") and r.request.method == "POST") as answer:
        target.locator("a.hit-title").click()
    assert answer.value.status == 200, answer.value.text()
    assert answer.value.json() == {"recorded": True, "position": 3}
    assert json.loads(answer.value.request.post_data) == {"impression": impression, "id": shown[2]}
    page.wait_for_selector("#document:not([hidden])")
    assert page.text_content("#doc-id") == shown[2]

    log = served_dir / "cache" / "stores" / "documents" / EVENTS_FILE
    rows = _logged(log, impression, lambda rows: any(r.clicked for r in rows))
    assert [r.doc for r in rows] == shown[: len(rows)] and rows[0].text == "spyglass"
    assert [(r.position, r.doc) for r in rows if r.clicked] == [(3, shown[2])]

    # Back on the list, the page reports how long the document was read (the same click: it counts once).
    page.wait_for_timeout(300)
    with page.expect_response(lambda r: r.url.endswith("/clicks")) as dwell:
        page.click("#doc-back")
    assert dwell.value.json() == {"recorded": False, "position": 3}
    page.wait_for_selector("#results:not([hidden]) #hits .hit")
    rows = _logged(log, impression, lambda rows: any(r.dwell_ms for r in rows))
    (clicked,) = [r for r in rows if r.clicked]
    assert clicked.position == 3 and clicked.dwell_ms is not None and clicked.dwell_ms >= 250
    assert not page.problems, page.problems


def test_results_without_an_impression_stay_usable_and_report_nothing(server: str, page: object) -> None:
    """An answer that names no impression (a server with SSI_EVENTS=false): no report, the links work as before."""

    def no_impression(route: object) -> None:
        answer = route.fetch()
        body = answer.json()
        body["impression"] = None
        route.fulfill(response=answer, json=body)

    clicks: list[str] = []
    page.on("request", lambda request: clicks.append(request.url) if request.url.endswith("/clicks") else None)
    page.route("**/search", no_impression)
    page.goto(f"{server}/#/search?q=spyglass")
    page.wait_for_selector("#hits .hit")
    first = page.locator("#hits .hit").first
    assert first.get_attribute("data-impression") is None
    doc_id = first.get_attribute("data-id")
    first.locator("a.hit-title").click()
    page.wait_for_selector("#document:not([hidden])")
    assert page.text_content("#doc-id") == doc_id
    page.click("#doc-back")
    page.wait_for_selector("#results:not([hidden]) #hits .hit")
    page.locator("#hits .hit").first.locator("a.similar-link").click()
    page.wait_for_function("document.querySelector('#results-heading').textContent.startsWith('Documents similar to')")
    page.wait_for_timeout(300)
    assert clicks == []
    assert not page.problems, page.problems


def _facet(page: object, field: str) -> dict[str, int]:
    """The sidebar's values of a field with their counts, as the page shows them."""
    return dict(
        page.eval_on_selector_all(
            f"#filters .facet[data-field='{field}'] .facet-value",
            "items => items.map(b => [b.dataset.value, parseInt(b.querySelector('.facet-count').textContent)])",
        )
    )


def _api(server: str, **body: object) -> dict:
    answer = httpx.post(f"{server}/search", json={"query": "spyglass", "k": 10, **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _settled(page: object, ids: list[str]) -> None:
    """Wait until the list shows exactly these ids (a filter's list replaces the one before it)."""
    page.wait_for_function(
        "ids => JSON.stringify(Array.from(document.querySelectorAll('#hits .hit'), li => li.dataset.id)) === ids",
        arg=json.dumps(ids, separators=(",", ":")),
    )


def test_facets_chips_and_ranges_filter_the_hits(server: str, page: object) -> None:
    """Issue 63's page: the facet counts are /search's, a value's click or Enter filters (a chip), every chip is
    one clause of an `and`, a chip's click removes it, and every list equals the API's for the same filter."""
    page.goto(f"{server}/")
    page.fill("#q", "spyglass")
    page.press("#q", "Enter")
    page.wait_for_selector("#filters:not([hidden]) .facet[data-field='topic']")

    # The sidebar counts each value over every document (not over the ten hits), as /search's facets do; the
    # hostile topic is a value like any other, shown as text.
    truth = _api(server, facets=["topic", "featured"])
    for field in ("topic", "featured"):
        assert _facet(page, field) == {str(v["value"]).lower(): v["count"] for v in truth["facets"][field]["values"]}
    assert _facet(page, "topic")["astronomy"] == 36 and EVIL_TOPIC in _facet(page, "topic")
    assert page.locator("#filters .range[data-field='year'] input[type=number]").count() == 2
    assert "topic" in page.text_content("#hits .hit .hit-fields")

    # A value's click: a chip, and only the documents with that value, each showing it, ranked as the API ranks.
    page.click("#filters .facet[data-field='topic'] .facet-value[data-value='astronomy']")
    astronomy = _api(server, filter={"term": {"topic": "astronomy"}})
    _settled(page, [h["id"] for h in astronomy["hits"]])
    assert all(h["id"].startswith("astronomy-") for h in astronomy["hits"]) and len(astronomy["hits"]) == 10
    assert page.locator("#chips .chip").all_text_contents() == ["topic: astronomy×"]
    assert page.get_attribute("#filters .facet-value[data-value='astronomy']", "aria-pressed") == "true"
    assert _facet(page, "topic") == {"astronomy": 36}
    assert page.evaluate("document.activeElement.dataset.value") == "astronomy"  # the keyboard stays where it was
    assert "36 documents match" in page.text_content("#filters .matched")
    assert page.locator("#hits .hit-fields [data-field='topic'] dd").all_text_contents() == ["astronomy"] * 10

    # A second chip (a boolean) and a range, from the keyboard: every chip narrows (one `and`).
    page.focus("#filters .facet[data-field='featured'] .facet-value[data-value='true']")
    page.keyboard.press("Enter")
    page.wait_for_selector("#chips .chip >> nth=1")
    page.wait_for_function("document.activeElement.getAttribute('aria-pressed') === 'true'")
    page.fill("#filters .range[data-field='year'] input[data-bound='min']", "2003")
    page.press("#filters .range[data-field='year'] input[data-bound='min']", "Enter")
    both = {"and": [{"term": {"topic": "astronomy"}}, {"term": {"featured": True}}, {"range": {"year": {"gte": 2003}}}]}
    narrowed = _api(server, filter=both)
    _settled(page, [h["id"] for h in narrowed["hits"]])
    assert 0 < narrowed["matched"] < 36
    assert page.locator("#chips .chip").count() == 3
    _screenshot(page, "search-facets.png")

    # The topic's chip removed by a click: the list of the other two.
    page.click("#chips .chip[aria-label='Remove the filter topic: astronomy']")
    rest = _api(server, filter={"and": [{"term": {"featured": True}}, {"range": {"year": {"gte": 2003}}}]})
    _settled(page, [h["id"] for h in rest["hits"]])
    assert page.locator("#chips .chip").all_text_contents() == ["featured: true×", "year ≥ 2003×"]
    assert page.evaluate("window.__xss") is None and page.locator("#filters img, #filters b").count() == 0

    # Without the published schema (a proxy that does not pass it on), the page searches as it did.
    page.route("**/openapi.json", lambda route: route.fulfill(status=404, body="not here"))
    page.goto("about:blank")
    page.goto(f"{server}/#/search?q=spyglass")
    page.wait_for_function("document.querySelector('#status').textContent.includes('result')")
    assert page.locator("#hits .hit").count() == 10 and page.locator("#filters").is_hidden()
    assert all("404" in problem for problem in page.problems), page.problems
