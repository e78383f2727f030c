"""The index build's featurizer (service.bulk_featurize) gives exactly what the tokenizer and the vocabulary give.

The tokenizer is part of the model contract, so the array path must find the same words as
`ssi.tokenize.tokenize` on any text (checked on tricky Unicode, random text and every code point)
and produce the same tf-idf bytes as `Vocabulary.featurize`; a build from a store must hold the
rows and vectors the reference path makes, row for row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from service_testing import make_bundle, write_corpus

from service import bulk_featurize, featurize_pool
from service.bulk_featurize import CODE_CHARS, BulkFeaturizer, spans, vocabulary_codes, words_of_tokens
from service.embedding import Embedder
from service.settings import Settings
from service.state_builder import open_state
from service.store import DocumentStore
from ssi.bundle import load_bundle
from ssi.records import Document
from ssi.tokenize import MAX_WORD_CHARS, tokenize
from ssi.vocab import Vocabulary

TRICKY = [
    "",
    " ",
    "Hello, World! foo_bar baz__qux __init__ a_b_c",
    "ÉCOLE école Straße STRASSE ß ẞ",
    "ﬁne ﬂow ﬀ",  # ligatures: NFKC spells them out
    "x² H₂O ½ ① ⅷ Ⅻ",  # super/subscripts, fractions, circled and Roman numerals
    "İstanbul ǰ Ǆ ǅ ǆ",  # case folding that adds a combining mark, titlecase digraphs
    "ΣΊΣΥΦΟΣ σίσυφος ς",  # final sigma
    "日本語のテキスト 한국어 텍스트 中文",
    "e\u0301 a\u0308 o\u0302\u0323",  # decomposed accents: NFKC composes them
    "٣٤٥ ١٢ ۱۲۳ १२३",  # Arabic-Indic and Devanagari digits
    "𝐀𝐁𝐂 𝟏𝟐 ＡＢＣ１２３",  # mathematical bold, fullwidth
    "हिन्दी தமிழ் ไทย",  # combining vowel signs split words
    "a\u200db a\u00a0b a\u2009b a\u3000b",  # zero-width joiner, no-break and ideographic spaces
    "\ud800abc \udfffdef",  # lone surrogates
    "\x00zero\x00 \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85 end",
    "ﷺ ﷽",  # one character that NFKC makes a phrase
    "👍🏽 test 🇫🇷 ok",
    "3.14 1,000 2024-01-01 v2 x86_64",
    "a" * MAX_WORD_CHARS + " " + "b" * (MAX_WORD_CHARS + 1) + " " + "é" * (MAX_WORD_CHARS + 1) + "x",
    "c" * CODE_CHARS + " " + "d" * (CODE_CHARS + 1) + " " + "z9" * 6 + " " + "9" * CODE_CHARS,
    "x" * 100 + "_y " + "_" * 50 + " word",
]


def random_texts(n: int, seed: int) -> list[str]:
    """Texts of characters drawn from ASCII, Latin, Greek, CJK, marks, digits, spaces and anything at all."""
    rng = np.random.default_rng(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        " _-.,;:!?'\"()\t\n",
        "àéîõüßÆæØøÅåÇçÑñ" + "ΑΒΓΣσςωΩ" + "АБВабв",
        "\u0300\u0301\u0308\u0327\u200d\u00a0\u2009",
        "日本語中文한국어",
        "²³¹½ⅫⅷＡＢＣ１２ﬁﬂ",
    ]
    texts = []
    for _ in range(n):
        chars = []
        for _ in range(int(rng.integers(0, 120))):
            kind = int(rng.integers(0, len(pools) + 1))
            if kind == len(pools):
                chars.append(chr(int(rng.integers(0, 0x110000))))
            else:
                pool = pools[kind]
                chars.append(pool[int(rng.integers(0, len(pool)))])
        if rng.random() < 0.1:  # a long run, around the limits
            chars.append("q" * int(rng.integers(CODE_CHARS - 1, MAX_WORD_CHARS + 3)))
        texts.append("".join(chars))
    return texts


def same_rows(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    """Byte-identical CSR matrices: shape, dtypes, structure, values and the sorted-indices flag."""
    return (
        a.shape == b.shape
        and a.has_sorted_indices == b.has_sorted_indices
        and all(
            getattr(a, k).dtype == getattr(b, k).dtype and getattr(a, k).tobytes() == getattr(b, k).tobytes()
            for k in ("data", "indices", "indptr")
        )
    )


@pytest.mark.parametrize("texts", [TRICKY, random_texts(400, seed=3)], ids=["tricky", "random"])
def test_the_words_are_the_tokenizers(texts: list[str]) -> None:
    assert spans(texts).words() == [tokenize(t) for t in texts]


def test_every_code_point_splits_words_as_the_tokenizer_does() -> None:
    """Each character alone, doubled and between letters and digits: NFKC, case folding and `\\w` for all of them."""
    for first in range(0, 0x110000, 1 << 16):
        texts = [f"q{c}9{c}{c} {c}" for c in map(chr, range(first, first + (1 << 16)))]
        assert spans(texts).words() == [tokenize(t) for t in texts], f"code points from {first:#x}"


def vocabulary_of_edges() -> Vocabulary:
    """Words at every edge of the array path: coded and not, 12/13/40 characters, non-ASCII, digits."""
    words = tokenize(" ".join(TRICKY)) + ["c" * (CODE_CHARS - 1), "never_a_token", "Capital", "two words", "ǰ"]
    words += tokenize(" ".join(random_texts(200, seed=5)))
    unique = list(dict.fromkeys(words))
    return Vocabulary(words=unique, idf=np.linspace(1.0, 3.0, len(unique), dtype=np.float32))


def test_vocabulary_codes_are_distinct_and_only_for_short_plain_words() -> None:
    vocab = vocabulary_of_edges()
    codes = vocabulary_codes(vocab.words)
    coded = codes != 0
    plain = np.array([0 < len(w) <= CODE_CHARS and w.isascii() and w.isalnum() and w == w.lower() for w in vocab.words])
    assert (coded == plain).all()
    assert np.unique(codes[coded]).size == coded.sum()


@pytest.mark.parametrize("chunk_chars", [None, 64], ids=["default-chunks", "tiny-chunks"])
def test_rows_are_the_vocabularys_byte_for_byte(monkeypatch: pytest.MonkeyPatch, chunk_chars: int | None) -> None:
    if chunk_chars is not None:  # many chunks per batch, and texts longer than a chunk
        monkeypatch.setattr(bulk_featurize, "CHUNK_CHARS", chunk_chars)
    vocab = vocabulary_of_edges()
    featurizer = BulkFeaturizer(vocab)
    assert featurizer.uses_arrays
    texts = TRICKY + random_texts(300, seed=7) + [" ".join(vocab.words), "no known word here? !!"]
    for batch in (texts, texts[:1], texts[5:6], texts[::-1]):
        assert same_rows(featurizer.featurize(batch), vocab.featurize(batch))
        # The ids and the unknown words a page's open term takes (sliced out of the text, not tokenized again).
        found, expected = featurizer.words(batch, unknown=True), words_of_tokens(vocab, [tokenize(t) for t in batch])
        assert np.array_equal(found.ids, expected.ids) and np.array_equal(found.counts, expected.counts)
        assert found.unknown == expected.unknown
    assert len(featurizer.words(texts, unknown=True).unknown or []) > 100  # the random texts' words it lacks
    assert same_rows(featurizer.featurize([]), vocab.featurize([]))


def diverse_documents(n: int, seed: int) -> list[Document]:
    """Documents over a small mixed vocabulary (ASCII, accented, Greek, CJK, long words) with noise."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(200)] + ["école", "straße", "σίσυφος", "日本語", "x" * 20, "y" * 45, "ﬁne", "İz"]
    # Stored text is UTF-8: no lone surrogates.
    noise = ["".join(c for c in t if not 0xD800 <= ord(c) < 0xE000) for t in random_texts(n, seed=seed + 1)]
    docs = []
    for i in range(n):
        body = " ".join(words[int(j)] for j in rng.integers(0, len(words), int(rng.integers(1, 30))))
        docs.append(Document(id=f"d{i}", title=f"Title {i % 7}" if i % 3 else "", text=f"{body} {noise[i]}".strip()))
    return docs


