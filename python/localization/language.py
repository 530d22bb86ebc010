"""Learning a temporal kernel from text: the paper's experiment 5 on *Oliver Twist*.

The next word is predicted by a **local mode**: a kernel-weighted vote of what followed the
earlier words,

    p(x_{t+1} | x_{≤t}) = softmax( U · Σ_{s≤t} K̃(x_t, t, x_s, s) v(x_{s+1}) + b ),

K(x_t, t, x_s, s) = exp(φ(x_t)·ψ(x_s)/√r) · exp(−λ|t − s|). φ, ψ (query and key tables) and v
(value table) are learned **discrete kernels** of low rank over the vocabulary, λ ≥ 0 a learned
relative position kernel per head; U·v is the low-rank kernel between the word voted for and the
word that did the voting (with one-hot values U·v = I, this is the plain local mode over the
vocabulary). It is one layer of causal attention whose key at step s is the word *before* the
value's word, i.e. a head that "looks up where the current word occurred before and votes for
what came next". All parameters are trained by Adam on the gradients of the native attention
backward pass (no T×T matrix anywhere).

Baselines, all on the same vocabulary and the same held-out words: a unigram model, an
interpolated (Jelinek–Mercer) bigram model, and a one-layer :class:`HierarchicalLocalModel`
language model (embedding → a Transformer block with the same causal decaying position kernel →
layer normalisation → softmax) trained the same way.

Entry point: :func:`oliver_twist_experiment`; figures: :func:`plot_query_key`,
:func:`plot_attention_graph`. The command ``localization attention`` runs it end to end.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from sklearn.utils import check_random_state

from ._optim import Adam
from ._progress import Progress
from ._validation import check_positive_int, LocalizationError
from .sequence import attention, attention_backward, block_backward, block_forward, init_block, layer_norm, layer_norm_backward, rowwise

UNK = "<unk>"
_TOKEN = re.compile(r"[a-z]+(?:['’][a-z]+)*|[.,;:!?]")


def tokenize(text):
    """Lower-cased words (with inner apostrophes) and the punctuation marks . , ; : ! ?

    Text before the first line ``CHAPTER I.`` (the title page and table of contents of the
    Gutenberg edition) is skipped when such a line exists.

    Examples
    --------
    >>> from localization.language import tokenize
    >>> tokenize("Please, sir, I want some more.")
    ['please', ',', 'sir', ',', 'i', 'want', 'some', 'more', '.']
    """
    start = re.search(r"^CHAPTER I\.\s*$", text, flags=re.M)
    body = text[start.start():] if start else text
    return _TOKEN.findall(body.lower())


@dataclass
class Vocabulary:
    """The most frequent words of a corpus; every other word maps to ``<unk>`` (id 0)."""

    words: list

    @classmethod
    def build(cls, tokens, max_size):
        counts = {}
        for w in tokens:
            counts[w] = counts.get(w, 0) + 1
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        return cls([UNK] + ranked[: max_size - 1])

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self):
        return len(self.words)

    def encode(self, tokens):
        return np.array([self.index.get(w, 0) for w in tokens], dtype=np.int64)

    def decode(self, ids):
        return [self.words[i] for i in ids]


# ---------------------------------------------------------------------------------------------
# n-gram baselines


class UnigramModel:
    """p(w) = (c(w) + 1) / (N + V) (add-one smoothing)."""

    def fit(self, ids, vocab_size):
        c = np.bincount(ids, minlength=vocab_size).astype(np.float64)
        self.log_p_ = np.log((c + 1.0) / (c.sum() + vocab_size))
        return self

    def nll(self, context, targets):
        return -self.log_p_[targets]


class BigramModel:
    """Interpolated bigram p(w | v) = λ c(v, w)/c(v) + (1 − λ) p_unigram(w), λ tuned on held-out text."""

    def fit(self, ids, vocab_size, valid_ids, lambdas=np.linspace(0.05, 0.95, 19)):
        V = vocab_size
        self.unigram_ = UnigramModel().fit(ids, V)
        self.pairs_ = sparse.csr_matrix((np.ones(len(ids) - 1), (ids[:-1], ids[1:])), shape=(V, V))
        self.pairs_.sum_duplicates()
        self.context_counts_ = np.asarray(self.pairs_.sum(axis=1)).ravel()
        scores = [float(np.mean(self._nll(valid_ids[:-1], valid_ids[1:], lam))) for lam in lambdas]
        self.lambda_ = float(lambdas[int(np.argmin(scores))])
        return self

    def _nll(self, prev, nxt, lam):
        c = np.asarray(self.pairs_[prev, nxt]).ravel()
        n = self.context_counts_[prev]
        with np.errstate(invalid="ignore", divide="ignore"):
            ml = np.where(n > 0, c / n, 0.0)
        lam_eff = np.where(n > 0, lam, 0.0)
        return -np.log(lam_eff * ml + (1 - lam_eff) * np.exp(self.unigram_.log_p_[nxt]))

    def nll(self, context, targets):
        return self._nll(context, targets, self.lambda_)


# ---------------------------------------------------------------------------------------------
# windows of text for the attention models


def windows(ids, context):
    """Consecutive windows of ``context + 2`` ids (stride ``context``) covering targets ids[2:].

    Window w holds the word before the first step (the first key's word), ``context`` steps
    and the word after the last step; the last, shorter window is returned apart.
    """
    n_targets = len(ids) - 2
    full = n_targets // context
    W = np.lib.stride_tricks.sliding_window_view(ids, context + 2)[: full * context : context] if full else np.zeros((0, context + 2), np.int64)
    rest = ids[full * context :]
    return np.ascontiguousarray(W), (rest if len(rest) >= 3 else None)


def _softplus(x):
    return np.logaddexp(0.0, x)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _cross_entropy(logits, targets, grad=True):
    """Mean negative log-likelihood of integer targets under softmax(logits), and its gradient."""
    z = logits - logits.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1, keepdims=True))
    logp = z - lse
    flat = logp.reshape(-1, logp.shape[-1])
    t = targets.reshape(-1)
    nll = -flat[np.arange(len(t)), t]
    if not grad:
        return nll, None
    g = np.exp(flat)
    g[np.arange(len(t)), t] -= 1.0
    return nll, (g / len(t)).reshape(logits.shape).astype(logits.dtype)


def _scatter_rows(ids, grads, n_rows):
    """Σ of the rows of `grads` (N × k) that share an id: the gradient of an embedding lookup."""
    onehot = sparse.csr_matrix((np.ones(len(ids), dtype=grads.dtype), (ids, np.arange(len(ids)))), shape=(n_rows, len(ids)))
    return np.asarray(onehot @ grads)


class QKVLanguageModel:
    """The local-mode language model of experiment 5 (see the module docstring).

    Parameters: per head h, query and key tables φ_h, ψ_h (vocab × rank), a value table v_h
    (vocab × value_rank) and a decay λ_h = softplus(ρ_h); the output map U (vocab × heads·value_rank)
    and bias b.
    """

    def __init__(self, vocab_size, n_heads=4, rank=16, value_rank=16, random_state=0, dtype=np.float32, n_jobs=None):
        rng = check_random_state(random_state)
        V, H = vocab_size, n_heads
        self.n_heads, self.rank, self.n_jobs = H, rank, n_jobs
        slopes = 2.0 ** (-np.arange(1, H + 1) * 8.0 / H)  # ALiBi's initial slopes
        self.params = {
            "phi": rng.normal(scale=1.0, size=(H, V, rank)).astype(dtype),
            "psi": rng.normal(scale=1.0, size=(H, V, rank)).astype(dtype),
            "value": rng.normal(scale=1.0, size=(H, V, value_rank)).astype(dtype),
            "U": rng.normal(scale=1.0 / math.sqrt(H * value_rank), size=(V, H * value_rank)).astype(dtype),
            "b": np.zeros(V, dtype=dtype),
            "rho": np.log(np.expm1(slopes)).astype(np.float64),
        }

    def decay(self):
        return _softplus(self.params["rho"])

    def _qkv(self, win):
        p = self.params
        prev, cur = win[:, :-2], win[:, 1:-1]
        # (heads, B, T, k) → (B, heads, T, k)
        Q = np.ascontiguousarray(p["phi"][:, cur].transpose(1, 0, 2, 3))
        K = np.ascontiguousarray(p["psi"][:, prev].transpose(1, 0, 2, 3))
        Vv = np.ascontiguousarray(p["value"][:, cur].transpose(1, 0, 2, 3))
        return Q, K, Vv

    def loss(self, win, grad=True):
        """Mean next-word NLL over the windows (B × (T+2) ids) and, with ``grad``, its gradients."""
        p = self.params
        Q, K, Vv = self._qkv(win)
        scale = 1.0 / math.sqrt(self.rank)
        lam = self.decay()
        out, lse = attention(Q, K, Vv, mask="causal", decay=lam, scale=scale, return_lse=True, n_jobs=self.n_jobs)
        B, H, T, kv = out.shape
        M = out.transpose(0, 2, 1, 3).reshape(B, T, H * kv)
        logits = rowwise(M, p["U"].T) + p["b"]
        nll, dlogits = _cross_entropy(logits, win[:, 2:], grad)
        if not grad:
            return nll
        g = {"U": dlogits.reshape(-1, dlogits.shape[-1]).T @ M.reshape(-1, H * kv), "b": dlogits.sum((0, 1))}
        dM = rowwise(dlogits, p["U"]).reshape(B, T, H, kv).transpose(0, 2, 1, 3)
        gr = attention_backward(np.ascontiguousarray(dM), Q, K, Vv, out, lse, mask="causal", decay=lam, scale=scale, n_jobs=self.n_jobs)
        g["rho"] = gr.d_decay * _sigmoid(p["rho"])
        V = p["phi"].shape[1]
        prev, cur = win[:, :-2].reshape(-1), win[:, 1:-1].reshape(-1)
        for name, ids, d in (("phi", cur, gr.dQ), ("psi", prev, gr.dK), ("value", cur, gr.dV)):
            flat = d.transpose(1, 0, 2, 3).reshape(H, -1, d.shape[-1])  # (heads, B·T, k)
            g[name] = np.stack([_scatter_rows(ids, flat[h], V) for h in range(H)])
        return float(nll.mean()), g

    def attention_weights(self, ids):
        """Per-head normalised kernel K̃(t, s) over a short id sequence (heads × T × T), for plots.

        Step t ≥ 1 predicts ids[t + 1]; its key at s is ids[s − 1] and its value ids[s].
        """
        p = self.params
        ids = np.asarray(ids)
        prev, cur = ids[:-1], ids[1:]
        T = len(cur)
        S = np.einsum("htk,hsk->hts", p["phi"][:, cur], p["psi"][:, prev]) / math.sqrt(self.rank)
        dist = np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
        S = S - self.decay()[:, None, None] * dist
        S = np.where(np.tril(np.ones((T, T), bool)), S, -np.inf)
        W = np.exp(S - S.max(-1, keepdims=True))
        return W / W.sum(-1, keepdims=True)


class TransformerLanguageModel:
    """A one-block (or deeper) :class:`HierarchicalLocalModel` language model: embedding E,
    Transformer blocks (pre-norm, causal decaying position kernel per head), final layer
    normalisation, output map U and bias b. Block weights use torch's names, so
    ``HierarchicalLocalModel(weights=model.encoder_weights(), ...)`` reproduces its blocks."""

    def __init__(self, vocab_size, d_model=64, n_heads=4, d_ff=256, n_layers=1, activation="gelu", random_state=0,
                 dtype=np.float32, n_jobs=None):
        rng = check_random_state(random_state)
        V, D, H = vocab_size, d_model, n_heads
        self.n_heads, self.n_layers, self.activation, self.n_jobs = H, n_layers, activation, n_jobs
        slopes = 2.0 ** (-np.arange(1, H + 1) * 8.0 / H)
        self.params = {"E": rng.normal(scale=1.0, size=(V, D)).astype(dtype)}
        for i in range(n_layers):
            for k, v in init_block(D, H, d_ff, rng, dtype).items():
                self.params[f"layers.{i}.{k}"] = v
            self.params[f"layers.{i}.rho"] = np.log(np.expm1(slopes)).astype(np.float64)
        self.params.update({
            "norm.weight": np.ones(D, dtype=dtype),
            "norm.bias": np.zeros(D, dtype=dtype),
            "U": rng.normal(scale=1.0 / math.sqrt(D), size=(V, D)).astype(dtype),
            "b": np.zeros(V, dtype=dtype),
        })

    def _cfg(self, i):
        decay = _softplus(self.params[f"layers.{i}.rho"])
        return dict(n_heads=self.n_heads, eps=1e-5, activation=self.activation, norm_first=True,
                    pos=dict(causal=True, decay=decay), n_jobs=self.n_jobs)

    def _layer(self, i):
        pre = f"layers.{i}."
        return {k[len(pre):]: v for k, v in self.params.items() if k.startswith(pre) and not k.endswith("rho")}

    def encoder_weights(self):
        """The blocks and final norm under ``torch.nn.TransformerEncoder`` names."""
        return {k: v for k, v in self.params.items() if k.startswith(("layers.", "norm.")) and not k.endswith("rho")}

    def decays(self):
        """Per layer, the heads' decays λ."""
        return [_softplus(self.params[f"layers.{i}.rho"]) for i in range(self.n_layers)]

    def loss(self, win, grad=True):
        p = self.params
        cur = win[:, 1:-1]
        x = p["E"][cur]
        caches = []
        for i in range(self.n_layers):
            x, c = block_forward(x, self._layer(i), self._cfg(i), cache=True)
            caches.append(c)
        z, nc = layer_norm(x, p["norm.weight"], p["norm.bias"], 1e-5)
        logits = rowwise(z, p["U"].T) + p["b"]
        nll, dlogits = _cross_entropy(logits, win[:, 2:], grad)
        if not grad:
            return nll
        D = z.shape[-1]
        g = {"U": dlogits.reshape(-1, dlogits.shape[-1]).T @ z.reshape(-1, D), "b": dlogits.sum((0, 1))}
        dx, g["norm.weight"], g["norm.bias"] = layer_norm_backward(rowwise(dlogits, p["U"]), p["norm.weight"], nc)
        for i in reversed(range(self.n_layers)):
            dx, gw, dl = block_backward(dx, self._layer(i), self._cfg(i), caches[i])
            g.update({f"layers.{i}.{k}": v for k, v in gw.items()})
            g[f"layers.{i}.rho"] = dl * _sigmoid(p[f"layers.{i}.rho"])
        g["E"] = _scatter_rows(cur.reshape(-1), dx.reshape(-1, D), p["E"].shape[0])
        return float(nll.mean()), g


def _heldout_nll(model, ids, context):
    """NLL of every target ids[2:] under an attention model, window by window."""
    W, rest = windows(ids, context)
    parts = [model.loss(W[i : i + 64], grad=False) for i in range(0, len(W), 64)]
    if rest is not None:
        parts.append(model.loss(rest[None], grad=False))
    return np.concatenate([np.ravel(p) for p in parts])


def train_language_model(model, train_ids, valid_ids, *, context=128, epochs=10, batch_size=32, learning_rate=0.01,
                         weight_decay=0.0, random_state=0, progress=False, desc="training"):
    """Adam on the windows of ``train_ids``; keeps the parameters with the best validation NLL.

    The step size follows a cosine from ``learning_rate`` down to 5% of it over the run;
    ``weight_decay`` is AdamW's decoupled decay of the matrices and tables (not of biases,
    norms or decays). Returns a history dict (train loss per step, validation perplexity per
    epoch, seconds).
    """
    rng = check_random_state(random_state)
    W, _ = windows(train_ids, context)
    if len(W) == 0:
        raise LocalizationError(f"the training text has {len(train_ids)} words, fewer than one window of {context + 2}", "train_ids")
    tables = [k for k, v in model.params.items() if v.ndim >= 2]
    opt = Adam(model.params, learning_rate, weight_decay=weight_decay, decay=tables)
    steps_per_epoch = math.ceil(len(W) / batch_size)
    total = epochs * steps_per_epoch
    bar = Progress(progress, desc, unit="step", total=total)
    history = {"train_loss": [], "valid_perplexity": [], "seconds": 0.0}
    best, best_params = np.inf, None
    t0 = time.perf_counter()
    try:
        for _ in range(epochs):
            order = rng.permutation(len(W))
            for s in range(steps_per_epoch):
                loss, grads = model.loss(W[order[s * batch_size : (s + 1) * batch_size]])
                lr = learning_rate * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * opt.t / total)))
                opt.step(model.params, grads, lr)
                history["train_loss"].append(loss)
                bar.update(1, loss=f"{loss:.3f}")
            ppl = float(np.exp(_heldout_nll(model, valid_ids, context).mean()))
            history["valid_perplexity"].append(ppl)
            if ppl < best:
                best, best_params = ppl, {k: v.copy() for k, v in model.params.items()}
    finally:
        bar.close()
    model.params = best_params
    history["seconds"] = time.perf_counter() - t0
    return history


