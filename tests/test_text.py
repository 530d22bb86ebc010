"""Tokenizer and co-occurrence matrices: naive counting, PPMI, the novel, bad input."""

import numpy as np
import pytest

from localization.datasets import load_oliver_twist
from localization.text import cooccurrence, tokenize


def test_tokenizer_keeps_words_and_drops_punctuation():
    text = "“Please, sir,” replied Oliver; “I want some more.” Don’t—parish-boy_1837! Café"
    assert tokenize(text) == ["please", "sir", "replied", "oliver", "i", "want", "some", "more", "don't", "parish", "boy", "café"]
    assert tokenize("") == []
    with pytest.raises(TypeError, match="text"):
        tokenize(["a list"])


def naive(tokens, vocab, window, directed):
    idx = {w: i for i, w in enumerate(vocab)}
    C = np.zeros((len(vocab), len(vocab)))
    for t, a in enumerate(tokens):
        for o in range(1, window + 1):
            if t + o < len(tokens) and a in idx and tokens[t + o] in idx:
                C[idx[a], idx[tokens[t + o]]] += 1
                if not directed:
                    C[idx[tokens[t + o]], idx[a]] += 1
    return C


@pytest.mark.parametrize("window,directed", [(1, True), (3, True), (5, False), (40, True)])
def test_cooccurrence_counts_pairs_in_the_window(window, directed):
    rng = np.random.default_rng(window)
    words = [f"w{i}" for i in range(12)]
    tokens = list(rng.choice(words, size=300, p=np.arange(12, 0, -1) / 78))
    C, vocab = cooccurrence(tokens, window=window, directed=directed, min_count=2)
    counts = {w: tokens.count(w) for w in set(tokens)}
    assert vocab == sorted([w for w in counts if counts[w] >= 2], key=lambda w: (-counts[w], w))
    np.testing.assert_array_equal(C.toarray(), naive(tokens, vocab, window, directed))
    C5, v5 = cooccurrence(tokens, window=window, directed=directed, max_vocab=5)
    assert v5 == vocab[:5]
    np.testing.assert_array_equal(C5.toarray(), naive(tokens, v5, window, directed))


def test_ppmi_definition():
    tokens = tokenize("the cat sat on the mat and the dog sat on the log " * 3)
    C, vocab = cooccurrence(tokens, window=2)
    P, v2 = cooccurrence(tokens, window=2, weighting="ppmi")
    assert v2 == vocab
    D = C.toarray()
    with np.errstate(divide="ignore"):
        pmi = np.log(D * D.sum() / np.outer(D.sum(1), D.sum(0)))
    np.testing.assert_allclose(P.toarray(), np.where(D > 0, np.maximum(pmi, 0), 0), atol=1e-12)


def test_oliver_twist_cooccurrence():
    tokens = tokenize(load_oliver_twist())
    assert len(tokens) > 150_000 and "oliver" in tokens and "fagin" in tokens
    C, vocab = cooccurrence(tokens, window=2, max_vocab=500)
    assert C.shape == (500, 500) and vocab[0] == "the" and "oliver" in vocab
    assert C.nnz > 30_000 and C.sum() > 100_000
    # directed: "of the" is far more frequent than "the of"
    B, vocab = cooccurrence(tokens, window=1, max_vocab=500)
    assert B[vocab.index("of"), vocab.index("the")] > 10 * B[vocab.index("the"), vocab.index("of")]


def test_cooccurrence_bad_input():
    with pytest.raises(ValueError, match="empty"):
        cooccurrence("")
    with pytest.raises(ValueError, match="empty"):
        cooccurrence("... !!! 123")
    with pytest.raises(ValueError, match="window"):
        cooccurrence("a b c", window=0)
    with pytest.raises(ValueError, match="weighting"):
        cooccurrence("a b c", weighting="tfidf")
    with pytest.raises(ValueError, match="min_count"):
        cooccurrence("a b c", min_count=5)
    with pytest.raises(TypeError, match="tokens"):
        cooccurrence([1, 2, 3])
    with pytest.raises(ValueError, match="vocabulary"):
        cooccurrence("a b", vocabulary=["a", "a"])
