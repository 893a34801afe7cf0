"""A small SQuAD v1.1 data set of our own: templated paragraphs about invented people and companies.

Every name (people, cities, companies) is made up from syllables, so no third-party text is involved
and no answer can be known from pretraining. A paragraph describes one or two people and a company,
each with several facts (city, job, birth year, favourite food, employer; a company's founder, year
founded, staff, headquarters, products), written with one of several phrasings per fact and partly
through pronouns. Every paragraph holds distractors of each answer type (a second person's city and
year, the company's own city and year, a passing remark about another city), so the answer is never
the only entity of its kind. Questions paraphrase the facts with several templates each (often with
other words than the paragraph's), answers are exact character spans of the context. Contexts run
from about 60 to 150 word pieces, so at 128-token windows some are split into several windows.

Deterministic from the seed: train and dev come from different streams (dev has other names).

    python -m evaluation.squad_synthetic --out-dir data/squad-synthetic --train-questions 3000 --dev-questions 400
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable
from pathlib import Path

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "tr", "sh",
          "gr", "st", "pl", "h", "j"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou", "ei"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "th", "k", "nd"]
CITY_ENDINGS = ["port", "ford", "ville", "burg", "haven", "mouth", "field", " Falls", " Harbor", "stad"]
COMPANY_ENDINGS = ["Labs", "Works", "Systems", "Industries", "Foods", "Motors", "Textiles", "Analytics",
                   "Robotics", "Trading"]
JOBS = ["baker", "pilot", "nurse", "welder", "teacher", "farmer", "chemist", "tailor", "carpenter", "lawyer",
        "architect", "plumber", "librarian", "dentist", "journalist", "gardener", "electrician", "pharmacist",
        "surveyor", "translator"]
FOODS = ["lentil soup", "pancakes", "grilled trout", "mushroom risotto", "apple pie", "dumplings",
         "roast chicken", "fried rice", "goat cheese", "plum cake", "bean stew", "pickled herring",
         "lemon tart", "potato salad", "spiced lamb", "tomato curry"]
PRODUCTS = ["bicycle frames", "solar panels", "wool blankets", "kitchen knives", "garden tools",
            "rain jackets", "water pumps", "ceramic tiles", "office chairs", "wind turbines", "fishing nets",
            "paper lamps", "hiking boots", "electric kettles"]
WEATHER = ["rainy", "windy", "mild", "foggy", "cold", "sunny"]
SEASONS = ["spring", "summer", "autumn", "winter"]
PRONOUNS = {"she": ("she", "her", "She", "Her"), "he": ("he", "his", "He", "His")}


def _syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def _word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    return "".join(_syllable(rng) for _ in range(rng.randint(*syllables))).capitalize()


class Names:
    """Fresh invented names; never the same one twice within a paragraph."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def _fresh(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if name not in self.used and name.lower() not in (w.lower() for w in self.used):
                self.used.add(name)
                return name

    def person(self) -> str:
        return self._fresh(lambda: f"{_word(self.rng, (1, 2))} {_word(self.rng)}")

    def city(self) -> str:
        return self._fresh(lambda: _word(self.rng, (1, 2)) + self.rng.choice(CITY_ENDINGS))

    def company(self) -> str:
        return self._fresh(lambda: f"{_word(self.rng, (1, 2))} {self.rng.choice(COMPANY_ENDINGS)}")


def _year(rng: random.Random, low: int, high: int, taken: set[str]) -> str:
    while True:
        year = str(rng.randint(low, high))
        if year not in taken:
            taken.add(year)
            return year


def _staff(rng: random.Random) -> str:
    n = rng.choice([rng.randint(12, 95), rng.randint(100, 990), rng.randint(1000, 9000)])
    return f"{n:,}"