@pytest.mark.parametrize("form", ["lowrank", "halftrans", "cfh"])
def test_a_build_from_the_store_holds_the_reference_rows_and_vectors(tmp_path: Path, form: str) -> None:
    """`open_state` over a store (several batches) equals featurizing with the vocabulary and embedding, row by row.

    halftrans embeds by document id; cfh (a hashing vocabulary) is featurized by the vocabulary itself.
    """
    docs = diverse_documents(240, seed=11)
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    bundle_dir = make_bundle(tmp_path / "bundle", docs, form=form)
    settings = Settings(bundle=bundle_dir, corpus=corpus, cache_dir=tmp_path / "cache", embed_batch=37)
    store = DocumentStore.open_for_corpus(settings.store_dir, "documents", corpus)
    try:
        bundle = load_bundle(bundle_dir)
        state = open_state(collection="documents", bundle=bundle, store=store, settings=settings)
        assert BulkFeaturizer(bundle.vocab).uses_arrays == (form != "cfh")
    finally:
        store.close()
    assert state.report.source == "computed"
    assert state.table.doc_ids == [d.id for d in docs]
    reference = bundle.vocab.featurize([d.full_text for d in docs])
    built = state.lexical.matrix().tocsr()
    built.sort_indices()
    assert same_rows(built, reference)
    expected = Embedder(bundle, 1).embed_documents(reference, [d.id for d in docs])
    assert state.index.all_vectors().tobytes() == expected.tobytes()


