"""Verifies a completion of a generated problem (formats in ``workbench.testbeds.rlvr.problems``).

The completion is the text before the end-of-sequence token. Trailing whitespace is ignored.
Without a scratchpad the whole completion must be the answer; with one, its last line must be
``#`` + answer and no other ``#`` may appear (so two answers are malformed). The worked lines are
not graded.

- add, sub, mul: the answer must be a canonical integer (``-?(0|[1-9][0-9]*)``, not ``-0``);
  ``0522``, ``+522``, ``5 22`` are malformed. Correct when equal to ``problem.answer``.
- countdown: the answer must be an expression of non-negative integer literals (no leading
  zeros), ``+ - * /`` and balanced parentheses, no unary minus, no spaces, at most
  ``MAX_EXPRESSION_CHARS`` characters; it is parsed by recursive descent, never ``eval``.
  Correct when its literals are exactly ``problem.numbers`` as a multiset and its exact
  ``Fraction`` value equals the target; division by zero is wrong.

Well-formed means ``extract_answer`` returns text; a well-formed wrong answer earns
``format_reward``.

``rule="marked"`` (the ``few-shot`` and ``chat`` prompt templates, ``prompting``): the graded
text is the one after the completion's last ``####`` up to the end of that line
(``prompting.marked_answer``), checked as above as a completion without a scratchpad; no
``####`` is malformed.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction

from workbench.testbeds.rlvr.problems import KINDS, Problem
from workbench.testbeds.rlvr.prompting import marked_answer

MAX_EXPRESSION_CHARS = 128
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_TOKEN = re.compile(r"[0-9]+|[-+*/()]")


def extract_answer(problem: Problem, completion: str, rule: str = "whole") -> str | None:
    """The final answer text of ``completion``, or None when it is malformed; ``rule``
    ``whole`` (the completion is the answer) or ``marked`` (after the last ``####``)."""
    if problem.kind not in KINDS:
        raise ValueError(f"unknown problem kind {problem.kind!r}; choose one of {KINDS}")
    if rule not in ("whole", "marked"):
        raise ValueError(f"unknown answer rule {rule!r}; choose 'whole' or 'marked'")
    text = completion.rstrip()
    if rule == "marked":
        text = marked_answer(completion)
        if text is None:
            return None
    elif problem.scratchpad:
        worked, _, text = text.rpartition("\n")
        if not text.startswith("#") or "#" in worked:
            return None
        text = text[1:]
    if problem.kind == "countdown":
        return text if _parse(text) is not None else None
    return text if _INTEGER.fullmatch(text) and text != "-0" else None


def is_correct(problem: Problem, completion: str, rule: str = "whole") -> bool:
    """Whether ``completion`` is well-formed and its answer verifies (``rule``: as
    ``extract_answer``)."""
    answer = extract_answer(problem, completion, rule)
    if answer is None:
        return False
    if problem.kind != "countdown":
        return answer == problem.answer
    tree = _parse(answer)
    if Counter(_literals(tree)) != Counter(problem.numbers):
        return False
    try:
        return _evaluate(tree) == int(problem.answer)
    except ZeroDivisionError:
        return False


def reward(problem: Problem, completion: str, format_reward: float = 0.0,
           rule: str = "whole") -> float:
    """1.0 if verified, ``format_reward`` if well-formed but wrong, else 0.0."""
    if not 0.0 <= format_reward <= 1.0:
        raise ValueError(f"format_reward must be in [0, 1], got {format_reward}")
    if is_correct(problem, completion, rule):
        return 1.0
    return format_reward if extract_answer(problem, completion, rule) is not None else 0.0


def _parse(text: str):
    """Expression tree (an int, or (op, left, right)) of ``text``, or None when malformed.

    Grammar: expr = term (('+' | '-') term)*; term = factor (('*' | '/') factor)*;
    factor = integer | '(' expr ')'.
    """
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        return None
    tokens = _TOKEN.findall(text)
    if "".join(tokens) != text or any(t[0] == "0" and len(t) > 1 for t in tokens):
        return None
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def binary(operators: str, operand):
        nonlocal position
        left = operand()
        while left is not None and peek() is not None and peek() in operators:
            op = tokens[position]
            position += 1
            right = operand()
            left = None if right is None else (op, left, right)
        return left

    def expr():
        return binary("+-", term)

    def term():
        return binary("*/", factor)

    def factor():
        nonlocal position
        token = peek()
        if token is None:
            return None
        position += 1
        if token.isdigit():
            return int(token)
        if token != "(":
            return None
        inner = expr()
        if inner is None or peek() != ")":
            return None
        position += 1
        return inner

    tree = expr()
    return tree if tree is not None and position == len(tokens) else None


def _literals(tree) -> list[int]:
    if isinstance(tree, int):
        return [tree]
    return _literals(tree[1]) + _literals(tree[2])


def _evaluate(tree) -> Fraction:
    if isinstance(tree, int):
        return Fraction(tree)
    op, left, right = tree
    x, y = _evaluate(left), _evaluate(right)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    return x / y
