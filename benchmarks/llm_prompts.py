"""Prompts for `llm_decode.py`, shaped like three public benchmarks, and a local tokenizer.

Nothing is downloaded: the prompts are written here (in the style of each benchmark, not
copied from it), and `token_ids` turns text into ids by hashing words into the vocabulary.

- mmlu: a multiple-choice question with four options and an answer cue (~100-200 words).
- gsm8k: a grade-school word problem (~50-100 words) ending in "Let's think step by step."
- humaneval: a Python function signature with a docstring and examples, to be completed.
"""

from __future__ import annotations

import re
import zlib

_MMLU_HEAD = "The following is a multiple choice question about {}. Choose the single best answer."

MMLU = [
    (
        _MMLU_HEAD.format("high school biology")
        + """

A student places a thin slice of red onion skin on a glass slide, adds a drop of concentrated
salt solution, and observes the cells under a light microscope. After a few minutes the
colored contents of each cell appear to shrink away from the rigid outer boundary, leaving a
clear gap between them. The student repeats the experiment with distilled water instead of salt
solution and sees no gap; the cells look full and firm. Which statement best explains the
difference between the two observations?

A. Salt molecules actively pump water into the vacuole, which then bursts.
B. Water leaves the cells by osmosis into the salt solution, so the membrane pulls away from
   the cell wall.
C. The cell wall dissolves in salt solution, letting the cytoplasm escape.
D. Distilled water denatures the proteins of the membrane, which stops all water movement.

Answer:"""
    ),
    (
        _MMLU_HEAD.format("macroeconomics")
        + """

Suppose a country's central bank buys a large quantity of government bonds from commercial
banks in the open market while the government keeps taxes and spending unchanged. Assume that
banks lend out most of their excess reserves, that prices adjust slowly in the short run, and
that the economy is currently operating below its full-employment level of output. Economists
in the finance ministry are asked to predict the most likely short-run effects of this policy on
interest rates and on total output before the next budget is prepared. Which of the following
is the most likely short-run outcome?

A. Interest rates rise and real output falls.
B. Interest rates fall and real output rises.
C. Interest rates and real output both remain unchanged because fiscal policy did not change.
D. Interest rates fall and real output falls because saving increases.

Answer:"""
    ),
    (
        _MMLU_HEAD.format("computer security")
        + """

A web application stores user passwords in its database. The developers currently compute a
single fast hash of each password with no additional input and compare hashes at login. An
auditor warns that if the database is ever leaked, attackers could recover many passwords
quickly using precomputed tables and inexpensive graphics hardware. The team wants a change
that makes offline guessing much slower for every account and prevents two users with the same
password from having identical stored values, without changing how users log in. Which change
best addresses both concerns?

A. Encrypt the hashes with a key stored in the same database table.
B. Use a slow, memory-hard password hashing function with a unique random salt per user.
C. Hash each password twice with the same fast function.
D. Require users to change their password every thirty days.

Answer:"""
    ),
    (
        _MMLU_HEAD.format("college physics")
        + """

A small block of mass m slides without friction down a curved ramp that starts at height h
above a horizontal floor. At the bottom of the ramp the block moves onto a rough horizontal
surface with a constant coefficient of kinetic friction mu, where it slides in a straight line
until it comes to rest. Air resistance is negligible, the block does not rotate, and the
acceleration due to gravity is g. A student wants an expression for the distance that the block
travels on the rough surface before stopping. Which expression gives that distance?

A. h / mu
B. mu * h
C. 2 * g * h / mu
D. h / (2 * mu)

Answer:"""
    ),
]

_STEP = "\n\nLet's think step by step."

GSM8K = [
    (
        "Question: A bakery sells muffins for $3 each and cookies for $1.50 each. On Monday it sold "
        "48 muffins and twice as many cookies as muffins. On Tuesday it sold 15 fewer muffins than "
        "on Monday and the same number of cookies as on Monday. The bakery spends $60 each day on "
        "ingredients. How much profit did the bakery make over the two days?" + _STEP
    ),
    (
        "Question: Maria is reading a 420-page book. She reads 25 pages every weekday and 40 pages "
        "on each day of the weekend. She starts reading on a Monday morning. After she has read for "
        "two full weeks, how many pages does she still have left to read, and on which day of the "
        "third week will she finish the book?" + _STEP
    ),
    (
        "Question: A water tank holds 1,200 liters when full. It is currently one quarter full. One "
        "pipe fills the tank at 30 liters per minute while a leak drains 6 liters per minute. After "
        "the tank becomes full, a worker uses 85 liters to wash a truck. How many minutes did it take "
        "to fill the tank, and how many liters are left after washing the truck?" + _STEP
    ),
    (
        "Question: A school is ordering buses for a field trip. There are 7 classes with 28 students "
        "each and 2 classes with 31 students each. Every class also brings 2 teachers. Each bus can "
        "carry 45 people. Tickets for the museum cost $6 per student and teachers enter for free. "
        "How many buses does the school need, and what is the total ticket cost?" + _STEP
    ),
]

HUMANEVAL = [
    '''from typing import List


def running_maximum(numbers: List[int]) -> List[int]:
    """Return a list where the i-th element is the largest value among numbers[0..i].

    An empty input gives an empty list.

    >>> running_maximum([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    >>> running_maximum([])
    []
    """
''',
    '''def is_balanced(text: str) -> bool:
    """Check whether every bracket in text is closed in the right order.

    Only the characters '(', ')', '[', ']', '{' and '}' matter; everything else is ignored.

    >>> is_balanced("a(b[c]{d}e)f")
    True
    >>> is_balanced("(]")
    False
    >>> is_balanced("((")
    False
    """
''',
    '''from typing import Dict, List


def group_by_length(words: List[str]) -> Dict[int, List[str]]:
    """Group words by their length, keeping the input order inside each group.

    >>> group_by_length(["hi", "to", "cat", "a"])
    {2: ['hi', 'to'], 3: ['cat'], 1: ['a']}
    >>> group_by_length([])
    {}
    """
''',
    '''def digits_to_words(n: int) -> str:
    """Spell each decimal digit of a non-negative integer n as an English word,
    separated by single spaces.

    >>> digits_to_words(305)
    'three zero five'
    >>> digits_to_words(0)
    'zero'
    """
''',
]

PROMPT_SETS = {"mmlu": MMLU, "gsm8k": GSM8K, "humaneval": HUMANEVAL}

_WORD = re.compile(r"\w+|[^\w\s]|\n")
_RESERVED = 16  # ids below this are never produced (special tokens of a real vocabulary)


def token_ids(text: str, vocab_size: int) -> list[int]:
    """Deterministic stand-in for a tokenizer: one id per word, punctuation mark or newline,
    the word's CRC-32 folded into [_RESERVED, vocab_size)."""
    span = vocab_size - _RESERVED
    return [_RESERVED + zlib.crc32(w.encode()) % span for w in _WORD.findall(text)]
