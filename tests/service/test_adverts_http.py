"""POST /match and the advert writes over HTTP, against a real server and a brute-force oracle.

The model is built by hand so that what it must do is known: pages and adverts of T topics use
disjoint words, and U maps a topic's page words, V its advert words, to the same embedding axis.
A page of one topic must then get that topic's adverts by the semantic part alone, sharing no word.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from service_testing import API_KEY, Oracle, ThreadServer, syllable_words, write_corpus
from typer.testing import CliRunner

from service.adverts import BOOK_FILE
from service.settings import CollectionSpec
from service.store import DocumentStore
from ssi.bundle import write_bundle
from ssi.forms import form_class
from ssi.records import Document
from ssi.traffic import EVENTS_FILE, canonical_filter, read_events
from ssi.vocab import Vocabulary
from ssi_cli.main import build_app
from training.clicks import read_click_log
from training.encoder import build_encoder

KEY = {"X-API-Key": API_KEY}
TOPICS = 4
ADS_PER_TOPIC = 8


@pytest.fixture(scope="module")
def ad_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("adworld")
    rng = np.random.default_rng(3)
    words = syllable_words(TOPICS * 16 + 40, rng)
    page_words = [words[t * 10 : (t + 1) * 10] for t in range(TOPICS)]
    ad_words = [words[TOPICS * 10 + t * 6 : TOPICS * 10 + (t + 1) * 6] for t in range(TOPICS)]
    filler = words[TOPICS * 16 :]
    ads, meta, price = [], {}, {}
    for t in range(TOPICS):
        for j in range(ADS_PER_TOPIC):
            ad_id = f"ad-{t}-{j}"
            text = " ".join(rng.choice(ad_words[t], size=4))
            ads.append(Document(ad_id, ad_words[t][j % 6], text))
            meta[ad_id] = {"category": f"cat{t % 2}", "advertiser": f"adv{j % 3}", "budget": j % 4 != 3}
            price[ad_id] = j  # an ordinary field beside the metadata (in the line's `fields` object)
    pages = [
        Document(f"page-{t}", "", " ".join([*rng.choice(page_words[t], size=60), *rng.choice(filler, size=20)]))
        for t in range(TOPICS)
    ]
    vocab = Vocabulary.build([d.full_text for d in [*ads, *pages]], min_df=1)
    U = np.zeros((TOPICS, vocab.size), dtype=np.float32)
    V = np.zeros((TOPICS, vocab.size), dtype=np.float32)
    for t in range(TOPICS):
        for w in page_words[t]:
            U[t, vocab.id_of(w)] = 3.0
        for w in ad_words[t]:
            V[t, vocab.id_of(w)] = 3.0
    form = form_class("lowrank")({"U": U, "V": V})
    bundle = write_bundle(root / "bundles" / "ads", form=form, vocab=vocab, encoder_onnx=build_encoder(U))
    with (root / "ads.jsonl").open("w", encoding="utf-8") as handle:
        for ad in ads:
            # The metadata at the top level of the line, as corpora before the fields had it (read as fields).
            line = {"id": ad.id, "title": ad.title, "text": ad.text, **meta[ad.id], "fields": {"price": price[ad.id]}}
            handle.write(json.dumps(line) + "\n")
    docs_corpus = write_corpus(root / "pages.jsonl", pages)
    return {
        "bundle": root / "bundles" / "ads",
        "ads_corpus": root / "ads.jsonl",
        "docs_corpus": docs_corpus,
        "ads": ads,
        "meta": meta,
        "price": price,
        "pages": pages,
        "page_words": page_words,
        "ad_words": ad_words,
        "written": bundle,
    }


def serve(world: dict, tmp_path: Path, **settings: object) -> ThreadServer:
    spec = CollectionSpec(bundle=world["bundle"], corpus=world["ads_corpus"], type="adverts")
    return ThreadServer(
        bundle=world["bundle"],
        corpus=world["docs_corpus"],
        cache_dir=tmp_path,
        api_key=API_KEY,
        collections={"ads": spec},
        **settings,
    )


def eligible_top(world: dict, page: str, k: int, admits) -> list[str]:  # noqa: ANN001 - a predicate on ids
    """Brute force: every advert's reference score, the admitted ones in score order (ties by corpus order)."""
    oracle = Oracle(world["bundle"], world["ads"])
    f = oracle.scores(page)
    order = np.lexsort((np.arange(f.shape[0]), -f)).tolist()
    return [oracle.ids[i] for i in order if admits(oracle.ids[i])][:k]


