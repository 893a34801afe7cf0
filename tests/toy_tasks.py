"""Tiny, learnable task data sets in the real file formats, generated from our own word lists."""

from __future__ import annotations

import json
import random
from pathlib import Path

POSITIVE = ["wonderful", "great", "lovely", "superb", "delightful", "brilliant"]
NEGATIVE = ["awful", "terrible", "dreadful", "bad", "poor", "dismal"]
NOUNS = ["film", "meal", "concert", "hotel", "book", "game", "trip", "show", "garden", "lecture"]
NAMES = ["Ana", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena"]
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Dakar", "Perth", "Riga", "Cusco", "Tunis", "Sapporo"]
JOBS = ["baker", "pilot", "nurse", "welder", "teacher", "farmer", "chemist", "tailor"]


def sentiment_rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        rows.append((f"the {rng.choice(NOUNS)} was {rng.choice(POSITIVE if label else NEGATIVE)} .", str(label)))
    return rows


def write_sst2(root: Path, n_train: int = 96, n_dev: int = 40) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train.tsv", n_train, 1), ("dev.tsv", n_dev, 2)):
        (root / name).write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in sentiment_rows(n, seed)))
    (root / "test.tsv").write_text("index\tsentence\n" + "".join(
        f"{i}\t{s}\n" for i, (s, _) in enumerate(sentiment_rows(8, 3))))
    return root


def write_stsb(root: Path, n_train: int = 120, n_dev: int = 40) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    for name, n, seed in (("train.tsv", n_train, 1), ("dev.tsv", n_dev, 2)):
        rng = random.Random(seed)
        lines = []
        for i in range(n):
            a = f"{rng.choice(NAMES)} cooked a {rng.choice(NOUNS)} in {rng.choice(CITIES)}"
            kind = rng.randint(0, 2)
            if kind == 0:
                b, score = a, 5.0
            elif kind == 1:
                b, score = a.replace("cooked", "made"), 3.8
            else:
                b, score = f"the {rng.choice(JOBS)} slept late on {rng.choice(['monday', 'friday'])}", 0.2
            lines.append(f"{i}\tmain-toy\ttoy\t2026\t{i}\tnone\tnone\t{a}\t{b}\t{score}\n")
        (root / name).write_text(header + "".join(lines))
    return root


def squad_dataset(n: int, seed: int, version_2: bool = False) -> dict:
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        name, city, job = rng.choice(NAMES), rng.choice(CITIES), rng.choice(JOBS)
        context = f"{name} lives in {city} and works as a {job} near the old harbour."
        qas = [
            {"id": f"q{i}a", "question": f"Where does {name} live?",
             "answers": [{"text": city, "answer_start": context.index(city)}]},
            {"id": f"q{i}b", "question": f"What is the job of {name}?",
             "answers": [{"text": job, "answer_start": context.index(job)}]},
        ]
        if version_2:
            for qa in qas:
                qa["is_impossible"] = False
            qas.append({"id": f"q{i}c", "question": f"How old is {name}?", "answers": [], "is_impossible": True,
                        "plausible_answers": []})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "v2.0" if version_2 else "1.1", "data": [{"title": "toy", "paragraphs": paragraphs}]}


def write_squad(root: Path, n_train: int = 64, n_dev: int = 16, version_2: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    suffix = "v2.0" if version_2 else "v1.1"
    for name, n, seed in ((f"train-{suffix}.json", n_train, 1), (f"dev-{suffix}.json", n_dev, 2)):
        (root / name).write_text(json.dumps(squad_dataset(n, seed, version_2)))
    return root


def write_ner(root: Path, n_train: int = 80, n_dev: int = 30) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train.txt", n_train, 1), ("dev.txt", n_dev, 2)):
        rng = random.Random(seed)
        lines = ["-DOCSTART- -X- -X- O", ""]
        for _ in range(n):
            # IOB1 as in CoNLL-2003: I- throughout; two-word names give B-PER I-PER after conversion.
            guest = [(rng.choice(NAMES), "I-PER"), (rng.choice(["Silva", "Okafor", "Novak"]), "I-PER")]
            words = [(rng.choice(NAMES), "I-PER"), ("visited", "O"), (rng.choice(CITIES), "I-LOC"),
                     ("with", "O"), *guest[:rng.randint(1, 2)], (".", "O")]
            lines += [f"{w} NN O {t}" for w, t in words] + [""]
        (root / name).write_text("\n".join(lines) + "\n")
    return root
