"""Text helpers: a plain-text tokenizer and word co-occurrence matrices.

A co-occurrence matrix is a discrete localization kernel over a vocabulary: K(a, b) counts
how often word b occurs within a window after (``directed=True``) or around word a. Its
rows, normalised, are the local distributions that :class:`localization.AsymmetricMDS`
fits with a query point and a key point per word.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from ._validation import check_positive_int, LocalizationError, LocalizationTypeError

__all__ = ["cooccurrence", "tokenize"]

# Letters (any script), optionally joined by apostrophes inside the word: "don't", "oliver's".
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


def tokenize(text: str) -> list[str]:
    """Split plain text into lower-case words.

    A word is a maximal run of letters (any alphabet), possibly joined by apostrophes inside
    it (``"don't"``, ``"oliver's"``; typographic apostrophes ’ and ‘ count as '). Everything
    else — punctuation, digits, underscores, whitespace, dashes — separates words and is
    dropped, so ``"parish-boy"`` gives ``["parish", "boy"]``.

    Examples
    --------
    >>> from localization.text import tokenize
    >>> tokenize("“Please, sir, I want some more.” Oliver’s 2nd bowl—empty!")
    ['please', 'sir', 'i', 'want', 'some', 'more', "oliver's", 'nd', 'bowl', 'empty']
    """
    if not isinstance(text, str):
        raise LocalizationTypeError(f"`text` must be a string, got {type(text).__name__}", "text")
    return _WORD.findall(text.lower().replace("\u2019", "'").replace("\u2018", "'"))


def _strings(seq, name):
    """``seq`` as a list, or a LocalizationTypeError naming ``name`` if it is not a sequence."""
    if isinstance(seq, (str, bytes)) or not isinstance(seq, Iterable):
        raise LocalizationTypeError(f"`{name}` must be a sequence of strings, got {type(seq).__name__}", name)
    return list(seq)


def cooccurrence(tokens: str | Iterable[str], window: int = 5, *, directed: bool = True, weighting: str = "count", min_count: int = 1,
                 max_vocab: int | None = None, vocabulary: Sequence[str] | None = None) -> tuple[sp.csr_matrix, list[str]]:
    """Word co-occurrence matrix of a token sequence, as a sparse matrix and its vocabulary.

    ``C[a, b]`` counts the positions t, t + o (1 ≤ o ≤ ``window``) with word a at t and word b
    at t + o: b follows a within the window. With ``directed=False`` both orders count
    (C + Cᵀ). Tokens outside the vocabulary keep their place in the text (they are not
    removed before windows are taken) but are not counted.

    Parameters
    ----------
    tokens : str or sequence of str
        A text (split with :func:`tokenize`) or its tokens.
    window : int, default=5
    directed : bool, default=True
    weighting : {"count", "ppmi"}, default="count"
        ``"ppmi"``: positive pointwise mutual information ````max(0, log(C_ab · C / (C_a· C_·b)))````
        (C the total, ``C_a·`` and ``C_·b`` the row and column sums), on the counted pairs.
    min_count : int, default=1
        Keep only words occurring at least this often.
    max_vocab : int, optional
        Keep only the most frequent words (ties by alphabetical order).
    vocabulary : sequence of str, optional
        Use exactly these words, in this order (``min_count`` and ``max_vocab`` are ignored).

    Returns
    -------
    C : scipy.sparse.csr_matrix of shape (n_words, n_words), float64
    vocabulary : list of str
        Word of each row and column: by decreasing frequency (ties alphabetical) unless given.

    Examples
    --------
    >>> from localization.text import cooccurrence
    >>> C, vocab = cooccurrence("the cat sat on the mat", window=1)
    >>> vocab
    ['the', 'cat', 'mat', 'on', 'sat']
    >>> int(C[vocab.index("the"), vocab.index("cat")]), int(C[vocab.index("cat"), vocab.index("the")])
    (1, 0)
    """
    if isinstance(tokens, str):
        tokens = tokenize(tokens)
    tokens = _strings(tokens, "tokens")
    if not all(isinstance(t, str) for t in tokens):
        raise LocalizationTypeError("`tokens` must be a string or a sequence of strings", "tokens")
    if len(tokens) == 0:
        raise LocalizationError("`tokens` is empty: the text has no words", "tokens")
    window = check_positive_int(window, "window")
    if weighting not in ("count", "ppmi"):
        raise LocalizationError(f"`weighting` must be 'count' or 'ppmi', got {weighting!r}", "weighting")
    counts = Counter(tokens)
    if vocabulary is not None:
        vocab = _strings(vocabulary, "vocabulary")
        if len(vocab) == 0 or len(set(vocab)) != len(vocab):
            raise LocalizationError("`vocabulary` must be a non-empty sequence of distinct words", "vocabulary")
    else:
        min_count = check_positive_int(min_count, "min_count")
        vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        if max_vocab is not None:
            vocab = vocab[: check_positive_int(max_vocab, "max_vocab")]
        if not vocab:
            raise LocalizationError(f"no word occurs at least min_count={min_count} times", "min_count")
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index.get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))
    n = len(vocab)
    rows, cols = [], []
    for o in range(1, min(window, len(ids) - 1) + 1):
        a, b = ids[:-o], ids[o:]
        keep = (a >= 0) & (b >= 0)
        rows.append(a[keep])
        cols.append(b[keep])
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    C = sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(n, n))
    C.sum_duplicates()
    if not directed:
        C = (C + C.T).tocsr()
    if weighting == "ppmi":
        C = _ppmi(C)
    C.sort_indices()
    return C, vocab


def _ppmi(C):
    C = C.tocoo()
    total = C.sum()
    row = np.asarray(C.sum(axis=1)).ravel()
    col = np.asarray(C.sum(axis=0)).ravel()
    pmi = np.log(C.data * total / (row[C.row] * col[C.col]))
    keep = pmi > 0
    return sp.csr_matrix((pmi[keep], (C.row[keep], C.col[keep])), shape=C.shape)