@dataclass
class ExperimentResult:
    """What :func:`oliver_twist_experiment` found (perplexities on the held-out test words)."""

    perplexity: dict
    vocabulary: Vocabulary
    splits: dict
    models: dict
    histories: dict = field(default_factory=dict)
    source: str = ""

    def summary(self):
        n = {k: len(v) for k, v in self.splits.items()}
        lines = [f"Oliver Twist ({self.source}): {sum(n.values()):,} words, vocabulary {len(self.vocabulary):,} "
                 f"(train {n['train']:,} / valid {n['valid']:,} / test {n['test']:,}); held-out perplexity:"]
        width = max(map(len, self.perplexity))
        for name, ppl in self.perplexity.items():
            secs = self.histories.get(name, {}).get("seconds")
            lines.append(f"  {name:<{width}} {ppl:8.1f}" + (f"   (trained in {secs:.0f} s)" if secs else ""))
        return "\n".join(lines)


def oliver_twist_experiment(
    path=None, *, vocab_size=2000, context=128, n_heads=4, rank=16, value_rank=16, d_model=64, epochs=6,
    batch_size=32, learning_rate=0.01, max_words=None, random_state=0, progress=False, n_jobs=None,
):
    """Experiment 5: learn query/key/value kernels and a position kernel from *Oliver Twist*.

    Reads the novel (``path``, ``LOCALIZATION_DATA``, or the copy shipped with the package),
    splits its words 80/10/10 into contiguous train/validation/test parts, and reports the test
    perplexity of: a unigram model, an interpolated bigram model, the local-mode model
    :class:`QKVLanguageModel` and a one-layer :class:`TransformerLanguageModel`, both trained by
    Adam on the native attention gradients with the same windows, epochs and step size.

    Parameters
    ----------
    path : str, optional
        ``oliver_twist.txt`` or its folder.
    vocab_size : int, default=2000
        Most frequent training words kept (the rest map to ``<unk>``, a word like any other).
    context : int, default=128
        Words per training window (the attention span).
    n_heads, rank, value_rank : int
        Heads of the local-mode model, rank of its query/key tables and of its value table.
    d_model : int, default=64
        Width of the Transformer language model (4 heads, MLP 4·d_model).
    epochs, batch_size, learning_rate
        Adam's schedule (the same for both trained models).
    max_words : int, optional
        Use only the first ``max_words`` words (for quick runs).
    random_state : int
    progress : bool, default=False
        Progress bars.
    n_jobs : int, optional
        Threads of the attention calls.

    Returns
    -------
    ExperimentResult
    """
    from .datasets import load_oliver_twist

    for name, v in (("vocab_size", vocab_size), ("context", context), ("epochs", epochs), ("batch_size", batch_size)):
        check_positive_int(v, name, minimum=2 if name == "vocab_size" else 1)
    text = load_oliver_twist(path)
    tokens = tokenize(text)
    if max_words is not None:
        tokens = tokens[: check_positive_int(max_words, "max_words", minimum=100)]
    n = len(tokens)
    a, b = int(0.8 * n), int(0.9 * n)
    vocab = Vocabulary.build(tokens[:a], vocab_size)
    ids = vocab.encode(tokens)
    splits = {"train": ids[:a], "valid": ids[a:b], "test": ids[b:]}
    test = splits["test"]
    V = len(vocab)
    ppl, models, histories = {}, {}, {}
    uni = UnigramModel().fit(splits["train"], V)
    ppl["unigram"] = float(np.exp(uni.nll(None, test[2:]).mean()))
    bi = BigramModel().fit(splits["train"], V, splits["valid"])
    ppl[f"interpolated bigram (λ = {bi.lambda_:.2f})"] = float(np.exp(bi.nll(test[1:-1], test[2:]).mean()))
    models.update(unigram=uni, bigram=bi)
    common = dict(context=context, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                  random_state=random_state, progress=progress)
    qkv = QKVLanguageModel(V, n_heads=n_heads, rank=rank, value_rank=value_rank, random_state=random_state, n_jobs=n_jobs)
    qkv.params["b"][:] = uni.log_p_  # start from the unigram model
    name = f"local mode, learned QKV kernels ({n_heads} heads, rank {rank})"
    histories[name] = train_language_model(qkv, splits["train"], splits["valid"], desc="QKV local mode", **common)
    ppl[name] = float(np.exp(_heldout_nll(qkv, test, context).mean()))
    models["qkv"] = qkv
    tlm = TransformerLanguageModel(V, d_model=d_model, n_heads=4, d_ff=4 * d_model, random_state=random_state, n_jobs=n_jobs)
    tlm.params["b"][:] = uni.log_p_
    name = f"1-layer HierarchicalLocalModel (d = {d_model})"
    histories[name] = train_language_model(tlm, splits["train"], splits["valid"], desc="hierarchical model", **common)
    ppl[name] = float(np.exp(_heldout_nll(tlm, test, context).mean()))
    models["transformer"] = tlm
    source = "shipped copy" if path is None else str(path)
    return ExperimentResult(ppl, vocab, splits, models, histories, source)


