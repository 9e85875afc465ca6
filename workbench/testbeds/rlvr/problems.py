"""Generated problems with exact answers for RL with verifiable rewards.

A problem is a ``prompt`` the model continues, the canonical ``answer`` and a correct completion
``solution`` for the supervised warm-up. A completion is the text the model writes after the
prompt, up to (not including) the end-of-sequence token the tokenizer adds; trailing whitespace
is ignored, anything else after the answer makes it malformed (see ``checker``). Every character
of every prompt and solution is in ``ALPHABET``.

Formats (``scratchpad=False``: the completion is the answer alone)::

    add        "37+485="   -> "522"
    sub        "37-485="   -> "-448"        (operands >= 0; the answer may be negative)
    mul        "37*485="   -> "17945"
    countdown  "3,5,7:22=" -> "3*5+7"       (answer = "22", numbers = (3, 5, 7))

Answers are canonical integers: no leading zeros, no "+", no "-0". A countdown completion is an
expression over the given numbers with ``+ - * /`` and parentheses, no unary minus, no spaces,
that uses every given number exactly once (TinyZero's rule; a number given twice is used twice)
and evaluates exactly to the target, intermediate fractions allowed; division by zero is wrong.
``Problem.answer`` holds the target as text and ``Problem.numbers`` the given numbers.

With ``scratchpad=True`` the completion is worked lines, then a final line ``#`` + answer; ``#``
appears nowhere else. Every worked line is a true equation:

- add: one line per column, least significant first, ``x+y+carry=sum:running``, where
  ``running`` is the result digits so far (the new digit prepended); a final carry gets a column
  ``0+0+1=1:...``. ``"37+485="`` -> ``"7+5+0=12:2\\n3+8+1=12:22\\n0+4+1=5:522\\n#522"``.
- sub: first the comparison ``a<b``, ``a>b`` or ``a=b``; then the columns of
  larger-minus-smaller, ``x-y-borrow=d:running``, written ``1x-y-borrow=d`` when the column
  borrows; the answer line drops the running result's leading zeros and adds ``-`` when a<b.
  ``"37-485="`` -> ``"37<485\\n15-7-0=8:8\\n8-3-1=4:48\\n4-0-0=4:448\\n#-448"``.
- mul: one partial product per digit of the second operand, least significant first,
  ``a*(digit*10^i)=product``, then the running sums ``s+p=t``.
  ``"37*485="`` -> ``"37*5=185\\n37*80=2960\\n37*400=14800\\n185+2960=3145\\n3145+14800=17945``
  ``\\n#17945"``.
- countdown: the steps that build the target, ``x op y=v``, then ``#`` + the expression.
  ``"3,5,7:22="`` -> ``"3*5=15\\n15+7=22\\n#3*5+7"``.

Operands of ``d`` digits are uniform on [10^(d-1), 10^d - 1] ([0, 9] for d = 1), ``d`` uniform on
[digits_min, digits_max] for each operand independently. Countdown numbers are uniform on
[1, max_number] (repeats possible); the target comes from combining random pairs with random
operations whose results stay positive integers (Countdown's rule for the generator; the checker
accepts any expression); numbers and combination are redrawn until the target falls in
[target_min, target_max].
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ALPHABET: str = "0123456789+-*/=()<>:;,.# abcdefghijklmnopqrstuvwxyz\n"
KINDS = ("add", "sub", "mul", "countdown")
MAX_DIGITS = 12
MAX_COUNTDOWN_TRIES = 10_000
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True)
class Problem:
    """One problem: ``prompt`` + a completion is what the model sees and writes.

    ``answer`` is the canonical integer as text (countdown: the target). ``solution`` is a correct
    completion (no end-of-sequence marker). ``numbers`` are countdown's given numbers (empty for
    arithmetic). ``scratchpad`` says which completion format the checker expects.
    """

    kind: str
    prompt: str
    answer: str
    solution: str
    numbers: tuple[int, ...] = ()
    scratchpad: bool = False


@dataclass(frozen=True)
class Difficulty:
    """Difficulty knobs. Arithmetic: digits per operand in [digits_min, digits_max] (1..12).
    Countdown: ``n_numbers`` given numbers (2..6) in [1, max_number] (1..999), target in
    [target_min, target_max]. ``scratchpad`` picks the worked-steps format for every kind."""

    digits_min: int = 1
    digits_max: int = 3
    scratchpad: bool = False
    n_numbers: int = 3
    max_number: int = 25
    target_min: int = 1
    target_max: int = 100

    def __post_init__(self):
        for name in ("digits_min", "digits_max", "n_numbers", "max_number", "target_min",
                     "target_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"Difficulty.{name} must be an integer, got {value!r}")
        if not isinstance(self.scratchpad, bool):
            raise ValueError(f"Difficulty.scratchpad must be True or False, got "
                             f"{self.scratchpad!r}")
        if not 1 <= self.digits_min <= self.digits_max <= MAX_DIGITS:
            raise ValueError(f"need 1 <= digits_min <= digits_max <= {MAX_DIGITS}, got "
                             f"digits_min={self.digits_min}, digits_max={self.digits_max}")
        if not 2 <= self.n_numbers <= 6:
            raise ValueError(f"n_numbers must be in 2..6, got {self.n_numbers}")
        if not 1 <= self.max_number <= 999:
            raise ValueError(f"max_number must be in 1..999, got {self.max_number}")
        if not 1 <= self.target_min <= self.target_max:
            raise ValueError(f"need 1 <= target_min <= target_max, got "
                             f"target_min={self.target_min}, target_max={self.target_max}")


def generate(kind: str, n: int, seed: int, difficulty: Difficulty | None = None) -> list[Problem]:
    """``n`` problems of ``kind``, the same for the same arguments; a smaller ``n`` gives a prefix.
    Prompts may repeat when the problem space is small (``splits`` removes repeats)."""
    stream = _stream(kind, seed, difficulty or Difficulty())
    return [next(stream) for _ in range(n)]


def splits(kind: str, seed: int, n_train: int, n_eval: int,
           difficulty: Difficulty | None = None) -> tuple[list[Problem], list[Problem]]:
    """(train, eval): distinct prompts, no prompt in both. The eval set is the first ``n_eval``
    distinct prompts of the seed's stream, so it does not depend on ``n_train``."""
    if n_train < 0 or n_eval < 0:
        raise ValueError(f"n_train and n_eval must be >= 0, got {n_train}, {n_eval}")
    stream = _stream(kind, seed, difficulty or Difficulty())
    wanted = n_train + n_eval
    seen: set[str] = set()
    problems: list[Problem] = []
    misses = 0
    while len(problems) < wanted:
        problem = next(stream)
        if problem.prompt in seen:
            misses += 1
            if misses > 10 * wanted + 1000:
                raise ValueError(
                    f"found only {len(problems)} distinct {kind} prompts of the {wanted} asked "
                    f"for; ask for fewer or raise the difficulty (more digits or numbers)")
            continue
        seen.add(problem.prompt)
        problems.append(problem)
    return problems[n_eval:], problems[:n_eval]


