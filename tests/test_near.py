"""A "did you mean" stays cheap whoever wrote the word and the names
(somatize/_base/near.py): counted, not timed."""

import difflib
import random

from somatize._base.near import AMONG, CHARS, close_names


def test_close_names_finds_what_difflib_finds_on_real_names():
    names = ["config.lr", "config.layers", "loss.best", "loss.last", "grad_norm.best"]
    assert close_names("config.l", names) == difflib.get_close_matches("config.l", names, n=3, cutoff=0.6)
    assert close_names("los.best", names)[0] == "loss.best"
    long = "config.learning_rate_of_the_encoder_layers_" + "x" * 200
    assert close_names(long[:-1] + "y", [long, "config.lr"]) == [long]  # compared by its first CHARS


def test_crafted_names_are_compared_a_bounded_number_of_times_each_of_bounded_length(monkeypatch):
    """5,000 shuffles of a 300-character word's own letters (what makes
    difflib slowest): at most AMONG pairs compared, none longer than CHARS."""
    rng = random.Random(0)
    word = "".join(rng.choice("ab") for _ in range(300))
    names = ["".join(rng.sample(word, len(word))) for _ in range(5_000)]
    compared = []
    real = difflib.SequenceMatcher.set_seq1

    def counted(self, a):
        compared.append(len(a))
        return real(self, a)

    monkeypatch.setattr(difflib.SequenceMatcher, "set_seq1", counted)
    close_names(word, names)
    compared = compared[1:]  # the first: the matcher made empty, before any name
    assert 0 < len(compared) <= AMONG and max(compared) <= CHARS
