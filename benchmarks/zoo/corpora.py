"""The public-docs zoo: documentation corpora from Debian's archive, pinned, fetched without root.

Each corpus is one Debian package at a pinned version and sha256 (``apt-get download`` +
``dpkg-deb -x``, as ``scripts/install-pydoc.sh`` does), the files of it that are pages (site
furniture - search pages, indexes, ``_sources`` copies of rendered pages - left out), and a
part: ``dev`` corpora are the ones screening and DLP may be tuned on, ``test`` corpora are only
measured. The outside checks of issue #31 are kept apart from both: Debian's ``sqlite3-doc`` is
here as part ``outside`` (measured, never tuned on, never a test fixture); FastAPI's Markdown docs
are not in Debian 12 nor in FastAPI's PyPI sdist, so this machine cannot fetch them.

Chosen for breadth (generator x domain); the ML libraries are the hardest negatives an
injection screen meets (models, training, prompts, agents), the security tools' pages are full
of example keys, hashes and passwords. No LLM library's docs are packaged in Debian 12 (the
archive snapshot the build machines use), so the ML corpora are scikit-learn, statsmodels,
Weka and tiny-dnn.

    python benchmarks/zoo/corpora.py            # fetch every corpus, print where each is
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("MICRORAG_ZOO", Path.home() / ".cache" / "microrag" / "zoo"))


@dataclass(frozen=True)
class Corpus:
    name: str
    package: str
    version: str
    sha256: str
    part: str  # "dev" (tuned on), "test" (measured only) or "outside" (the outside check: measured only)
    generator: str  # what wrote the pages: Sphinx, Doxygen, texinfo, ...
    domain: str
    root: str  # folder inside the package that holds the pages
    include: tuple[str, ...]  # globs under root, matched against the relative path
    exclude: tuple[str, ...] = ()
    every: int = 1  # keep every n-th page of those matching ``sample`` (huge generated API trees)
    sample: str = ""
    convert: str = ""  # "man": render groff to text; "rst": Sphinx's _sources/*.rst.txt as .rst; "gunzip"

    @property
    def folder(self) -> Path:
        return CACHE / self.name


_SPHINX_SKIP = ("_*", "*/_*", "genindex*", "search.html", "py-modindex.html", "*/genindex*")
D = "usr/share/doc"

CORPORA: tuple[Corpus, ...] = (
    # ------------------------------------------------------------------ dev: tuned on
    Corpus("django", "python-django-doc", "3:3.2.25-0+deb12u3",
           "33319c8e45b95693603213442ccf9bcee933ef338488115203ad25a0e01c696f", "dev", "Sphinx HTML", "web framework",
           f"{D}/python-django-doc/html", ("*.html",), _SPHINX_SKIP),
    Corpus("sklearn", "python-sklearn-doc", "1.2.1+dfsg-1",
           "4e244556326064e87e7563e3e544c2288d44b5719db2d7b3a85c9a84ae93488d", "dev", "Sphinx HTML", "ML library",
           f"{D}/python-sklearn-doc/html", ("*.html",), _SPHINX_SKIP),
    Corpus("apache2", "apache2-doc", "2.4.68-1~deb12u1",
           "cee8fe80ffb5de2744cd690c3d795b489e43a1c44c4e3a634c521642f22d7835", "dev", "hand-written HTML (XSLT)",
           "web server, sysadmin", f"{D}/apache2-doc/manual/en", ("*.html",)),
    Corpus("git", "git-doc", "1:2.39.5-0+deb12u3",
           "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec", "dev", "AsciiDoc HTML (man pages)",
           "version control, sysadmin", f"{D}/git-doc", ("*.html",), ("RelNotes*",)),
    Corpus("eigen", "libeigen3-doc", "3.4.0-4",
           "87fc424386cef92f58d0594936fa668d1b73d6e52232d2f99369e3e66aa5c0ff", "dev", "Doxygen HTML", "C++ linear algebra",
           f"{D}/libeigen3-dev/html", ("*.html",), ("search/*", "unsupported/*", "*-members.html", "*_source.html")),
    Corpus("cryptography", "python-cryptography-doc", "38.0.4-3+deb12u1",
           "435ad611f45a9d01dbafbcd046cb134dded31c39b1587ca24ec87f54f1250a35", "dev", "Sphinx HTML", "security library",
           f"{D}/python-cryptography-doc/html", ("*.html",), _SPHINX_SKIP),
    Corpus("octave", "octave-doc", "7.3.0-2",
           "b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5", "dev", "texinfo HTML", "language",
           f"{D}/octave/octave.html", ("*.html",), ("index.html",)),
    Corpus("certbot", "python-certbot-doc", "2.1.0-4",
           "34fc5ff59635cc74a43853c6d71a2259e493ba859cb2dd3df077822d608babac", "dev", "Sphinx HTML", "TLS, sysadmin",
           f"{D}/python3-certbot/html", ("*.html",), _SPHINX_SKIP),
    Corpus("typer", "python-typer-doc", "0.7.0-1",
           "cac49afacfc9918df6ca80bddf28f716f1088c5d7ae8de3fb8312d2cb8eb0755", "dev", "MkDocs HTML", "CLI framework",
           f"{D}/python-typer-doc/html", ("*.html",), ("404.html",)),
    Corpus("rust-book", "rust-doc", "1.63.0+dfsg1-2",
           "96ef96fe6df87d939ca713bd7df3d15c2b778ccb892eca025c4ee504146f697b", "dev", "mdBook HTML",
           "language tutorial (second person throughout)", f"{D}/rust-doc/html/book", ("*.html",),
           ("*/*", "print.html", "toc.html", "404.html")),
    Corpus("developers-reference", "developers-reference", "12.18",
           "0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e", "dev", "Sphinx HTML",
           "project handbook, policy", "usr/share/developers-reference", ("*.html",),
           _SPHINX_SKIP + ("developers-reference.html", "index.html")),
    # ------------------------------------------------------------------ test: measured only
    Corpus("statsmodels", "python-statsmodels-doc", "0.13.5+dfsg-7",
           "4167a3e13347343b9f0a6677fc804ecad80dd735d17bc051829610f6f1bc2afb", "test", "Sphinx HTML", "ML, statistics",
           f"{D}/python-statsmodels-doc/html", ("*.html",), _SPHINX_SKIP, every=10, sample="*generated/*"),
    Corpus("postgresql", "postgresql-doc-15", "15.18-0+deb12u1",
           "3c598277a463c44d672daa2c335deb8d8252e1852fb025fd4578ea2d9a1b90f0", "test", "DocBook HTML", "database",
           f"{D}/postgresql-doc-15/html", ("*.html",), ("bookindex.html",)),
    Corpus("flask", "python-flask-doc", "2.2.2-3",
           "0659f6a04b15fe3f907150cadc0399fe987c790e722e001b73f7e49fa5ecca15", "test", "Sphinx HTML", "web framework",
           f"{D}/python-flask-doc/html", ("*.html",), _SPHINX_SKIP),
    Corpus("nodejs", "nodejs-doc", "18.20.4+dfsg-1~deb12u2",
           "9f674d3536be94923bb8720c48ec17bc92b8de62f2954c3172b59a3ada1de65f", "test", "Markdown", "language runtime",
           f"{D}/nodejs/api", ("*.md", "*.md.gz"), convert="gunzip"),
    Corpus("openssl", "libssl-doc", "3.0.20-1~deb12u2",
           "288301da4a89227dfbb98fe498894e1f79aeda29d0aae4a84fb7db4fc0d3fba4", "test", "man pages (groff)",
           "security library", "usr/share/man/man3", ("*.3ssl.gz",), convert="man"),
    Corpus("tiny-dnn", "tiny-dnn-doc", "1.0.0a3+ds-3",
           "acf9b5fddbeeb71b23d9574e0034e3bd5234f48031320998ec5f60d5a7f8cba6", "test", "Doxygen HTML", "deep learning",
           f"{D}/tiny-dnn/html", ("*.html",), ("search/*", "*-members.html", "*_source.html")),
    Corpus("weka", "weka-doc", "3.6.14-3",
           "18e0eaad3c91c30df8667348fe384d5ce9a5152c5538a3f6934d22c1baa4021f", "test", "Javadoc HTML", "ML suite",
           f"{D}/weka-doc/doc", ("*.html",), ("allclasses*", "index-all.html", "*package-tree.html", "overview-tree.html")),
    Corpus("werkzeug", "python-werkzeug-doc", "2.2.2-3+deb12u1",
           "5aeffdfdf257911e3ade253d2b6cc3f98a06df3bec1332efdbc3fbd578530230", "test", "reStructuredText", "web toolkit",
           f"{D}/python-werkzeug-doc/html/_sources", ("*.rst.txt",), convert="rst"),
    Corpus("john", "john", "1.9.0-2",
           "dfc88bab0716087bc4a5c3263b3d0e8c470b9f9da8957ff872c3cbd8151412b8", "test", "plain text", "password cracker",
           f"{D}/john", ("*.gz", "*[A-Z]"), ("changelog*",), convert="gunzip"),
    Corpus("yara", "yara-doc", "4.2.3-4",
           "3bd701d9e9ac2c1914bac1dcf9502cce2f3d141f299a95331072955933231cff", "test", "Sphinx HTML", "malware analysis",
           f"{D}/yara/html", ("*.html",), _SPHINX_SKIP),
    Corpus("nacl", "python-nacl-doc", "1.5.0-2",
           "6ac81bf3bf627c4da03d7bb96ad6637615184f0300fc7c5277e745d0d496b0ac", "test", "Sphinx HTML", "security library",
           f"{D}/python-nacl-doc/html", ("*.html",), _SPHINX_SKIP),
    Corpus("debian-handbook", "debian-handbook", "11.20220922",
           "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa", "test", "Publican HTML",
           "operating system, sysadmin book", f"{D}/debian-handbook/html/en-US", ("*.html",),
           ("Common_Content/*", "*/*")),
    Corpus("debian-reference", "debian-reference-en", "2.100",
           "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f", "test", "DocBook HTML",
           "operating system, user guide", "usr/share/debian-reference", ("*.en.html",), ("index.en.html",)),
    Corpus("maint-guide", "maint-guide", "1.2.53",
           "762c8a400a36668d2eb814a3ba356b06488fd889dfce478eb11d5cfb189a47b5", "test", "DocBook HTML",
           "packaging tutorial", f"{D}/maint-guide/html", ("*.en.html",), ("index.en.html",)),
    Corpus("golang", "golang-1.19-doc", "1.19.8-2",
           "eb1b1214aa50688486c7e041714be5cd0f986bdfd78dfc690d6ba3ade5e11952", "test", "hand-written HTML",
           "language specification", f"{D}/golang-1.19-doc/html", ("*.html",), ("go1.17_spec.html",)),
    # ------------------------------------------------------------------ outside: the check
    Corpus("sqlite", "sqlite3-doc", "3.40.1-2+deb12u2",
           "466e30d7066e2641fa13e56bc662a2ad521b8cc9c17dde9c9dac3d4f105e32f2", "outside", "hand-written HTML",
           "database", f"{D}/sqlite3", ("*.html",), ("*/*",)),
)


def _matches(rel: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(rel.rsplit("/", 1)[-1], g) for g in globs)


def pages(corpus: Corpus, tree: Path) -> list[Path]:
    """The files of ``tree`` (the package's ``root``) that are pages of ``corpus``, sorted."""
    chosen = [p for p in sorted(tree.rglob("*")) if p.is_file() and not p.is_symlink()
              and _matches(p.relative_to(tree).as_posix(), corpus.include)
              and not _matches(p.relative_to(tree).as_posix(), corpus.exclude)]
    if corpus.every > 1:
        sampled = [p for p in chosen if fnmatch.fnmatch(p.relative_to(tree).as_posix(), corpus.sample)]
        keep = set(sampled[:: corpus.every])
        chosen = [p for p in chosen if p not in sampled or p in keep]
    return chosen


def _write(corpus: Corpus, src: Path, rel: str, dest: Path) -> None:
    if corpus.convert == "man":
        # groff renders the page as a reader sees it in a terminal; col -b drops the overstrikes.
        out = subprocess.run(["man", "-l", "-E", "UTF-8", str(src)], capture_output=True, check=True,
                             env={**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0"}).stdout
        text = subprocess.run(["col", "-bx"], input=out, capture_output=True, check=True).stdout
        target = dest / (rel.removesuffix(".gz") + ".txt")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
        return
    data = gzip.decompress(src.read_bytes()) if rel.endswith(".gz") else src.read_bytes()
    rel = rel.removesuffix(".gz")
    if corpus.convert == "rst":
        rel = rel.removesuffix(".txt")
    elif corpus.convert == "gunzip" and "." not in rel.rsplit("/", 1)[-1]:
        rel += ".txt"  # README, FAQ, ...: plain text
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def fetch(corpus: Corpus) -> Path:
    """The corpus folder, fetched and extracted when missing (idempotent: a ``.complete`` stamp)."""
    dest = corpus.folder
    if (dest / ".complete").exists():
        return dest
    with tempfile.TemporaryDirectory(prefix=f"zoo-{corpus.name}-") as tmp:
        got = subprocess.run(["apt-get", "download", f"{corpus.package}={corpus.version}"], cwd=tmp,
                             capture_output=True, text=True)
        debs = list(Path(tmp).glob("*.deb"))
        if got.returncode or not debs:
            raise SystemExit(f"zoo: 'apt-get download {corpus.package}={corpus.version}' failed "
                             f"(needs a Debian 12 package index): {got.stderr.strip()[-200:]}")
        digest = hashlib.sha256(debs[0].read_bytes()).hexdigest()
        if digest != corpus.sha256:
            raise SystemExit(f"zoo: {debs[0].name} has sha256 {digest}, pinned {corpus.sha256}: refusing it")
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), f"{tmp}/x"], check=True)
        tree = Path(tmp) / "x" / corpus.root
        found = pages(corpus, tree)
        if not found:
            raise SystemExit(f"zoo: no pages of {corpus.name} under {corpus.root}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for p in found:
            _write(corpus, p, p.relative_to(tree).as_posix(), dest)
    (dest / ".complete").write_text(f"{corpus.package} {corpus.version}\n")
    return dest


def main() -> None:
    for c in CORPORA:
        folder = fetch(c)
        n = sum(1 for p in folder.rglob("*") if p.is_file() and p.name != ".complete")
        print(f"{c.part:4} {c.name:12} {n:5} pages  {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
