"""Sphinx configuration of the documentation site (built by ``scripts/build_docs``).

The API reference is generated from the package itself: every name in ``localization.__all__``
and in each public subpackage's ``__all__`` gets a page rendered from its numpydoc docstring.
"""

from __future__ import annotations

import importlib
import inspect
import types
from pathlib import Path

import localization

project = "localization-methods"
author = "The localization-methods authors"
copyright = "The localization-methods authors"
release = version = localization.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "api/generated/**.md"]
templates_path = ["_templates"]
html_theme = "alabaster"
html_static_path: list[str] = []

# Every warning is an error and every reference must resolve (scripts/build_docs: -W -n).
# Other projects' names are not linked (no network at build time), only shown.
nitpick_ignore_regex = [(r"py:.*", r"(numpy|scipy|sklearn|dask|pandas|torch)(\..*)?")]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"  # numpydoc renders the documented types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()
# Docstring types are prose ("array-like of shape (n, d)"): do not turn them into references.
numpydoc_xref_param_type = False


# -- The API reference, generated from __all__ -------------------------------------------------
# Each object is documented once, under its shortest public path: the estimators and functions
# re-exported by ``localization`` under ``localization.X``, the rest under their subpackage.
SUBPACKAGES = [
    "cluster", "embedding", "denoise", "kernels", "adaptive", "sequence", "memory", "generative",
    "fuzzy", "semi_supervised", "metrics", "text", "datasets", "dask",
]


def _public(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [k for k, v in vars(module).items()
                 if not k.startswith("_") and getattr(v, "__module__", None) == module.__name__]
    return [n for n in names if not n.startswith("__")]


#: id of every documented object → the path it is documented under.
CANONICAL: dict[int, str] = {}


def _section(title: str, module: str, names: list[str], seen: dict[int, str]) -> str:
    mod = importlib.import_module(module)
    lines = [title, "=" * len(title), "", f".. automodule:: {module}", "   :no-members:", ""]
    own = []
    also = []
    for n in sorted(names, key=str.lower):
        obj = getattr(mod, n)
        if isinstance(obj, types.ModuleType):
            continue
        if id(obj) in seen:
            also.append(f"* :{_role(obj)}:`{seen[id(obj)]}`")
            continue
        if not (inspect.isclass(obj) or callable(obj)):
            continue
        seen[id(obj)] = f"{module}.{n}"
        own.append(n)
    if own:
        lines += [".. currentmodule:: " + module, "", ".. autosummary::", "   :toctree: generated/",
                  "   :nosignatures:", ""] + [f"   {n}" for n in own] + [""]
    if also:
        lines += ["Also available here:", ""] + also + [""]
    return "\n".join(lines)


def _role(obj: object) -> str:
    return "class" if inspect.isclass(obj) else "func"


def _write_api() -> None:
    out = Path(__file__).parent / "api"
    out.mkdir(exist_ok=True)
    seen = CANONICAL
    pages = [("localization", "localization", _public(localization))]
    pages += [(f"localization.{s}", f"localization.{s}", _public(importlib.import_module(f"localization.{s}")))
              for s in SUBPACKAGES]
    toc = []
    for title, module, names in pages:
        stem = module.replace(".", "_")
        text = _section(title, module, names, seen)
        path = out / f"{stem}.rst"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        toc.append(f"   {stem}")
    index = "\n".join(["API reference", "=============", "",
                       "Every public name, rendered from its docstring.", "",
                       ".. toctree::", "   :maxdepth: 1", ""] + toc) + "\n"
    if not (out / "index.rst").exists() or (out / "index.rst").read_text() != index:
        (out / "index.rst").write_text(index)


# Written before autosummary scans the sources for the pages it generates.
_write_api()


def _skip_foreign(app, what, name, obj, skip, options):
    """Document only what this package defines: not scikit-learn's generated
    ``set_*_request`` methods nor the mixins' ``score`` (documented by scikit-learn)."""
    module = getattr(obj, "__module__", None) or ""
    if callable(obj) and not module.startswith("localization"):
        return True
    return None  # Sphinx decides (private names stay out)


def _resolve_alias(app, env, node, contnode):
    """Resolve a reference to a public object by any of its public paths (``MeanShift`` in
    ``localization.cluster``, ``localization.cluster.MeanShift``) to where it is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    candidates = [target]
    if node.get("py:module"):
        candidates.insert(0, f"{node['py:module']}.{target}")
    if node.get("py:class"):
        candidates.insert(0, f"{node.get('py:module')}.{node['py:class']}.{target}")
    candidates.append(f"localization.{target}")
    # A docstring's own module: `laplacian` in the docstring of localization.Kernel (kernels.py).
    page = _lookup(node["refdoc"].rpartition("/")[2])
    home = getattr(page, "__module__", None) or getattr(page, "__name__", None)
    if home:
        candidates.append(f"{home}.{target}")
    for name in candidates:
        obj = _lookup(name)
        if obj is None:
            continue
        owner, _, attr = name.rpartition(".")
        canonical = CANONICAL.get(id(obj))
        if canonical is None:  # a method or attribute of a documented class
            parent = _lookup(owner)
            if parent is None or id(parent) not in CANONICAL:
                continue
            canonical = f"{CANONICAL[id(parent)]}.{attr}"
        if canonical == target:
            return None
        domain = env.get_domain("py")
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode)
    return None


def _lookup(path: str) -> object | None:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None
        return obj
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign)
    app.connect("missing-reference", _resolve_alias)