# ---------------------------------------------------------------------------------------------
# figures


def query_key_coordinates(model, vocab, n_words=40, head=0):
    """2-D query and key coordinates of the most frequent words under one head's learned kernel.

    The head's log-kernel between the words is the bilinear form φψᵀ/√r (rank r); its best
    rank-2 approximation u₁s₁v₁ᵀ + u₂s₂v₂ᵀ over the ``n_words`` most frequent words gives
    query coordinates (u√s) and key coordinates (v√s) whose dot products approximate it.
    Returns (words, query coordinates n × 2, key coordinates n × 2, share of the form kept).
    """
    ids = np.arange(1, min(n_words + 1, len(vocab)))  # skip <unk>
    phi, psi = model.params["phi"][head, ids].astype(np.float64), model.params["psi"][head, ids].astype(np.float64)
    A = phi @ psi.T / math.sqrt(model.rank)
    u, s, vt = np.linalg.svd(A)
    q, k = u[:, :2] * np.sqrt(s[:2]), vt[:2].T * np.sqrt(s[:2])
    return vocab.decode(ids), q, k, float(np.sum(s[:2] ** 2) / np.sum(s**2))


def plot_query_key(model, vocab, n_words=40, head=0, ax=None):
    """Scatter the learned 2-D query and key coordinates of the most frequent words (see
    :func:`query_key_coordinates`); a query and a key point in the same direction when the
    head's kernel between the two words is large."""
    import matplotlib.pyplot as plt

    words, q, k, kept = query_key_coordinates(model, vocab, n_words, head)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 7))
    ax.scatter(q[:, 0], q[:, 1], c="tab:blue", s=18, label="query φ(word)")
    ax.scatter(k[:, 0], k[:, 1], c="tab:red", s=18, marker="^", label="key ψ(word)")
    for w, (x, y) in zip(words, q):
        ax.annotate(w, (x, y), fontsize=7, color="tab:blue", xytext=(2, 2), textcoords="offset points")
    for w, (x, y) in zip(words, k):
        ax.annotate(w, (x, y), fontsize=7, color="tab:red", xytext=(2, -7), textcoords="offset points")
    ax.axhline(0, c="0.8", lw=0.5)
    ax.axvline(0, c="0.8", lw=0.5)
    ax.set_xlabel("coordinate 1 (top singular pair of φψᵀ)")
    ax.set_ylabel("coordinate 2")
    ax.set_title(f"Learned query and key coordinates, head {head} ({kept:.0%} of the kernel's energy)")
    ax.legend(loc="best")
    return ax


