"""Experiment 4 of the paper: embeddings as localization.

Part 1 — Fashion-MNIST → 2-D with TripletEmbedding (the contrastive hyperkernel) and LLE
(the hollow local kernel), against scikit-learn's LLE, the `trimap` package, and UMAP and
openTSNE where installed: trustworthiness@10, 10-NN accuracy and time, and one scatter plot
per method coloured by class. All 70,000 images when the IDX files are found (``--data`` or
LOCALIZATION_DATA), else the 2,000 shipped ones.

Part 2 — Oliver Twist: asymmetric MDS of the directed co-occurrence of the most frequent
words. Each word gets a query point (what it predicts) and a key point (what predicts it);
the figure joins them by a segment. Held-out check: the last 10 % of the novel, ranking the
true next word w_{t+1} by Z₁(w_t)·Z₂ (mean reciprocal rank), against a symmetric embedding of
the same dimension (truncated SVD of the symmetrised PPMI).

    python examples/embeddings.py [--data DIR] [--n N] [--out DIR] [--no-peers] [--words 500]
"""

import argparse
import os
import time

import numpy as np


def fashion(args):
    from localization.datasets import FASHION_MNIST_CLASSES, load_fashion_mnist

    try:
        X, y = load_fashion_mnist("all", args.n, args.data)
        where = "training + test files"
    except FileNotFoundError:
        X, y = load_fashion_mnist("test", min(args.n or 2000, 2000))
        where = "shipped subset"
    return X, y, FASHION_MNIST_CLASSES, where


def methods(n, peers):
    """(name, function X -> 2-D) for every method that applies at this size."""
    from localization import LocallyLinearEmbedding, TripletEmbedding

    out = [
        ("TripletEmbedding (ours)", lambda X: TripletEmbedding(random_state=0).fit_transform(X)),
        ("LLE k=10 (ours)", lambda X: LocallyLinearEmbedding(n_neighbors=10, random_state=0).fit_transform(X.astype(np.float64))),
    ]
    if not peers:
        return out
    if n <= 20_000:  # scikit-learn factors the n×n matrix (I − W)ᵀ(I − W): minutes beyond that
        from sklearn.manifold import LocallyLinearEmbedding as SkLLE

        out.append(("scikit-learn LLE k=10 (arpack)", lambda X: SkLLE(n_neighbors=10, eigen_solver="arpack", random_state=0).fit_transform(X.astype(np.float64))))
    try:
        import trimap

        out.append((f"trimap {trimap.__version__}", lambda X: trimap.TRIMAP(verbose=False).fit_transform(X.copy())))
    except ImportError:
        pass
    try:
        import umap

        out.append((f"UMAP {umap.__version__}", lambda X: umap.UMAP(random_state=0).fit_transform(X)))
    except ImportError:
        pass
    try:
        import openTSNE

        out.append((f"openTSNE {openTSNE.__version__}", lambda X: np.asarray(openTSNE.TSNE(random_state=0, n_jobs=-1).fit(X))))
    except ImportError:
        pass
    return out