def test_a_topic_page_gets_its_topic_adverts_without_a_shared_word(ad_world: dict, tmp_path: Path) -> None:
    with serve(ad_world, tmp_path) as server:
        for t, page in enumerate(ad_world["pages"]):
            response = server.client.post("/match", json={"page": page.text, "k": 5})
            assert response.status_code == 200, response.text
            (result,) = response.json()["results"]
            ads = result["ads"]
            assert len(ads) == 5
            page_tokens = set(page.text.split())
            for ad in ads:
                assert ad["id"].startswith(f"ad-{t}-"), (t, ad["id"])
                assert not page_tokens & set(f"{ad['title']} {ad['text']}".split())
                assert ad["lexical"] == 0.0 and ad["semantic"] > 0 and ad["shared_words"] == []
                assert ad["score"] == pytest.approx(ad["semantic"])
                assert ad["related_words"] and set(ad["related_words"]) <= set(ad_world["page_words"][t])
            # The same ranking as the brute-force reference score.
            assert [a["id"] for a in ads] == eligible_top(ad_world, page.text, 5, lambda _: True)
        # A page given by the id of a stored document, and a batch: the same answers.
        by_id = server.client.post("/match", json={"page_id": "page-2", "k": 5}).json()["results"][0]["ads"]
        batch = server.client.post("/match", json={"pages": [p.text for p in ad_world["pages"]], "k": 5}).json()
        assert [a["id"] for a in by_id] == [a["id"] for a in batch["results"][2]["ads"]]
        assert len(batch["results"]) == TOPICS


def test_filters_hold_and_never_starve(ad_world: dict, tmp_path: Path) -> None:
    meta = ad_world["meta"]
    page = ad_world["pages"][0].text
    with serve(ad_world, tmp_path) as server:
        cases = [
            ({"category": ["cat1"]}, lambda i: meta[i]["category"] == "cat1"),  # no topic-0 advert is in cat1
            (
                {"advertiser": ["adv1", "adv2"], "budget": False},  # one advert per topic
                lambda i: meta[i]["advertiser"] in ("adv1", "adv2") and not meta[i]["budget"],
            ),
            ({"budget": True, "category": ["cat0"]}, lambda i: meta[i]["budget"] and meta[i]["category"] == "cat0"),
        ]
        for filters, admits in cases:
            eligible = sum(admits(a.id) for a in ad_world["ads"])
            k = min(6, eligible)
            assert k >= 4
            response = server.client.post("/match", json={"page": page, "k": k, "filters": filters})
            assert response.status_code == 200, response.text
            ids = [a["id"] for a in response.json()["results"][0]["ads"]]
            assert len(ids) == k, (filters, ids)  # k admitted adverts exist: k come back
            assert all(admits(i) for i in ids)
            assert ids == eligible_top(ad_world, page, k, admits)
        # Asking for more than are admitted gives all of them, no more.
        admits = cases[1][1]
        eligible = [a.id for a in ad_world["ads"] if admits(a.id)]
        filters = {"advertiser": ["adv1", "adv2"], "budget": False}
        response = server.client.post("/match", json={"page": page, "k": 50, "filters": filters})
        assert sorted(a["id"] for a in response.json()["results"][0]["ads"]) == sorted(eligible)
        # The general `filter` of the filter language (service.fields), on the metadata fields and on any other
        # field, ANDed with `filters`: the exact top k among the matching adverts, in a batch as alone.
        price = ad_world["price"]
        general = [
            ({"filter": {"terms": {"advertiser": ["adv1", "adv2"]}}, "filters": {"budget": False}}, cases[1][1]),
            ({"filter": {"range": {"price": {"gte": 2, "lt": 6}}}}, lambda i: 2 <= price[i] < 6),
            (
                {"filter": {"or": [{"term": {"category": "cat1"}}, {"range": {"price": {"lte": 1}}}]}},
                lambda i: meta[i]["category"] == "cat1" or price[i] <= 1,
            ),
            (
                {"filter": {"not": {"term": {"budget": True}}}, "filters": {"category": ["cat0"]}},
                lambda i: not meta[i]["budget"] and meta[i]["category"] == "cat0",
            ),
        ]
        for asked, admits in general:
            k = min(6, sum(admits(a.id) for a in ad_world["ads"]))
            response = server.client.post("/match", json={"pages": [page, page], "k": k, **asked})
            assert response.status_code == 200, response.text
            for result in response.json()["results"]:
                assert [a["id"] for a in result["ads"]] == eligible_top(ad_world, page, k, admits), asked