def _stream(kind: str, seed: int, difficulty: Difficulty):
    if kind not in KINDS:
        raise ValueError(f"unknown problem kind {kind!r}; choose one of {', '.join(KINDS)}")
    rng = random.Random(f"rlvr:{kind}:{seed}")
    make = _countdown if kind == "countdown" else _arithmetic
    while True:
        yield make(kind, rng, difficulty)


def _operand(rng: random.Random, difficulty: Difficulty) -> int:
    digits = rng.randint(difficulty.digits_min, difficulty.digits_max)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _arithmetic(kind: str, rng: random.Random, difficulty: Difficulty) -> Problem:
    a, b = _operand(rng, difficulty), _operand(rng, difficulty)
    symbol, value, lines = {
        "add": ("+", a + b, _addition_lines),
        "sub": ("-", a - b, _subtraction_lines),
        "mul": ("*", a * b, _multiplication_lines),
    }[kind]
    answer = str(value)
    solution = "\n".join([*lines(a, b), "#" + answer]) if difficulty.scratchpad else answer
    return Problem(kind, f"{a}{symbol}{b}=", answer, solution, (), difficulty.scratchpad)


def _digits_reversed(a: int, b: int) -> list[tuple[int, int]]:
    xs, ys = str(a)[::-1], str(b)[::-1]
    width = max(len(xs), len(ys))
    return [(int(xs[i]) if i < len(xs) else 0, int(ys[i]) if i < len(ys) else 0)
            for i in range(width)]


