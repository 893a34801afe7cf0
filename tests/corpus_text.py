"""Synthetic English-like text for the data-step tests, written for them (no third-party sentences).

Sentences are built from small word lists by a seeded RNG, so a corpus of any size is reproducible.
Some words are long and rare so that WordPiece splits them into ## pieces (whole-word masking).
"""

from __future__ import annotations

import random
from pathlib import Path

NAMES = ["Alvarez", "Okafor", "Lindqvist", "Haruki", "Brennan", "Castellano", "Novak", "Adeyemi", "Moreau"]
TITLES = ["Dr.", "Mr.", "Mrs.", "Prof.", "Ms."]
SUBJECTS = ["the committee", "a small crew", "the old harbour", "our neighbour", "the river authority",
            "a young engineer", "the library", "the orchestra", "each volunteer", "the survey team"]
VERBS = ["repaired", "described", "photographed", "measured", "painted", "reorganised", "questioned",
         "catalogued", "visited", "ignored", "celebrated", "rebuilt"]
OBJECTS = ["the lighthouse", "three wooden bridges", "a forgotten garden", "the northern railway",
           "several copper kettles", "the village archive", "an unusual clocktower", "the market square",
           "two hundred maps", "the flooded meadow"]
TAILS = ["before the winter storms", "after a long debate", "with remarkable patience",
         "despite the cost", "during the festival", "without telling anyone", "for the second time",
         "near the U.S. border", "as the morning fog lifted", "under a grey sky"]
# Rare words that WordPiece splits into several pieces.
RARE = ["glimmerwort", "thunderquill", "snorkelberry", "quibblefax", "marrowtide", "fizzlecrumb",
        "wobbleton", "grumbleshire"]


def sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.15:
        subject = f"{rng.choice(TITLES)} {rng.choice(NAMES)}"
    elif kind < 0.25:
        subject = f"the {rng.choice(RARE)} society"
    else:
        subject = rng.choice(SUBJECTS)
    words = f"{subject} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
    extra = rng.random()
    if extra < 0.5:
        words += f" {rng.choice(TAILS)}"
    elif extra < 0.6:
        words += f", e.g. {rng.choice(OBJECTS)} and {rng.choice(OBJECTS)}"
    text = words[0].upper() + words[1:]
    return text + rng.choice([".", ".", ".", "!", "?"])


def documents(n_docs: int, seed: int = 0, min_sentences: int = 1, max_sentences: int = 12) -> list[list[str]]:
    rng = random.Random(seed)
    return [[sentence(rng) for _ in range(rng.randint(min_sentences, max_sentences))] for _ in range(n_docs)]


def write_segmented(path: Path, docs: list[list[str]]) -> Path:
    """One sentence per line, a blank line between documents (the output format of `segment`)."""
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    return path


def write_raw(path: Path, docs: list[list[str]], wrap: int = 70) -> Path:
    """Documents as wrapped paragraphs separated by blank lines (the input format of `segment`)."""
    blocks = []
    for doc in docs:
        text, lines, line = " ".join(doc), [], ""
        for word in text.split():
            if line and len(line) + 1 + len(word) > wrap:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
        blocks.append("\n".join(lines))
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path