def test_paused_and_deleted_adverts_never_appear(ad_world: dict, tmp_path: Path) -> None:
    page = ad_world["pages"][1].text
    with serve(ad_world, tmp_path) as server:
        client = server.client

        def matched(k: int = 32) -> list[str]:
            response = client.post("/match", json={"page": page, "k": k})
            assert response.status_code == 200, response.text
            return [a["id"] for a in response.json()["results"][0]["ads"]]

        best = matched(1)[0]
        paused = client.patch(f"/collections/ads/adverts/{best}", json={"active": False}, headers=KEY)
        assert paused.status_code == 200, paused.text
        assert paused.json()["active"] is False
        assert best not in matched() and len(matched()) == 31
        assert matched(1)[0] != best
        assert client.patch(f"/adverts/{best}", json={"active": True}, headers=KEY).status_code == 200
        assert matched(1)[0] == best
        # A new advert written paused is never matched; resumed, it is, with the topic's words.
        new = {
            "title": " ".join(ad_world["ad_words"][1][:3]),
            "text": "",
            "active": False,
            "category": "cat1",
            "fields": {"price": 99, "category": "ignored: the metadata given wins"},
        }
        assert client.put("/adverts/fresh", json=new, headers=KEY).status_code == 200
        assert "fresh" not in matched()
        assert client.patch("/adverts/fresh", json={"active": True}, headers=KEY).status_code == 200
        assert "fresh" in matched()
        # The metadata is four fields of the document; a PATCH keeps its other fields, and a filter finds them.
        fields = {"price": 99, "category": "cat1", "active": True, "budget": True}
        assert client.get("/adverts/fresh").json()["category"] == "cat1"
        assert client.get("/adverts/fresh").json()["fields"] == fields
        assert client.get("/collections/ads/documents/fresh").json()["fields"] == fields
        only = client.post("/match", json={"page": page, "filter": {"range": {"price": {"gt": 50}}}}).json()
        assert [a["id"] for a in only["results"][0]["ads"]] == ["fresh"]
        # Deleted: gone from matches and from reads.
        assert client.delete("/adverts/fresh", headers=KEY).status_code == 200
        assert "fresh" not in matched()
        assert client.get("/adverts/fresh").status_code == 404
        # Writes need the key.
        assert client.patch(f"/adverts/{best}", json={"active": False}).status_code == 401
        assert best in matched()