# Fact phrasings: {s} is the subject as first mentioned (a name) or a pronoun, {S} the same capitalised,
# {P} the possessive ("Her", "His", or "Name's"), {o} the object ("her", "him" or the name), {v} the value
# (the answer), {a} its indefinite article. One fact per sentence.
PERSON_FACTS: dict[str, list[str]] = {
    "city": ["{S} lives in {v}.", "{S} has made a home in {v}.", "These days {s} lives in {v}.",
             "{S} rents a small flat in {v}.", "For the past few years {s} has lived in {v}."],
    "job": ["{S} works as {a} {v}.", "{S} is {a} {v} by trade.", "By profession {s} is {a} {v}.",
            "{S} earns a living as {a} {v}.", "{S} trained as {a} {v} and still works as one."],
    "born": ["{S} was born in {v}.", "{S} came into the world in {v}.", "{P} birth year is {v}."],
    "food": ["{P} favourite food is {v}.", "{S} likes {v} more than any other dish.",
             "Nothing pleases {o} more than a plate of {v}.", "Asked about food, {s} always names {v}."],
    "employer": ["{S} works for {v}.", "{S} is employed by {v}.", "{S} joined {v} a few years ago."],
}
PERSON_QUESTIONS: dict[str, list[str]] = {
    "city": ["Where does {n} live?", "In which city does {n} live?", "What city is {n} living in?",
             "Which town is home to {n}?", "Where is {n}'s home?"],
    "job": ["What is {n}'s job?", "What does {n} do for a living?", "What is the profession of {n}?",
            "What kind of work does {n} do?", "What is {n}'s occupation?"],
    "born": ["When was {n} born?", "In what year was {n} born?", "What is {n}'s year of birth?",
             "What year did {n} come into the world?"],
    "food": ["What is {n}'s favourite food?", "Which dish does {n} like best?", "What food does {n} love most?",
             "What does {n} prefer to eat?"],
    "employer": ["Which company does {n} work for?", "Who employs {n}?", "What is {n}'s employer?",
                 "At which firm does {n} work?"],
}
COMPANY_FACTS: dict[str, list[str]] = {
    "founded": ["{S} was founded in {v}.", "{S} dates back to {v}.", "{S} opened its doors in {v}.",
                "{P} first year of business was {v}."],
    "founder": ["{S} was started by {v}.", "{v} founded {s}.", "{S} owes its existence to {v}, who set it up.",
                "The founder of {s} is {v}."],
    "staff": ["{S} employs {v} people.", "{S} has a staff of {v}.", "There are {v} employees at {s}.",
              "{S} has {v} people on its payroll."],
    "hq": ["{S} is headquartered in {v}.", "{S} has its head office in {v}.", "{S} is based in {v}.",
           "The main offices of {s} are in {v}."],
    "product": ["{S} makes {v}.", "{S} is known for its {v}.", "{S} produces {v}.", "{P} best sellers are {v}."],
}
COMPANY_QUESTIONS: dict[str, list[str]] = {
    "founded": ["When was {n} founded?", "In which year was {n} established?", "What year did {n} start?",
                "When did {n} begin trading?"],
    "founder": ["Who founded {n}?", "Who started {n}?", "Who is the founder of {n}?", "Who set up {n}?"],
    "staff": ["How many people does {n} employ?", "How many employees does {n} have?",
              "How large is the staff of {n}?", "How many people work at {n}?"],
    "hq": ["Where is {n} based?", "Where are the headquarters of {n}?", "In which city is {n} headquartered?",
           "Where is {n}'s head office?"],
    "product": ["What does {n} make?", "What product is {n} known for?", "What does {n} produce?",
                "What goods does {n} sell?"],
}
FILLERS = ["The weather in {c} is often {w} in {t}.", "Many tourists visit {c} in {t}.",
           "A new bridge was built in {c} in {y}.", "The market in {c} is busiest in {t}."]


class Paragraph:
    """A context built sentence by sentence, remembering where each fact's value lies."""

    def __init__(self):
        self.text, self.answers = "", {}  # (entity, fact) -> (value, character start)

    def add(self, template: str, fields: dict[str, str], answer_key: tuple[str, str] | None = None) -> None:
        if self.text:
            self.text += " "
        for literal, name, _, _ in string.Formatter().parse(template):
            self.text += literal
            if name is None:
                continue
            if name == "v" and answer_key is not None:
                self.answers[answer_key] = (fields["v"], len(self.text))
            self.text += fields[name]


def _person_sentences(rng: random.Random, name: str, pronoun: str, facts: dict[str, str]) -> list[tuple]:
    """(template, fields, answer key) for each fact: the first names the person, the rest mostly use the pronoun."""
    subj, poss, Subj, Poss = PRONOUNS[pronoun]
    sentences = []
    for i, (fact, value) in enumerate(facts.items()):
        named = i == 0 or rng.random() < 0.35
        fields = {"s": name if named else subj, "S": name if named else Subj,
                  "P": f"{name}'s" if named else Poss, "o": name if named else ("her" if pronoun == "she" else "him"),
                  "v": value, "a": "an" if value[0] in "aeiou" else "a"}
        sentences.append((rng.choice(PERSON_FACTS[fact]), fields, (name, fact)))
    return sentences