def test_a_build_in_worker_processes_equals_the_one_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSI_BUILD_WORKERS: the same rows, vectors and ids in the same order, whatever the workers' timing."""
    docs = diverse_documents(300, seed=13)
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    bundle_dir = make_bundle(tmp_path / "bundle", docs, stemmer="english")  # as `ssi train` makes: stems pickle
    bundle = load_bundle(bundle_dir)
    monkeypatch.setattr(featurize_pool, "POOL_MIN_DOCUMENTS", 0)  # a pool even for 300 documents
    states = {}
    for workers in (0, 1, 3):
        settings = Settings(
            bundle=bundle_dir,
            corpus=corpus,
            cache_dir=tmp_path / f"cache{workers}",
            embed_batch=16,
            build_workers=workers,
        )
        assert featurize_pool.pool_workers(settings.build_workers, len(docs)) == workers
        store = DocumentStore.open_for_corpus(settings.store_dir, "documents", corpus)
        try:
            states[workers] = open_state(collection="documents", bundle=bundle, store=store, settings=settings)
        finally:
            store.close()
    serial = states[0]
    for workers in (1, 3):
        state = states[workers]
        assert state.table.doc_ids == serial.table.doc_ids == [d.id for d in docs]
        assert same_rows(state.lexical.matrix().tocsr(), serial.lexical.matrix().tocsr())
        assert state.index.all_vectors().tobytes() == serial.index.all_vectors().tobytes()


def test_a_small_collection_starts_no_pool() -> None:
    assert featurize_pool.pool_workers(2, featurize_pool.POOL_MIN_DOCUMENTS - 1) == 0
    assert featurize_pool.pool_workers(0, 10**6) == 0
    assert featurize_pool.pool_workers(2, featurize_pool.POOL_MIN_DOCUMENTS) == 2


def test_a_worker_error_reaches_the_build() -> None:
    """A batch a worker cannot featurize fails the build with its error instead of hanging or losing rows."""
    featurizer = BulkFeaturizer(vocabulary_of_edges())
    batches = [["fine text"], ["more text"], None]  # None is no list of texts: the worker raises
    with pytest.raises(TypeError):
        list(featurize_pool.featurized(featurizer, batches, lambda b: b, workers=2))  # type: ignore[arg-type,return-value]