def test_page_size_bounds(ad_world: dict, tmp_path: Path) -> None:
    page = ad_world["pages"][3].text
    with serve(ad_world, tmp_path) as server:
        twenty_kb = (page + " ") * (20_000 // (len(page) + 1) + 1)
        assert len(twenty_kb) >= 20_000
        ok = server.client.post("/match", json={"page": twenty_kb, "k": 3})
        assert ok.status_code == 200, ok.text
        assert all(a["id"].startswith("ad-3-") for a in ok.json()["results"][0]["ads"])
        huge = server.client.post("/match", json={"page": "word " * 2_000_000, "k": 3})  # 10 MB
        assert huge.status_code == 413
        assert "request body is larger than" in huge.json()["detail"]


def test_bad_input_gets_a_clear_4xx_and_changes_nothing(ad_world: dict, tmp_path: Path) -> None:
    page = ad_world["pages"][0].text
    with serve(ad_world, tmp_path) as server:
        client = server.client
        before = client.post("/match", json={"page": page, "k": 10}).json()["results"][0]["ads"]
        refused = [
            (client.post("/match", json={"k": 3}), 422, "exactly one of page"),
            (client.post("/match", json={"page": page, "pages": [page]}), 422, "exactly one of page"),
            (client.post("/match", json={"page": page, "k": 0}), 422, "k"),
            (client.post("/match", json={"page": "   "}), 422, "page is empty"),
            (client.post("/match", json={"page": page, "filters": {"colour": ["red"]}}), 422, "colour"),
            (client.post("/match", json={"page": page, "filters": {"budget": "yes"}}), 422, "budget"),
            (client.post("/match", json={"page": page, "filter": {"term": {"colour": "red"}}}), 422, "colour"),
            (client.post("/match", json={"page": page, "filter": {"range": {"category": {"gt": 1}}}}), 422, "keyword"),
            (client.post("/match", json={"page": page, "filter": {"exactly": "x"}}), 422, "unknown filter operator"),
            (client.post("/match", json={"page_id": "no-such-page"}), 404, "no document"),
            (client.post("/collections/documents/match", json={"page": page}), 409, "holds documents"),
            (client.patch("/adverts/ad-0-0", json={"active": "no"}, headers=KEY), 422, "active"),
            (client.patch("/adverts/ad-0-0", json={}, headers=KEY), 422, "nothing to change"),
            (client.patch("/adverts/no-such-ad", json={"active": False}, headers=KEY), 404, "no advert"),
            (client.put("/adverts/x", json={"title": "", "text": ""}, headers=KEY), 422, "title or a text"),
            (client.put("/adverts/x", json={"title": "t", "fields": {"price": "high"}}, headers=KEY), 409, "price"),
        ]
        for response, status, words in refused:
            assert response.status_code == status, (response.status_code, response.text)
            assert words in response.text, response.text
        after = client.post("/match", json={"page": page, "k": 10}).json()["results"][0]["ads"]
        assert after == before
        assert client.get("/adverts/x").status_code == 404
        assert client.get("/adverts/ad-0-0").json()["active"] is True


def test_advert_metadata_survives_a_restart(ad_world: dict, tmp_path: Path) -> None:
    """Paused stays paused; and the metadata book an earlier version kept beside the store (adverts.sqlite) is
    adopted into the adverts' fields when the collection opens, once (service.adverts.adopt_book)."""
    page, price = ad_world["pages"][2].text, ad_world["price"]
    with serve(ad_world, tmp_path) as server:
        best, second = [
            a["id"] for a in server.client.post("/match", json={"page": page, "k": 2}).json()["results"][0]["ads"]
        ]
        assert server.client.patch(f"/adverts/{best}", json={"active": False}, headers=KEY).status_code == 200
        folder = DocumentStore.path_for(server.settings.store_dir, "ads").parent
    book = sqlite3.connect(folder / BOOK_FILE)
    book.execute("CREATE TABLE adverts (id TEXT PRIMARY KEY, meta TEXT NOT NULL)")
    old = {"active": False, "category": "sport", "advertiser": None, "budget": False}
    book.execute("INSERT INTO adverts VALUES (?, ?), ('gone', ?)", (second, json.dumps(old), json.dumps(old)))
    book.commit()
    book.close()
    with serve(ad_world, tmp_path) as server:
        assert server.client.get(f"/adverts/{best}").json()["active"] is False
        ids = [a["id"] for a in server.client.post("/match", json={"page": page, "k": 32}).json()["results"][0]["ads"]]
        assert best not in ids and second not in ids and len(ids) == 30
        adopted = server.client.get(f"/adverts/{second}").json()
        assert (adopted["active"], adopted["category"], adopted["advertiser"], adopted["budget"]) == (
            False, "sport", None, False
        )  # fmt: skip
        assert adopted["fields"] == {"active": False, "budget": False, "category": "sport", "price": price[second]}
    assert not (folder / BOOK_FILE).exists() and (folder / f"{BOOK_FILE}.adopted").is_file()


def test_advert_clicks_on_match_answers_reach_an_adverts_model(ad_world: dict, tmp_path: Path) -> None:
    """/match names each page's impression; advert clicks on it are logged and `ssi train --clicks` learns from the
    event store itself (pages are the queries, adverts the documents)."""
    with serve(ad_world, tmp_path) as server:
        clicked = []
        for round_ in range(3):
            for t, page in enumerate(ad_world["pages"]):
                text = f"{page.text} visit {round_}"
                (result,) = server.client.post("/collections/ads/match", json={"page": text, "k": 4}).json()["results"]
                assert result["impression"]
                ad = result["ads"][(t + round_) % 4]["id"]
                answer = server.client.post(
                    "/collections/ads/clicks", json={"impression": result["impression"], "id": ad}
                )
                assert answer.status_code == 200 and answer.json()["recorded"], answer.text
                clicked.append((text, ad))
        # A filtered match records what the request restricted it to, as one filter (the `filters` translated).
        asked = {"page": ad_world["pages"][0].text, "k": 2, "filters": {"budget": True}, "filter": {"exists": "price"}}
        filtered = server.client.post("/collections/ads/match", json=asked).json()["results"][0]["impression"]
        server.app.state.traffic.flush()
        events = server.settings.store_dir / "ads" / EVENTS_FILE
    under = {r.impression: r.filter for r in read_events(events)}
    expected = {"and": [{"not": {"term": {"budget": False}}}, {"exists": "price"}]}
    assert under.pop(filtered) == canonical_filter(expected) and set(under.values()) == {None}
    logged = [(r.text, r.doc) for r in read_events(events) if r.clicked]
    assert sorted(logged) == sorted(clicked) and {r.kind for r in read_events(events)} == {"match"}
    log = read_click_log(events)
    assert sum(i.clicked for i in log.impressions) == len(clicked)
    out = tmp_path / "retrained"
    args = ["train", "--corpus", str(ad_world["ads_corpus"]), "--clicks", str(events), "--out", str(out)]
    result = CliRunner().invoke(build_app(), [*args, "--dims", "4", "--epochs", "2", "--valid-share", "0"])
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").is_file() and "click pairs (pbm)" in result.output
