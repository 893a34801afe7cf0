"""Writes the bundled demo data (run once: `python -m bert_core.demo_data.generate`; the files are committed).

Everything comes from the word lists below and a seeded RNG, so the data is ours and reproducible:
- corpus/*.txt: raw documents (wrapped paragraphs), separated by blank lines: segment's input format.
- sst2/{train,dev,test}.tsv: SST-2 format (sentence<TAB>label; test: index<TAB>sentence).
- squad/{train,dev}-v1.1.json: SQuAD v1.1 format.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

ROOT = Path(__file__).parent

PEOPLE = ["Marta Ilves", "Tomas Brandt", "Dr. Osei", "Mrs. Kovac", "Prof. Lindahl", "Ines Duarte", "Mr. Hale",
          "Yusuf Demir", "Ottilie Grant", "Ravi Menon"]
GROUPS = ["the town council", "a group of students", "the ferry company", "the village choir",
          "the county museum", "a team of surveyors", "the night watch", "the bakery on the corner"]
ACTIONS = ["restored", "mapped", "sketched", "argued about", "moved", "inspected", "rebuilt", "decorated",
           "counted", "measured", "cleaned", "catalogued"]
THINGS = ["the stone bridge", "an old windmill", "the harbour wall", "a row of lanterns", "the east tower",
          "the public orchard", "twelve fishing boats", "the railway signal box", "a collection of maps",
          "the flooded quarry"]
WHEN = ["in the spring", "after the harvest", "before the first snow", "during a long night",
        "on a windy morning", "at the end of the season", "for the third year running", "early on Sunday"]
WHY = ["because the river had risen", "so that visitors could find their way", "although nobody had asked",
       "while the rain kept falling", "since the old records were lost", "as the mayor had promised"]

POSITIVE = ["charming", "excellent", "warm", "gripping", "splendid", "moving", "clever", "joyful"]
NEGATIVE = ["tedious", "clumsy", "dull", "grim", "weak", "messy", "bland", "sloppy"]
SUBJECTS = ["story", "soundtrack", "dinner", "museum tour", "performance", "novel", "match", "festival",
            "workshop", "ferry ride"]

GIVEN = ["Amira", "Bjorn", "Celia", "Dario", "Esme", "Felix", "Greta", "Hugo", "Ilka", "Joao", "Keiko", "Luca"]
TOWNS = ["Bergen", "Porto", "Valdivia", "Tartu", "Matera", "Ghent", "Nara", "Tromso", "Aarhus", "Cordoba"]
TRADES = ["potter", "surveyor", "librarian", "carpenter", "glazier", "ferryman", "beekeeper", "printer"]


def _sentence(rng: random.Random) -> str:
    who = rng.choice(PEOPLE) if rng.random() < 0.4 else rng.choice(GROUPS)
    text = f"{who} {rng.choice(ACTIONS)} {rng.choice(THINGS)}"
    if rng.random() < 0.6:
        text += f" {rng.choice(WHEN)}"
    if rng.random() < 0.35:
        text += f", {rng.choice(WHY)}"
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "!", "?"])


def corpus_documents(n_docs: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = " ".join(_sentence(rng) for _ in range(rng.randint(3, 9)))
        docs.append(textwrap.fill(sentences, width=78))
    return docs


def sentiment_rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        word = rng.choice(POSITIVE if label else NEGATIVE)
        rows.append((f"the {rng.choice(SUBJECTS)} was {word} .", str(label)))
    return rows


def squad_data(n: int, seed: int) -> dict:
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        name, town, trade = rng.choice(GIVEN), rng.choice(TOWNS), rng.choice(TRADES)
        context = f"{name} grew up in {town} and now works as a {trade} by the river."
        qas = [
            {"id": f"d{seed}q{i}a", "question": f"Where did {name} grow up?",
             "answers": [{"text": town, "answer_start": context.index(town)}]},
            {"id": f"d{seed}q{i}b", "question": f"What does {name} work as?",
             "answers": [{"text": trade, "answer_start": context.index(trade)}]},
        ]
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "1.1", "data": [{"title": "demo", "paragraphs": paragraphs}]}


def write_all(root: Path = ROOT) -> None:
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("part-a.txt", 120, 11), ("part-b.txt", 105, 12)):
        (corpus / name).write_text("\n\n".join(corpus_documents(n, seed)) + "\n", encoding="utf-8")
    sst2 = root / "sst2"
    sst2.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train.tsv", 96, 21), ("dev.tsv", 40, 22)):
        (sst2 / name).write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in sentiment_rows(n, seed)))
    (sst2 / "test.tsv").write_text("index\tsentence\n" + "".join(
        f"{i}\t{s}\n" for i, (s, _) in enumerate(sentiment_rows(8, 23))))
    squad = root / "squad"
    squad.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train-v1.1.json", 48, 31), ("dev-v1.1.json", 12, 32)):
        (squad / name).write_text(json.dumps(squad_data(n, seed), indent=1) + "\n")


if __name__ == "__main__":
    write_all()
