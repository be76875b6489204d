"""SearchQA-v0's knowledge base: a synthetic world of people, cities and companies, one document per
entity, and two-hop questions over it, all generated from a fixed seed (the same on every machine).

Every fact is stated in exactly one document: a person's document gives their birth city and
employer, a city's its country and river, a company's its headquarters city and founding year. A
question names one entity and asks for an attribute of the entity one of its facts points to (the
*bridge*), so the answer needs two lookups: the named entity's document, then the bridge's. Names
are made of random syllables, so no model knows them beforehand.

Retrieval is BM25 (Okapi, ``rank_bm25``) over the documents' lower-cased word tokens; ties break by
document id, so a query always returns the same ranking.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import asdict, dataclass

from envs.splits import split_of

SEED = 20260203
N_PEOPLE, N_CITIES, N_COMPANIES, N_COUNTRIES, N_RIVERS = 120, 40, 40, 12, 20
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ren",
    "tas",
    "vel",
    "dor",
    "quin",
    "sa",
    "bri",
    "tol",
    "mar",
    "zen",
    "osk",
    "fa",
    "lun",
    "pe",
    "gar",
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Doc:
    doc_id: int
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """A two-hop question: ``evidence`` are the ids of the two documents that answer it, in order."""

    task_id: str
    question: str
    answer: str
    entity: str  # the entity the question names (first hop)
    bridge: str  # the entity its document points to (second hop)
    evidence: tuple[int, int]

    def to_dict(self) -> dict:
        return {**asdict(self), "evidence": list(self.evidence)}


@dataclass(frozen=True)
class KnowledgeBase:
    docs: tuple[Doc, ...]
    questions: tuple[Question, ...]

    @functools.cached_property
    def by_title(self) -> dict[str, Doc]:
        return {d.title: d for d in self.docs}

    @functools.cached_property
    def by_task(self) -> dict[str, Question]:
        return {q.task_id: q for q in self.questions}

    def split(self, name: str) -> tuple[Question, ...]:
        return tuple(q for q in self.questions if split_of(q.task_id) == name)

    @functools.cached_property
    def _bm25(self):
        from rank_bm25 import BM25Okapi

        return BM25Okapi([tokens(f"{d.title} {d.text}") for d in self.docs])

    def search(self, query: str, k: int) -> list[Doc]:
        """The ``k`` best documents for ``query`` by BM25 (ties: lower id first); none when no word matches."""
        words = tokens(query)
        scores = self._bm25.get_scores(words) if words else [0.0] * len(self.docs)
        ranked = sorted(range(len(self.docs)), key=lambda i: (-float(scores[i]), i))
        return [self.docs[i] for i in ranked[:k] if float(scores[i]) > 0.0]


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def normalize(text: str) -> str:
    """Exact-match normalization (SQuAD's): lower case, no punctuation, no articles, single spaces."""
    text = re.sub(r"[^\w\s]", " ", text.lower())
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def _names(rng: random.Random, n: int, parts: int, suffix: str = "", taken: set[str] | None = None) -> list[str]:
    taken = taken if taken is not None else set()
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize() + suffix
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


@functools.cache
def knowledge_base() -> KnowledgeBase:
    """The knowledge base (built once per process from ``SEED``)."""
    rng = random.Random(SEED)
    taken: set[str] = set()
    countries = _names(rng, N_COUNTRIES, 3, "ia", taken)
    rivers = _names(rng, N_RIVERS, 2, " River", taken)
    cities = _names(rng, N_CITIES, 3, "", taken)
    companies = _names(rng, N_COMPANIES, 2, " Works", taken)
    people = [
        f"{a} {b}"
        for a, b in zip(_names(rng, N_PEOPLE, 2, "", taken), _names(rng, N_PEOPLE, 2, "", taken), strict=True)
    ]
    city_of = {c: (rng.choice(countries), rng.choice(rivers)) for c in cities}
    company_of = {c: (rng.choice(cities), rng.randrange(1850, 2020)) for c in companies}
    person_of = {p: (rng.choice(cities), rng.choice(companies)) for p in people}
    texts = {}
    for p, (born, employer) in person_of.items():
        texts[p] = f"{p} is an engineer. {p} was born in {born}. {p} is employed by {employer}."
    for c, (country, river) in city_of.items():
        texts[c] = f"{c} is a city in {country}. The {river} flows through {c}."
    for c, (hq, year) in company_of.items():
        texts[c] = f"{c} is a company founded in {year}. {c} has its headquarters in {hq}."
    docs = tuple(Doc(i, title, text) for i, (title, text) in enumerate(texts.items()))
    ids = {d.title: d.doc_id for d in docs}
    questions = []
    for p, (born, employer) in person_of.items():
        questions.append((f"In which country was {p} born?", city_of[born][0], p, born))
        questions.append((f"Which river flows through the city where {p} was born?", city_of[born][1], p, born))
        questions.append(
            (f"In which city does the employer of {p} have its headquarters?", company_of[employer][0], p, employer)
        )
        questions.append((f"In which year was the employer of {p} founded?", str(company_of[employer][1]), p, employer))
    for c, (hq, _) in company_of.items():
        questions.append((f"In which country does {c} have its headquarters?", city_of[hq][0], c, hq))
    return KnowledgeBase(
        docs,
        tuple(Question(f"q{i:04d}", q, a, e, b, (ids[e], ids[b])) for i, (q, a, e, b) in enumerate(questions)),
    )
