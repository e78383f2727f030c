"""`GET /words/{word}/nearest` over a real server: the same neighbours as `ssi words`, and clear 4xx answers."""

from __future__ import annotations

from pathlib import Path

from service_testing import ThreadServer, make_bundle

from ssi.bundle import load_bundle
from ssi.words import nearest_words


def test_nearest_words_route_matches_the_contract_function(small_world: dict, tmp_path: Path) -> None:
    bundle = load_bundle(small_world["bundle"])
    word = bundle.vocab.words[3]
    expected = nearest_words(bundle.form, bundle.vocab, word, 7)
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path / "c") as server:
        for path in (f"/words/{word}/nearest", f"/collections/documents/words/{word}/nearest"):
            response = server.client.get(path, params={"k": 7})
            assert response.status_code == 200, response.text
            got = response.json()["neighbours"]
            assert [n["word"] for n in got] == [n.word for n in expected]
            assert all(abs(a["distance"] - b.distance) < 1e-6 for a, b in zip(got, expected, strict=True))
        unknown = server.client.get("/words/zzzzqqq/nearest")
        assert unknown.status_code == 404 and "not in the model's vocabulary" in unknown.json()["detail"]
        two = server.client.get("/words/two%20words/nearest")
        assert two.status_code == 404 and "give one word" in two.json()["detail"]
        assert server.client.get(f"/words/{word}/nearest", params={"k": 0}).status_code == 422
        assert server.client.get(f"/words/{word}/nearest", params={"k": 101}).status_code == 422


def test_a_form_without_word_embeddings_answers_409(small_world: dict, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "diagonal", small_world["docs"], form="diagonal")
    word = load_bundle(bundle).vocab.words[0]
    with ThreadServer(bundle=bundle, corpus=small_world["corpus"], cache_dir=tmp_path / "c") as server:
        response = server.client.get(f"/words/{word}/nearest")
        assert response.status_code == 409 and "has no word embeddings" in response.json()["detail"]
