"""Stemming in the text pipeline (ssi.stemming): the vocabulary's words are stems, each token is stemmed once,
the BM25 of a stemming vocabulary is bm25s's BM25 on the same stems (so is `ssi eval`'s baseline), and the
bundle records the stemmer, while a bundle without one reads its words as they are."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer

import ssi.vocab as vocab_module
from ssi.bundle import BundleError, load_bundle
from ssi.records import Document
from ssi.stemming import STEMMERS, Stems, stemmer_of, tokenizer_name
from ssi.tokenize import TOKENIZER_VERSION, tokenize
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from tests.ssi.random_bundle import lowrank_bundle
from training.evaluate.baselines.bm25 import BM25Scorer

TEXTS = [
    "Claims about accelerated ageing were tested in running mice.",
    "The claim: exercise accelerates recovery; runners recovered faster.",
    "Mice that run recover; the recovery of a runner accelerating.",
    "Tumours grow when cells divide; dividing cells feed tumour growth.",
    "Growth factors and the cells they feed, in tumours and in healthy tissue.",
    "Healthy ageing and the claims made about it.",
]
QUERIES = ["claims", "accelerating recovery", "tumour cells dividing", "runs runners running", "the healthy claim"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.build(TEXTS, min_df=1, bm25=Bm25(k1=1.2, b=0.75), stemmer="english")


def test_the_words_are_stems_and_each_token_is_stemmed_once(vocab: Vocabulary) -> None:
    english = Stemmer.Stemmer("english")
    assert vocab.tokenizer == f"{TOKENIZER_VERSION}+snowball-english" and vocab.stemmer == "english"
    assert set(vocab.words) == {english.stemWord(w) for t in TEXTS for w in tokenize(t)}
    # Snowball is not idempotent: accelerated -> acceler -> accel. The vocabulary holds the one-step stem.
    assert english.stemWord("acceler") != "acceler"
    assert "acceler" in vocab.words and "accel" not in vocab.words
    assert vocab.id_of("accelerated") == vocab.id_of("accelerates") == vocab.id_of("Accelerating".casefold())
    assert vocab.id_of("claims") == vocab.id_of("claim") is not None
    one, other = vocab.featurize_queries(["accelerating claims", "accelerated claim"]).toarray()
    np.testing.assert_array_equal(one, other)
    assert np.count_nonzero(one) == 2


def test_bm25_on_stems_is_bm25s_on_the_same_stems_and_the_eval_baseline_agrees(vocab: Vocabulary) -> None:
    english = Stemmer.Stemmer("english")
    stems = [english.stemWords(tokenize(t)) for t in TEXTS]
    terms = sorted({w for doc in stems for w in doc})
    column = {w: i for i, w in enumerate(terms)}
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index(([[column[w] for w in doc] for doc in stems], column), show_progress=False)
    docs = [Document(id=str(i), title="", text=t) for i, t in enumerate(TEXTS)]
    baseline = BM25Scorer(docs, k1=1.2, b=0.75, stemmer="english").score(QUERIES)
    X = vocab.featurize_documents(TEXTS)
    for row, query in enumerate(QUERIES):
        query_stems = [s for s in english.stemWords(tokenize(query)) if s in column]
        expected = retriever.get_scores([column[s] for s in query_stems])
        counts = {s: query_stems.count(s) for s in set(query_stems)}
        scale = np.linalg.norm([vocab.idf[vocab.words.index(s)] * c for s, c in counts.items()])
        got = (X @ vocab.featurize_queries([query]).T).toarray().ravel() * scale
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(baseline[row], expected, rtol=1e-5, atol=1e-6)
    unstemmed = BM25Scorer(docs, k1=1.2, b=0.75).score(["claims"])[0]
    assert np.count_nonzero(unstemmed) == 2 and np.count_nonzero(baseline[0]) == 3  # "claims" alone vs its stem


def test_the_bundle_records_the_stemmer_and_an_unknown_one_is_refused(vocab: Vocabulary, tmp_path: Path) -> None:
    path = lowrank_bundle(tmp_path, vocab)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["tokenizer"] == tokenizer_name("english")
    loaded = load_bundle(path)
    assert loaded.vocab.stemmer == "english" and loaded.vocab.words == vocab.words
    assert (loaded.vocab.featurize_queries(QUERIES) != vocab.featurize_queries(QUERIES)).nnz == 0
    manifest["tokenizer"] = f"{TOKENIZER_VERSION}+snowball-klingon"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="klingon.*this build has"):
        load_bundle(path)


def test_a_bundle_without_a_stemmer_keeps_its_words_as_they_are(tmp_path: Path) -> None:
    plain = Vocabulary.build(TEXTS, min_df=1, bm25=Bm25())
    loaded = load_bundle(lowrank_bundle(tmp_path, plain))
    assert loaded.manifest.tokenizer == TOKENIZER_VERSION and loaded.vocab.stemmer is None
    assert loaded.vocab.id_of("claims") != loaded.vocab.id_of("claim")
    assert "claims" in loaded.vocab.words and "acceler" not in loaded.vocab.words


def test_a_word_porter_stems_to_nothing_keeps_its_spelling_and_the_bundle_loads(tmp_path: Path) -> None:
    """Porter stems "s" (a token of "the cat's toys") to "": the word stays "s", so vocab.tsv has no empty word."""
    texts = ["the cat's toys", "a dog's bones and the cat", "s and more s"]
    porter = Vocabulary.build(texts, min_df=1, bm25=Bm25(), stemmer="porter")
    assert "" not in porter.words and "s" in porter.words
    loaded = load_bundle(lowrank_bundle(tmp_path, porter))
    assert loaded.vocab.words == porter.words and loaded.vocab.id_of("s") == porter.id_of("s")
    assert Stems("porter").stems(["s", "cats"]) == ["s", "cat"] and Stems("porter").stem("s") == "s"


def test_names_and_refusals() -> None:
    assert stemmer_of(tokenizer_name(None)) is None and stemmer_of(tokenizer_name("none")) is None
    assert all(stemmer_of(tokenizer_name(name)) == name for name in STEMMERS[1:])
    with pytest.raises(ValueError, match="unknown stemmer 'klingon'.*english"):
        tokenizer_name("klingon")
    with pytest.raises(ValueError, match="unknown tokenizer"):
        stemmer_of("words-v0+snowball-english")
    with pytest.raises(ValueError, match="stemmer"):
        Vocabulary.interleaved(Vocabulary.build(TEXTS, min_df=1, stemmer="english"), Vocabulary.build(TEXTS, min_df=1))
    stems = Stems("english")
    assert stems.stems(["running", "runs", "running"]) == ["run", "run", "run"] and stems.stem("claims") == "claim"


def test_a_stemming_vocabulary_pickles(vocab: Vocabulary) -> None:
    """It goes to Ray Train's workers and to the index build's featurizing processes."""
    vocab.ids_of(["claims", "running"])  # a memo filled, as after use
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.stemmer == "english" and copy.words == vocab.words
    assert (copy.featurize_queries(QUERIES) != vocab.featurize_queries(QUERIES)).nnz == 0


def test_the_memo_of_word_ids_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service meets new words without end (typos, ids): the memo empties itself and answers stay the same."""
    monkeypatch.setattr(vocab_module, "MEMO_WORDS", 4)
    vocab = Vocabulary.build(TEXTS, min_df=1, stemmer="english")
    first = vocab.ids_of(["claims", "running", "mice"])
    assert vocab.ids_of(["zzz1", "zzz2", "zzz3"]).tolist() == [-1, -1, -1]
    assert len(vocab._token_ids) <= 4
    assert vocab.ids_of(["claims", "running", "mice"]).tolist() == first.tolist() and (first >= 0).all()


def test_a_word_is_spelled_as_the_stemmer_spells_it_and_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`spelled` (a new word's name in the open vocabulary) remembers each token's stem: the stemmer's stems, the
    same again from the memo, and the same once the memo has emptied itself."""
    monkeypatch.setattr(vocab_module, "MEMO_WORDS", 4)
    vocab = Vocabulary.build(TEXTS, min_df=1, stemmer="english")
    english = Stemmer.Stemmer("english")
    tokens = ["zymurgically", "quuxblargs", "running", "zymurgically", "fermentations"]
    assert vocab.spelled(tokens) == english.stemWords(tokens) == vocab.spelled(tokens)
    assert vocab.spelled(["brewing", "brewers", "maltings"]) == english.stemWords(["brewing", "brewers", "maltings"])
    assert len(vocab._spellings) <= 4
    assert vocab.spelled(tokens) == english.stemWords(tokens) and vocab.spelled([]) == []
    assert Vocabulary.build(TEXTS, min_df=1).spelled(tokens) == tokens  # no stemmer: the tokens themselves