def _company_sentences(rng: random.Random, name: str, facts: dict[str, str]) -> list[tuple]:
    sentences = []
    for i, (fact, value) in enumerate(facts.items()):
        named = i == 0 or rng.random() < 0.6
        fields = {"s": name if named else "the company", "S": name if named else "The company",
                  "P": f"{name}'s" if named else "Its", "v": value}
        sentences.append((rng.choice(COMPANY_FACTS[fact]), fields, (name, fact)))
    return sentences


def _pick(rng: random.Random, facts: list[str], low: int, high: int) -> list[str]:
    return rng.sample(facts, rng.randint(low, min(high, len(facts))))


def make_paragraph(rng: random.Random) -> dict:
    """One SQuAD paragraph: context and every question it can answer (the caller samples among them)."""
    names, years = Names(rng), set()
    company = names.company()
    people = [names.person() for _ in range(rng.choice([1, 2, 2]))]
    blocks = []
    for k, person in enumerate(people):
        kinds = _pick(rng, list(PERSON_FACTS), 3 if k == 0 else 2, 5)
        facts = {}
        for kind in kinds:
            facts[kind] = {"city": names.city(), "job": rng.choice(JOBS), "born": _year(rng, 1940, 2004, years),
                           "food": rng.choice(FOODS), "employer": company}[kind]
        blocks.append(_person_sentences(rng, person, rng.choice(list(PRONOUNS)), facts))
    kinds = _pick(rng, list(COMPANY_FACTS), 2, 5)
    facts = {}
    for kind in kinds:
        facts[kind] = {"founded": _year(rng, 1850, 2020, years), "founder": rng.choice(people + [names.person()]),
                       "staff": _staff(rng), "hq": names.city(), "product": rng.choice(PRODUCTS)}[kind]
    blocks.append(_company_sentences(rng, company, facts))
    rng.shuffle(blocks)
    paragraph = Paragraph()
    for block in blocks:
        for template, fields, key in block:
            paragraph.add(template, fields, key)
    if rng.random() < 0.7:  # a passing remark: one more city (and maybe year) that answers nothing
        paragraph.add(rng.choice(FILLERS), {"c": names.city(), "w": rng.choice(WEATHER), "t": rng.choice(SEASONS),
                                            "y": _year(rng, 1850, 2020, years)})
    qas = []
    for (entity, fact), (value, start) in paragraph.answers.items():
        templates = COMPANY_QUESTIONS.get(fact) if entity == company else PERSON_QUESTIONS[fact]
        qas.append({"question": rng.choice(templates).format(n=entity),
                    "answers": [{"text": value, "answer_start": start}]})
    return {"context": paragraph.text, "qas": qas}


def make_dataset(questions: int, seed: int, title: str = "synthetic") -> dict:
    """A SQuAD v1.1 dataset of about `questions` questions (up to 4 per paragraph), deterministic from `seed`."""
    rng = random.Random(seed)
    paragraphs, count = [], 0
    while count < questions:
        paragraph = make_paragraph(rng)
        qas = rng.sample(paragraph["qas"], min(len(paragraph["qas"]), 4, questions - count))
        for qa in qas:
            qa["id"] = f"{title}-{len(paragraphs)}-{count}"
            count += 1
        paragraphs.append({"context": paragraph["context"], "qas": qas})
    return {"version": "1.1", "data": [{"title": title, "paragraphs": paragraphs}]}


def write_squad(out_dir: str | Path, train_questions: int = 3000, dev_questions: int = 400, seed: int = 0) -> Path:
    """train-v1.1.json and dev-v1.1.json in `out_dir` (train and dev drawn from separate seeds)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, n, stream in (("train-v1.1.json", train_questions, 0), ("dev-v1.1.json", dev_questions, 1)):
        data = make_dataset(n, seed * 2 + stream, title=name.split("-")[0])
        (out / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m evaluation.squad_synthetic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, required=True, help="write train-v1.1.json and dev-v1.1.json here")
    p.add_argument("--train-questions", type=int, default=3000, help="training questions (default 3000)")
    p.add_argument("--dev-questions", type=int, default=400, help="dev questions (default 400)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    args = p.parse_args()
    out = write_squad(args.out_dir, args.train_questions, args.dev_questions, args.seed)
    print(f"wrote {out / 'train-v1.1.json'} and {out / 'dev-v1.1.json'}")


if __name__ == "__main__":
    main()
