from isotope.ingest.sentences import sentences, split_sentences


def test_abbreviations_initials_and_decimals_do_not_end_sentences() -> None:
    text = (
        "Dr. Smith arrived at 3.15 p.m. on Jan. 5 with J. R. R. Tolkien, e.g. at the embassy. "
        "Prices rose 4.5% in v2.1 of the report! Was it fun? Yes... It was."
    )
    assert sentences(text) == [
        "Dr. Smith arrived at 3.15 p.m. on Jan. 5 with J. R. R. Tolkien, e.g. at the embassy.",
        "Prices rose 4.5% in v2.1 of the report!",
        "Was it fun?",
        "Yes...",
        "It was.",
    ]


def test_list_items_are_units_and_code_blocks_stay_whole() -> None:
    text = (
        "Steps to follow:\n\n"
        "- Open the lid. Remove the filter.\n"
        "- Rinse it\n"
        "1. numbered item here\n\n"
        "```python\nx = 1. This is code. Not split.\n```\n\n"
        "After the code."
    )
    assert sentences(text) == [
        "Steps to follow:",
        "- Open the lid.",
        "Remove the filter.",
        "- Rinse it",
        "1. numbered item here",
        "```python\nx = 1. This is code. Not split.\n```",
        "After the code.",
    ]


def test_offsets_point_into_the_text_and_paragraph_ends_are_marked() -> None:
    text = "First one. Second one.\n\nThird one, in a new paragraph."
    spans = split_sentences(text)
    assert [text[s.start : s.end] for s in spans] == [
        "First one.", "Second one.", "Third one, in a new paragraph."
    ]
    assert [s.block_end for s in spans] == [False, True, True]


def test_soft_wrapped_lines_are_one_sentence() -> None:
    assert sentences("A sentence that is\nwrapped over lines. Next.") == [
        "A sentence that is\nwrapped over lines.", "Next."
    ]


def test_lowercase_after_period_is_not_a_boundary() -> None:
    assert sentences("See approx. five items, cf. the table. Done.") == [
        "See approx. five items, cf. the table.", "Done."
    ]
