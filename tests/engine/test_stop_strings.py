"""The stop-string matcher: text split anywhere gives the same result as whole text."""

from __future__ import annotations

import pytest

from engine.text.stop_strings import StopStringMatcher


def feed_all(stops, pieces):
    """(emitted text, stop hit, the emitted text after each piece) of feeding `pieces`."""
    matcher = StopStringMatcher(stops)
    emitted, stop, steps = "", None, []
    for piece in pieces:
        scan = matcher.feed(piece)
        emitted += scan.text
        steps.append(emitted)
        stop = stop or scan.stop
    if stop is None:
        emitted += matcher.flush()
    return emitted, stop, steps


def reference(stops, text):
    """The definition: cut at the earliest occurrence of any stop string."""
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return text, None
    position, stop = min(hits)
    return text[:position], stop


TEXT = "The quick brown fox jumps over the lazy dog. END of story"


@pytest.mark.parametrize("stops", [["fox"], ["END"], ["lazy dog.", "quick"], ["zzz"], ["o"], ["dog. E", "s"]])
def test_every_split_of_the_text_gives_the_reference_result(stops):
    expected = reference(stops, TEXT)
    for cut in range(len(TEXT) + 1):
        for second in (cut, min(len(TEXT), cut + 3)):
            pieces = [TEXT[:cut], TEXT[cut:second], TEXT[second:]]
            emitted, stop, _ = feed_all(stops, pieces)
            assert (emitted, stop) == expected, (stops, pieces)
    one_char_each = feed_all(stops, list(TEXT))[:2]
    assert one_char_each == expected


def test_only_a_possible_stop_prefix_is_held_back():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("abc ST").text == "abc "  # "ST" could begin STOP
    assert matcher.feed("x").text == "STx"  # it did not
    assert matcher.feed("S").text == ""
    assert matcher.feed("TO").text == ""
    scan = matcher.feed("P and more")
    assert (scan.text, scan.stop) == ("", "STOP")
    assert matcher.feed("later text").text == "" and matcher.flush() == ""


def test_flush_returns_held_text_when_generation_ends():
    matcher = StopStringMatcher(["</end>"])
    assert matcher.feed("result </e").text == "result "
    assert matcher.flush() == "</e"


def test_the_earliest_stop_wins_even_if_another_began_first():
    # "abcd" begins at 0 but "bc" ends first and starts earlier than any later match.
    assert feed_all(["abcdX", "bc"], ["ab", "cd"])[:2] == ("a", "bc")


def test_empty_stop_strings_are_refused():
    with pytest.raises(ValueError):
        StopStringMatcher([""])


def test_the_longest_possible_beginning_is_held_back_whatever_repeats_in_it():
    """Against the definition (every suffix tried, longest first), on random texts of a
    small alphabet, where a stop's first character recurs inside it and in the text."""
    import random

    rng = random.Random(3)
    for _ in range(2000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randrange(1, 6))) for _ in range(rng.randrange(1, 3))]
        text = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 8)))
        if any(stop in text for stop in stops):
            continue
        held = max((length for stop in stops for length in range(1, min(len(stop), len(text) + 1))
                    if text.endswith(stop[:length])), default=0)
        assert StopStringMatcher(stops).feed(text).text == text[:len(text) - held], (stops, text)


def one_by_one(matcher, pieces):
    """(emitted text, stop, index of the piece that stopped it) of feeding `pieces` one at a
    time, as the output stage feeds a token's text, until a stop."""
    emitted = ""
    for index, piece in enumerate(pieces):
        scan = matcher.feed(piece)
        emitted += scan.text
        if scan.stopped:
            return emitted, scan.stop, index
    return emitted, None, None


def test_pieces_fed_at_once_stop_where_one_by_one_would():
    """`feed_pieces` (a decode window's tokens at once, engine/host/window_output.py) against
    feeding one piece at a time: the same text, stop and piece, and the same state after,
    on random texts of a small alphabet with stops that overlap, after text held back."""
    import random

    rng = random.Random(7)
    compared = stopped_before_the_first_starting = 0
    for _ in range(6000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        earlier = "".join(rng.choice("abc") for _ in range(rng.randint(0, 3)))
        pieces = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 8))]
        alone, together = StopStringMatcher(stops), StopStringMatcher(stops)
        first_alone, first_together = alone.feed(earlier), together.feed(earlier)
        if first_alone.stopped:
            continue
        assert first_together == first_alone
        scan, index = together.feed_pieces(pieces)
        emitted, stop, expected_index = one_by_one(alone, pieces)
        assert (scan.text, scan.stop, index) == (emitted, stop, expected_index), (stops, earlier, pieces)
        assert (together.flush(), together.feed("ab").text) == (alone.flush(), alone.feed("ab").text)
        compared += 1
        text = earlier[len(first_alone.text):] + "".join(pieces)
        starts = [text.find(s) for s in stops if s in text]
        stopped_before_the_first_starting += stop is not None and text.find(stop) != min(starts)
    assert compared > 2000
    assert stopped_before_the_first_starting >= 5  # a later, shorter stop ended first: the case feed_pieces finds