def part1(args):
    from localization.metrics import knn_accuracy, trustworthiness

    X, y, names, where = fashion(args)
    n = len(X)
    print(f"Part 1 — Fashion-MNIST, {n:,} images ({where}), 784 → 2 dimensions")
    sample = 5_000 if n > 20_000 else None
    if sample:
        print(f"  (trustworthiness over {sample:,} random points: the exact sum over all is O(n²) distance work)")
    rows, embeddings = [], []
    for name, run in methods(n, not args.no_peers):
        t0 = time.perf_counter()
        Y = run(X)
        dt = time.perf_counter() - t0
        t = trustworthiness(X, Y, n_neighbors=10, sample_size=sample, random_state=0)
        acc = knn_accuracy(Y, y, n_neighbors=10)
        rows.append((name, t, acc, dt))
        embeddings.append((name, Y))
        print(f"  {name:<34} trustworthiness@10 {t:.4f}   10-NN accuracy {acc:.4f}   {dt:8.1f} s", flush=True)
    if args.no_plot:
        return rows
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(embeddings))
    rws = -(-len(embeddings) // cols)
    fig, axes = plt.subplots(rws, cols, figsize=(5.2 * cols, 4.8 * rws), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (name, Y) in zip(axes.ravel(), embeddings):
        for c in range(10):
            m = y == c
            ax.scatter(Y[m, 0], Y[m, 1], s=0.5 if n > 10_000 else 3, color=cmap(c), label=names[c], rasterized=True)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("embedding coordinate 1 (arbitrary units)")
        ax.set_ylabel("embedding coordinate 2 (arbitrary units)")
    for ax in axes.ravel()[len(embeddings):]:
        ax.axis("off")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=10, markerscale=8, fontsize=8)
    fig.suptitle(f"Fashion-MNIST, {n:,} images: 2-D embeddings coloured by class")
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    path = os.path.join(args.out, "embedding_fashion_mnist.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"  figure written to {path}")
    return rows


def next_word_mrr(score, test_ids):
    """Mean reciprocal rank of w_{t+1} under the scores score[w_t] over the vocabulary."""
    a, b = test_ids[:-1], test_ids[1:]
    keep = (a >= 0) & (b >= 0)
    S = score(a[keep])
    true = S[np.arange(len(S)), b[keep]]
    rank = 1 + np.sum(S > true[:, None], axis=1)
    return float(np.mean(1.0 / rank)), int(keep.sum())


def part2(args):
    import scipy.sparse as sp
    from scipy.sparse.linalg import svds

    from localization import AsymmetricMDS
    from localization.datasets import load_oliver_twist
    from localization.text import cooccurrence, tokenize

    tokens = tokenize(load_oliver_twist(args.data))
    cut = int(0.9 * len(tokens))
    train, test = tokens[:cut], tokens[cut:]
    C, vocab = cooccurrence(train, window=1, max_vocab=args.words)
    index = {w: i for i, w in enumerate(vocab)}
    test_ids = np.array([index.get(t, -1) for t in test])
    print(f"\nPart 2 — Oliver Twist: {len(tokens):,} words; the {len(vocab)} most frequent words of the first 90 %,"
          f" directed next-word counts (window 1), {C.nnz:,} non-zero pairs")
    sym, _ = cooccurrence(train, window=1, directed=False, weighting="ppmi", vocabulary=vocab)
    dirp, _ = cooccurrence(train, window=1, weighting="ppmi", vocabulary=vocab)
    print(f"  held-out text: last 10 % ({len(test):,} words); next-word pairs inside the vocabulary are ranked")
    print(f"  {'dimension':>9}  {'softmax AMDS':>13}  {'Frobenius AMDS (PPMI)':>22}  {'symmetric SVD (PPMI)':>21}")
    results = {}
    for q in args.dims:
        soft = AsymmetricMDS(n_components=q, affinity="precomputed", loss="softmax", row_weight="mass", random_state=0).fit(C)
        frob = AsymmetricMDS(n_components=q, affinity="precomputed", random_state=0).fit(dirp)
        U, s, _ = svds(sp.csr_matrix(sym), k=q, random_state=0)
        Zs = U * np.sqrt(s)
        m_soft, npairs = next_word_mrr(lambda a: soft.embedding_[a] @ soft.key_embedding_.T, test_ids)
        m_frob, _ = next_word_mrr(lambda a: frob.embedding_[a] @ frob.key_embedding_.T, test_ids)
        m_sym, _ = next_word_mrr(lambda a: Zs[a] @ Zs.T, test_ids)
        results[q] = (m_soft, m_frob, m_sym, soft)
        print(f"  {q:>9}  {m_soft:>13.4f}  {m_frob:>22.4f}  {m_sym:>21.4f}   (MRR over {npairs:,} pairs)", flush=True)
    freq = np.asarray(C.sum(axis=1)).ravel() / C.sum()
    unigram = np.argsort(-freq)
    rank_of = np.empty(len(vocab), int)
    rank_of[unigram] = np.arange(1, len(vocab) + 1)
    b = test_ids[1:][(test_ids[:-1] >= 0) & (test_ids[1:] >= 0)]
    print(f"  baseline, ranking by frequency alone: MRR {np.mean(1.0 / rank_of[b]):.4f}")
    if not args.no_plot:
        plot_words(args, AsymmetricMDS(n_components=2, affinity="precomputed", loss="softmax", row_weight="mass", random_state=0).fit(C), vocab)
    return results


def plot_words(args, model, vocab):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Z1, Z2 = model.embedding_, model.key_embedding_
    show = 45
    fig, ax = plt.subplots(figsize=(10, 8.5))
    ax.scatter(Z1[show:, 0], Z1[show:, 1], s=4, c="0.8", label="query points of the other words")
    for i in range(show):
        ax.plot([Z1[i, 0], Z2[i, 0]], [Z1[i, 1], Z2[i, 1]], "-", c="0.6", lw=0.7, zorder=1)
    ax.scatter(Z1[:show, 0], Z1[:show, 1], s=22, c="tab:blue", label="query z₁(w): predicts the next word", zorder=2)
    ax.scatter(Z2[:show, 0], Z2[:show, 1], s=22, c="tab:orange", marker="^", label="key z₂(w): is predicted", zorder=2)
    for i in range(show):
        ax.annotate(vocab[i], Z1[i], fontsize=8, color="tab:blue", xytext=(2, 2), textcoords="offset points")
        ax.annotate(vocab[i], Z2[i], fontsize=7, color="tab:orange", xytext=(2, -8), textcoords="offset points")
    ax.set_xlabel("embedding coordinate 1 (arbitrary units)")
    ax.set_ylabel("embedding coordinate 2 (arbitrary units)")
    ax.set_title(f"Oliver Twist: asymmetric MDS (softmax) of next-word counts, {len(vocab)} words\n"
                 f"P(next = v | w) ≈ softmax(z₁(w)·z₂(v)); the {show} most frequent words, query—key joined")
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    path = os.path.join(args.out, "embedding_oliver_twist.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"  figure written to {path}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="folder with the Fashion-MNIST IDX files and oliver_twist.txt (default: LOCALIZATION_DATA)")
    p.add_argument("--n", type=int, default=None, help="use the first N Fashion-MNIST images (default: all found)")
    p.add_argument("--words", type=int, default=500, help="vocabulary size of part 2 (default 500)")
    p.add_argument("--dims", type=int, nargs="+", default=[2, 10, 30], help="embedding dimensions of part 2")
    p.add_argument("--out", default=".", help="folder for the figures")
    p.add_argument("--no-peers", action="store_true", help="only our methods in part 1")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--part", type=int, choices=(1, 2), help="run only one part")
    args = p.parse_args()
    if args.part in (None, 1):
        part1(args)
    if args.part in (None, 2):
        part2(args)