def _addition_lines(a: int, b: int) -> list[str]:
    lines, running, carry = [], "", 0
    for x, y in _digits_reversed(a, b):
        total = x + y + carry
        running = str(total % 10) + running
        lines.append(f"{x}+{y}+{carry}={total}:{running}")
        carry = total // 10
    if carry:
        running = "1" + running
        lines.append(f"0+0+1=1:{running}")
    return lines


def _subtraction_lines(a: int, b: int) -> list[str]:
    relation = "<" if a < b else ">" if a > b else "="
    larger, smaller = max(a, b), min(a, b)
    lines, running, borrow = [f"{a}{relation}{b}"], "", 0
    for x, y in _digits_reversed(larger, smaller):
        digit = x - y - borrow
        borrow_out = digit < 0
        digit += 10 * borrow_out
        running = str(digit) + running
        lines.append(f"{'1' if borrow_out else ''}{x}-{y}-{borrow}={digit}:{running}")
        borrow = int(borrow_out)
    return lines


def _multiplication_lines(a: int, b: int) -> list[str]:
    multipliers = [int(d) * 10**i for i, d in enumerate(str(b)[::-1])]
    products = [a * m for m in multipliers]
    lines = [f"{a}*{m}={p}" for m, p in zip(multipliers, products, strict=True)]
    total = products[0]
    for product in products[1:]:
        lines.append(f"{total}+{product}={total + product}")
        total += product
    return lines


def _countdown(kind: str, rng: random.Random, difficulty: Difficulty) -> Problem:
    for _ in range(MAX_COUNTDOWN_TRIES):
        numbers = tuple(rng.randint(1, difficulty.max_number)
                        for _ in range(difficulty.n_numbers))
        target, expression, steps = _random_combination(rng, numbers)
        if difficulty.target_min <= target <= difficulty.target_max:
            answer = str(target)
            prompt = ",".join(map(str, numbers)) + f":{answer}="
            solution = ("\n".join([*steps, "#" + expression]) if difficulty.scratchpad
                        else expression)
            return Problem(kind, prompt, answer, solution, numbers, difficulty.scratchpad)
    raise ValueError(
        f"no countdown target in [{difficulty.target_min}, {difficulty.target_max}] from "
        f"{difficulty.n_numbers} numbers in [1, {difficulty.max_number}] after "
        f"{MAX_COUNTDOWN_TRIES} tries; widen the target range or change max_number")


def _random_combination(rng: random.Random, numbers: tuple[int, ...]):
    """Combine two random items of the pool, with an operation whose result is a positive
    integer, until one is left: (value, expression with minimal parentheses, step lines)."""
    pool = [(n, str(n), 3) for n in numbers]  # (value, text, precedence of its top operator)
    steps = []
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        (x, x_text, x_prec), (y, y_text, y_prec) = pool[i], pool[j]
        ops = ["+", "*"] + ["-"] * (x > y) + ["/"] * (x % y == 0)
        op = rng.choice(ops)
        value = {"+": x + y, "-": x - y, "*": x * y, "/": x // y}[op]
        prec = PRECEDENCE[op]
        left = f"({x_text})" if x_prec < prec else x_text
        right_needs = y_prec < prec or (y_prec == prec and op in "-/")
        right = f"({y_text})" if right_needs else y_text
        steps.append(f"{x}{op}{y}={value}")
        pool = [item for k, item in enumerate(pool) if k not in (i, j)]
        pool.append((value, left + op + right, prec))
    value, text, _ = pool[0]
    return value, text, steps
