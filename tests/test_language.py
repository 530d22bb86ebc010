"""Experiment 5: tokens, n-gram baselines, the learned local-mode (QKV) and Transformer language
models (their gradients against finite differences, training), the CLI and the figures."""

import numpy as np
import pytest

from localization import language as L
from localization.cli import main
from localization.sequence import HierarchicalLocalModel


def test_tokenize_skips_the_front_matter_and_keeps_punctuation():
    text = "Oliver Twist\n\nContents\nCHAPTER I. TREATS\n\nCHAPTER I.\n\nAmong other public buildings; ’tis Oliver’s!"
    assert L.tokenize(text) == ["chapter", "i", ".", "among", "other", "public", "buildings", ";", "tis", "oliver’s", "!"]


def test_windows_cover_every_target_once():
    ids = np.arange(1000) % 37
    for context in (7, 64, 998, 2000):
        W, rest = L.windows(ids, context)
        targets = [w[2:] for w in W] + ([rest[2:]] if rest is not None else [])
        np.testing.assert_array_equal(np.concatenate(targets), ids[2:])
        assert W.shape[1:] == (context + 2,) or len(W) == 0


def test_vocabulary_and_ngram_models_are_normalised():
    rng = np.random.default_rng(0)
    tokens = list(rng.choice(list("abcdefghij"), size=3000, p=np.arange(1, 11) / 55))
    vocab = L.Vocabulary.build(tokens, 6)
    assert vocab.words[0] == L.UNK and vocab.words[1] == "j" and len(vocab) == 6
    ids = vocab.encode(tokens)
    assert vocab.decode(ids[:5]) == [w if w in vocab.index else L.UNK for w in tokens[:5]]
    V = len(vocab)
    uni = L.UnigramModel().fit(ids[:2000], V)
    assert np.isclose(np.exp(uni.log_p_).sum(), 1.0)
    bi = L.BigramModel().fit(ids[:2000], V, ids[2000:2500])
    assert 0 < bi.lambda_ < 1
    for v in range(V):  # Σ_w p(w | v) = 1 for every context word
        p = np.exp(-bi.nll(np.full(V, v), np.arange(V)))
        assert np.isclose(p.sum(), 1.0)


def _fd(f, A, idx, eps=1e-6):
    A1, A2 = A.copy(), A.copy()
    A1[idx] += eps
    A2[idx] -= eps
    return (f(A1) - f(A2)) / (2 * eps)


@pytest.mark.parametrize("make", [
    lambda: L.QKVLanguageModel(12, n_heads=2, rank=3, value_rank=2, random_state=0, dtype=np.float64),
    lambda: L.TransformerLanguageModel(12, d_model=8, n_heads=4, d_ff=16, n_layers=2, random_state=0, dtype=np.float64),
], ids=["qkv", "transformer"])
def test_language_model_gradients_equal_finite_differences(make):
    model = make()
    rng = np.random.default_rng(1)
    win = rng.integers(0, 12, size=(3, 11))
    _, g = model.loss(win)
    assert set(g) == set(model.params)
    for name, P in model.params.items():
        for _ in range(3):
            idx = tuple(rng.integers(0, n) for n in P.shape)
            def f(A, name=name):
                old = model.params[name]
                model.params[name] = A
                try:
                    return float(model.loss(win, grad=False).mean())
                finally:
                    model.params[name] = old

            assert abs(g[name][idx] - _fd(f, P, idx)) < 1e-7, name
    absent = np.setdiff1d(np.arange(12), win)
    if len(absent) and "E" in g:
        assert np.all(g["E"][absent] == 0)


def test_transformer_language_model_blocks_are_a_hierarchical_local_model():
    model = L.TransformerLanguageModel(20, d_model=8, n_heads=4, d_ff=16, n_layers=2, random_state=0, dtype=np.float64)
    win = np.random.default_rng(2).integers(0, 20, size=(2, 9))
    x = model.params["E"][win[:, 1:-1]]
    for i, lam in enumerate(model.decays()):
        assert lam.shape == (4,)
    # one decay per layer in the language model; the estimator takes one for all layers, so
    # compare layer by layer
    for i, lam in enumerate(model.decays()):
        w = {f"layers.0.{k}": v for k, v in model._layer(i).items()}
        hlm = HierarchicalLocalModel(weights=w, n_heads=4, norm_first=True, activation="gelu", position="causal", decay=lam).fit()
        from localization.sequence import block_forward

        np.testing.assert_allclose(hlm.transform(x), block_forward(x, model._layer(i), model._cfg(i)), atol=1e-12)
        x = hlm.transform(x)


def test_training_learns_to_copy_where_a_bigram_cannot():
    """Repeated random phrases: the next word is predictable only by finding where the current
    word last occurred — the induction pattern the QKV local mode can learn."""
    rng = np.random.default_rng(3)
    V, phrase = 40, 12
    ids = np.concatenate([rng.permutation(V)[:phrase] for _ in range(1400)])
    ids = np.concatenate([np.concatenate([p, p]) for p in ids.reshape(-1, phrase)])  # each phrase twice in a row
    train, valid = ids[:30000], ids[30000:33000]
    bi = L.BigramModel().fit(train, V, valid)
    bigram_ppl = np.exp(bi.nll(valid[1:-1], valid[2:]).mean())
    model = L.QKVLanguageModel(V, n_heads=2, rank=16, value_rank=V, random_state=0)  # copying needs a full-rank value kernel
    hist = L.train_language_model(model, train, valid, context=48, epochs=3, batch_size=16, learning_rate=0.05, random_state=0)
    ppl = np.exp(L._heldout_nll(model, valid, 48).mean())
    assert hist["train_loss"][-1] < hist["train_loss"][0]
    assert ppl < 0.5 * bigram_ppl, (ppl, bigram_ppl)


def test_figures_have_labels_and_legends(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = L.tokenize("CHAPTER I.\n" + "the boy asked for more . the master was astonished . " * 30)
    vocab = L.Vocabulary.build(tokens, 20)
    model = L.QKVLanguageModel(len(vocab), n_heads=2, rank=4, value_rank=4, random_state=0)
    words, q, k, kept = L.query_key_coordinates(model, vocab, n_words=8)
    assert q.shape == k.shape == (len(words), 2) and 0 < kept <= 1
    for ax in (L.plot_query_key(model, vocab, n_words=8), L.plot_attention_graph(model, vocab, L.sentence_from(tokens, 4, 8))):
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None
        plt.close(ax.figure)


def test_attention_cli_runs_end_to_end_on_built_in_data(tmp_path, capsys):
    out = tmp_path / "attn.png"
    assert main(["attention", "--max-words", "6000", "--epochs", "1", "--vocab-size", "300", "--context", "32",
                 "--output", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "unigram" in text and "bigram" in text and "HierarchicalLocalModel" in text and "QKV" in text
    for suffix in ("query_key", "graph", "training"):
        f = tmp_path / f"attn_{suffix}.png"
        assert f.exists() and f.stat().st_size > 10_000


@pytest.mark.slow
def test_experiment5_learned_models_beat_the_unigram_model():
    r = L.oliver_twist_experiment(max_words=60_000, epochs=4, vocab_size=1000)
    ppl = list(r.perplexity.values())
    uni, bigram, qkv, transformer = ppl
    assert qkv < uni and transformer < uni and bigram < uni
