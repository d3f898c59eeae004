import itertools
import re

from isotope.ingest.chunking import chunk_text, count_tokens


def _paragraph(n: int, words: int = 12) -> str:
    return " ".join(
        f"Sentence {n}-{i} " + " ".join(f"word{j}" for j in range(words - 2)) + "."
        for i in range(4)
    )


def test_chunks_respect_size_and_map_back_to_the_text() -> None:
    text = "\n\n".join(_paragraph(n) for n in range(6))
    chunks = chunk_text(text, size=80, overlap=10)
    assert len(chunks) > 3
    for c in chunks:
        assert c.tokens <= 80
        assert count_tokens(text[c.start : c.end]) <= 80
        # never breaks a word: boundaries sit at word edges
        assert c.start == 0 or not text[c.start - 1].isalnum()
        assert c.end == len(text) or not text[c.end].isalnum()
    # everything is covered
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_chunks_prefer_paragraph_boundaries() -> None:
    text = "\n\n".join(_paragraph(n) for n in range(4))  # 4 paragraphs of ~52 tokens
    chunks = chunk_text(text, size=120, overlap=10)
    for c in chunks:
        assert text[c.end :].startswith("\n\n") or c.end == len(text)


def test_long_paragraph_chunks_overlap_by_whole_sentences() -> None:
    text = " ".join(f"This is sentence number {i} of a long paragraph." for i in range(40))
    chunks = chunk_text(text, size=60, overlap=15)
    assert len(chunks) > 4
    for a, b in itertools.pairwise(chunks):
        assert b.start < a.end, "consecutive chunks of one paragraph overlap"
        assert text[b.start : b.start + 4] == "This"
        assert count_tokens(text[b.start : a.end]) <= 15


def test_sentence_longer_than_a_chunk_is_cut_between_words() -> None:
    text = "word " * 500
    chunks = chunk_text(text.strip(), size=100, overlap=10)
    assert len(chunks) == 5
    for c in chunks:
        piece = text[c.start : c.end]
        assert re.fullmatch(r"word( word)*", piece)


def test_heading_goes_with_the_text_after_it() -> None:
    body = " ".join(f"Fact {i} is stated in this sentence here." for i in range(8))
    text = f"{body}\n\n# Next section\n\n{body}"
    chunks = chunk_text(text, size=60, overlap=0)
    for c in chunks:
        assert not text[c.start : c.end].rstrip().endswith("# Next section")