def plot_attention_graph(model, vocab, words, head=None, threshold=0.05, ax=None):
    """The attention graph of one sentence: words as nodes, an edge s → t weighted by the
    normalised learned kernel K̃(t, s) (mean over heads, or one ``head``); edges below
    ``threshold`` are not drawn.

    ``words`` is a list of tokens; the first is context only (the key of step 1).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    ids = vocab.encode(words)
    W = model.attention_weights(ids)
    W = W.mean(0) if head is None else W[head]
    shown = words[1:]
    T = len(shown)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(8, 0.7 * T), 4.5))
    xs = np.arange(T, dtype=float)
    for t in range(T):
        for s in range(t + 1):
            w = W[t, s]
            if w < threshold:
                continue
            if s == t:
                ax.scatter([xs[t]], [0.0], s=900 * w, facecolors="none", edgecolors="tab:purple", alpha=min(1, 0.3 + w), zorder=1)
                continue
            arc = FancyArrowPatch((xs[s], 0.0), (xs[t], 0.0), connectionstyle=f"arc3,rad={-0.5}", arrowstyle="-|>",
                                  mutation_scale=8, lw=0.5 + 4 * w, color="tab:purple", alpha=min(1, 0.2 + w))
            ax.add_patch(arc)
    ax.scatter(xs, np.zeros(T), s=30, c="k", zorder=2)
    for x, word in zip(xs, shown):
        ax.text(x, -0.12, word, rotation=45, ha="right", va="top", fontsize=9)
    ax.plot([], [], c="tab:purple", lw=3, label="K̃(t, s): arrow s → t (width ∝ weight)")
    ax.scatter([], [], s=200, facecolors="none", edgecolors="tab:purple", label="weight on the step itself")
    ax.set_xlim(-1, T)
    ax.set_ylim(-1.0, 0.5 * T / 2 + 0.5)
    ax.set_xlabel("word position t (each word predicts the next)")
    ax.set_ylabel("arc height ∝ distance t − s")
    ax.set_yticks([])
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("Attention graph of one sentence" + ("" if head is None else f" (head {head})") + " under the learned kernel")
    return ax


def plot_training(result, ax=None):
    """Validation perplexity per epoch of the trained models, with the n-gram baselines."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    for name, h in result.histories.items():
        ax.plot(np.arange(1, len(h["valid_perplexity"]) + 1), h["valid_perplexity"], marker="o", label=name)
    for name, ppl in result.perplexity.items():
        if name not in result.histories:
            ax.axhline(ppl, ls="--", lw=1, c="0.5" if name == "unigram" else "0.2", label=f"{name} (test)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation perplexity")
    ax.set_yscale("log")
    ax.set_title("Learning the kernels on Oliver Twist")
    ax.legend(fontsize=8)
    return ax


def sentence_from(tokens, min_len=10, max_len=18, start=0):
    """The first sentence (ending in . ! or ?) of `tokens` from `start` with min_len..max_len words."""
    i = start
    while i < len(tokens):
        j = i
        while j < len(tokens) and tokens[j] not in (".", "!", "?"):
            j += 1
        if min_len <= j + 1 - i <= max_len:
            return tokens[max(i - 1, 0) : j + 1]
        i = j + 1
    return tokens[start : start + max_len]
