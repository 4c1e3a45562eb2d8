"""The corpus: text of each format, chunks with stable ids and offsets, BM25 search, the
index built once and refreshed only for files added, removed or modified."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from plandag.errors import InputError
from plandag.jobs.research.corpus import Corpus, chunk_text, extract_text

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "examples" / "research" / "corpus"


def pdf_with_lines(lines: list[str]) -> bytes:
    """A one-page PDF whose text is ``lines`` (Helvetica, one line each)."""
    shown = " ".join(f"({line}) Tj 0 -16 Td" for line in lines)
    content = f"BT /F1 12 Tf 72 720 Td {shown} ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(content)} >>\nstream\n{content}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


def test_text_of_each_format(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\r\n\r\nBody text.\n", encoding="utf-8")
    (tmp_path / "b.html").write_text(
        "<html><head><title>T</title><style>p{}</style></head><body><h1>Head</h1>"
        "<p>First  paragraph.</p><script>x()</script><p>Second <b>bold</b> one.</p></body></html>",
        encoding="utf-8",
    )
    (tmp_path / "c.pdf").write_bytes(pdf_with_lines(["Alpha beta gamma.", "Delta epsilon."]))
    assert extract_text(tmp_path / "a.md") == "# Title\n\nBody text.\n"
    assert extract_text(tmp_path / "b.html") == "Head\n\nFirst paragraph.\n\nSecond bold one."
    assert extract_text(tmp_path / "c.pdf") == "Alpha beta gamma.\nDelta epsilon."


def test_chunks_pack_paragraphs_and_cut_long_ones_at_sentence_ends() -> None:
    text = "One two.\n\nThree four.\n\n" + "Long sentence here. " * 10 + "\n\nTail."
    spans = chunk_text(text, limit=100)
    pieces = [text[start:end] for start, end in spans]
    assert pieces[0] == "One two.\n\nThree four."
    assert all(len(piece) <= 100 for piece in pieces)
    assert all(piece == piece.strip() for piece in pieces)
    assert pieces[1].endswith("here.")  # cut after a sentence end
    assert pieces[-1].endswith("Tail.")
    # every word is in exactly one chunk, in order
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())


def test_shipped_corpus_ids_offsets_and_search(tmp_path: Path) -> None:
    with Corpus.open(SHIPPED, index=tmp_path / "index.sqlite3") as corpus:
        documents = {document.path: document for document in corpus.documents()}
        assert sorted(documents) == [
            "federalist-01.txt",
            "federalist-02.txt",
            "federalist-03.txt",
            "federalist-04.txt",
            "federalist-05.md",
            "federalist-06.md",
            "federalist-07.md",
            "federalist-08.md",
            "federalist-09.html",
            "federalist-10.md",
        ]
        assert all(document.status == "indexed" for document in documents.values())
        text = extract_text(SHIPPED / "federalist-10.md")
        chunks = corpus.chunks("federalist-10.md")
        assert [chunk.chunk_id for chunk in chunks[:2]] == [
            "federalist-10.md#1",
            "federalist-10.md#2",
        ]
        for chunk in chunks:
            assert text[chunk.start : chunk.end] == chunk.text
        hits = corpus.search("the causes of faction are sown in the nature of man", k=3)
        assert len(hits) == 3
        assert hits[0].chunk.document == "federalist-10.md"
        assert "sown in the nature of man" in hits[0].chunk.text
        assert hits[0].score >= hits[1].score >= hits[2].score
        assert corpus.search("???", k=3) == []
        assert corpus.chunk("federalist-10.md#999") is None


def test_index_is_reused_until_a_file_is_added_removed_or_modified(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("Apples grow on trees in the orchard.\n", encoding="utf-8")
    (folder / "b.md").write_text("Bananas ripen in the sun.\n", encoding="utf-8")
    index = tmp_path / "index.sqlite3"
    with Corpus.open(folder, index=index) as first:
        assert first.update.added == ("a.txt", "b.md")
    with Corpus.open(folder, index=index) as again:
        assert again.update.reused
        assert again.update.unchanged == ("a.txt", "b.md")
    # touched with the same bytes: not re-indexed
    os.utime(folder / "a.txt", ns=(1, 1_000_000_000))
    with Corpus.open(folder, index=index) as touched:
        assert touched.update.reused
    (folder / "a.txt").write_text("Apricots grow on trees too.\n", encoding="utf-8")
    (folder / "b.md").unlink()
    (folder / "c.html").write_text("<p>Cherries are red.</p>", encoding="utf-8")
    with Corpus.open(folder, index=index) as changed:
        assert (changed.update.added, changed.update.removed, changed.update.modified) == (
            ("c.html",),
            ("b.md",),
            ("a.txt",),
        )
        assert [hit.chunk.chunk_id for hit in changed.search("apricots")] == ["a.txt#1"]
        assert changed.search("apples") == []
        assert changed.search("bananas") == []
        assert [hit.chunk.chunk_id for hit in changed.search("cherries")] == ["c.html#1"]


def test_unreadable_files_are_skipped_with_their_reason(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("Readable words here.", encoding="utf-8")
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty.md").write_text("  \n", encoding="utf-8")
    (tmp_path / "broken.pdf").write_bytes(b"not a pdf at all")
    with Corpus.open(tmp_path, index=tmp_path / ".index.sqlite3") as corpus:
        found = {d.path: (d.status, d.error) for d in corpus.documents()}
    assert found["good.txt"] == ("indexed", None)
    assert found["latin.txt"][0] == "skipped"
    assert "not UTF-8" in str(found["latin.txt"][1])
    assert found["empty.md"][0] == "skipped"
    assert "no text" in str(found["empty.md"][1])
    assert found["broken.pdf"][0] == "skipped"
    assert "PDF" in str(found["broken.pdf"][1])


def test_a_folder_without_documents_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"holds no \.md, \.txt, \.html or \.pdf file"):
        Corpus.open(tmp_path, index=tmp_path / "i.sqlite3")
    with pytest.raises(InputError, match="does not exist"):
        Corpus.open(tmp_path / "missing", index=tmp_path / "i.sqlite3")


def test_binary_huge_and_unreadable_files_are_skipped_with_their_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plandag.jobs.research.corpus as corpus_module

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("Faction is a number of citizens.\n", encoding="utf-8")
    (folder / "zeros.txt").write_bytes(b"\x00" * 512)  # valid UTF-8, but not text
    (folder / "huge.txt").write_text("word " * 400, encoding="utf-8")  # 2,000 bytes
    (folder / "locked.txt").write_text("a secret", encoding="utf-8")
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_BYTES", 1000)
    real_sha256 = corpus_module._sha256

    def sha256(path: Path) -> str:
        if path.name == "locked.txt":  # as a file without read permission does
            raise PermissionError(13, "Permission denied")
        return real_sha256(path)

    monkeypatch.setattr(corpus_module, "_sha256", sha256)
    corpus = Corpus.open(folder, index=tmp_path / "index.sqlite3")
    try:
        documents = {item.path: (item.status, item.error) for item in corpus.documents()}
        assert corpus.chunk_count() == 1
    finally:
        corpus.close()
    assert documents == {
        "good.md": ("indexed", None),
        "huge.txt": (
            "skipped",
            "2,000 bytes, more than the 1,000 a document may have; split it into smaller files",
        ),
        "locked.txt": ("skipped", "cannot read: Permission denied"),
        "zeros.txt": (
            "skipped",
            "a binary file (it holds NUL bytes), not text; remove it from the folder",
        ),
    }


def test_a_pdf_without_the_documents_extra_is_skipped_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "good.txt").write_text("Readable words here.", encoding="utf-8")
    (tmp_path / "c.pdf").write_bytes(pdf_with_lines(["Alpha beta gamma."]))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as if pypdf were not installed
    with Corpus.open(tmp_path, index=tmp_path / ".index.sqlite3") as corpus:
        found = {d.path: (d.status, d.error) for d in corpus.documents()}
    assert found["good.txt"] == ("indexed", None)
    assert found["c.pdf"][0] == "skipped"
    assert "missing_extra: reading a PDF needs the documents extra: pip install " in str(
        found["c.pdf"][1]
    )
    assert "'plandag[documents]'" in str(found["c.pdf"][1])
