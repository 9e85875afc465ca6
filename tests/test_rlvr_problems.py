"""Generated RLVR problems and their checker (workbench.testbeds.rlvr): every generated solution
verifies, the answer matches values computed here from the prompt alone, the checker accepts
exactly the right answers (countdown expressions are compared with an evaluator built on
Python's ``ast``) and rejects malformed output; generation is seeded, splits are disjoint,
difficulty holds."""

import ast
import operator
import re
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.testbeds.rlvr.checker import MAX_EXPRESSION_CHARS, extract_answer, is_correct, reward
from workbench.testbeds.rlvr.problems import ALPHABET, KINDS, Difficulty, Problem, generate, splits

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ARITHMETIC = re.compile(r"(\d+)([-+*])(\d+)=")
COUNTDOWN = re.compile(r"(\d+(?:,\d+)*):(\d+)=")
ARITHMETIC_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
STEP_OPS = {**ARITHMETIC_OPS, "/": operator.truediv}

digit_ranges = st.tuples(st.integers(1, 12), st.integers(1, 12)).map(sorted)
difficulties = st.builds(
    lambda digits, scratchpad, n_numbers, max_number, target_max: Difficulty(
        digits_min=digits[0], digits_max=digits[1], scratchpad=scratchpad, n_numbers=n_numbers,
        max_number=max_number, target_max=target_max),
    digit_ranges, st.booleans(), st.integers(2, 5), st.integers(1, 60), st.integers(20, 500))
problem_sets = st.builds(
    lambda kind, seed, difficulty: generate(kind, 5, seed, difficulty),
    st.sampled_from(KINDS), st.integers(0, 2**32), difficulties)


def ast_value(text):
    """(exact value or None on division by zero, literals) of an expression, read with Python's
    own parser (ast, no eval) and evaluated in fractions."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}
    literals = []

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            literals.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    try:
        return value(ast.parse(text, mode="eval").body), literals
    except ZeroDivisionError:
        return None, literals


def oracle(numbers, target, text):
    """Countdown verdict: ``text`` uses exactly ``numbers`` and equals ``target``."""
    value, literals = ast_value(text)
    return Counter(literals) == Counter(numbers) and value == target


def final_answer(problem):
    return problem.solution.rpartition("#")[2] if problem.scratchpad else problem.solution


def with_final_answer(problem, text):
    """The problem's solution with its final answer replaced by ``text``."""
    if problem.scratchpad:
        return problem.solution.rpartition("#")[0] + "#" + text
    return text


@FAST
@given(problem_sets)
def test_own_solution_is_accepted(problems):
    for problem in problems:
        assert is_correct(problem, problem.solution)
        assert is_correct(problem, problem.solution + " \n ")
        assert reward(problem, problem.solution, format_reward=0.1) == 1.0
        if problem.kind != "countdown":
            assert extract_answer(problem, problem.solution) == problem.answer


@FAST
@given(problem_sets)
def test_answer_equals_value_computed_from_the_prompt(problems):
    for problem in problems:
        if problem.kind == "countdown":
            match = COUNTDOWN.fullmatch(problem.prompt)
            numbers = tuple(int(n) for n in match[1].split(","))
            assert numbers == problem.numbers
            assert match[2] == problem.answer
            assert oracle(numbers, int(match[2]), final_answer(problem))
        else:
            match = ARITHMETIC.fullmatch(problem.prompt)
            assert match[2] == {"add": "+", "sub": "-", "mul": "*"}[problem.kind]
            value = ARITHMETIC_OPS[match[2]](int(match[1]), int(match[3]))
            assert problem.answer == str(value) == final_answer(problem)


@FAST
@given(problem_sets)
def test_any_single_digit_changed_is_rejected(problems):
    for problem in problems:
        text = final_answer(problem)
        for i, char in enumerate(text):
            if char.isdigit():
                for digit in "0123456789".replace(char, ""):
                    changed = with_final_answer(problem, text[:i] + digit + text[i + 1:])
                    assert not is_correct(problem, changed), changed


@FAST
@given(problem_sets, st.data())
def test_deleting_or_inserting_a_character_is_rejected(problems, data):
    for problem in problems:
        text = final_answer(problem)
        i = data.draw(st.integers(0, len(text) - 1))
        assert not is_correct(problem, with_final_answer(problem, text[:i] + text[i + 1:]))
        j = data.draw(st.integers(0, len(text) - 1))  # not at the end: trailing space is fine
        char = data.draw(st.sampled_from(ALPHABET))
        inserted = with_final_answer(problem, text[:j] + char + text[j:])
        assert not is_correct(problem, inserted), inserted


@FAST
@given(problem_sets)
def test_worked_lines_are_true_equations(problems):
    for problem in problems:
        if not problem.scratchpad:
            continue
        *worked, last = problem.solution.split("\n")
        assert last.startswith("#") and "#" not in "\n".join(worked)
        if problem.kind == "sub":
            a, b = ARITHMETIC.fullmatch(problem.prompt).group(1, 3)
            relation = "<" if int(a) < int(b) else ">" if int(a) > int(b) else "="
            assert worked.pop(0) == f"{a}{relation}{b}"
        for line in worked:
            equation, _, running = line.partition(":")
            left, right = equation.split("=")
            terms = re.findall(r"[-+*/]?\d+", left)
            value = Fraction(int(terms[0]))
            for term in terms[1:]:
                value = STEP_OPS[term[0]](value, Fraction(int(term[1:])))
            assert value == int(right), line
        if problem.kind in ("add", "sub"):
            running = worked[-1].partition(":")[2]
            assert problem.answer.lstrip("-") == (running.lstrip("0") or "0")


@FAST
@given(problem_sets)
def test_every_character_is_in_the_alphabet(problems):
    for problem in problems:
        assert set(problem.prompt + problem.solution) <= set(ALPHABET)


@FAST
@given(st.sampled_from(KINDS), difficulties)
def test_difficulty_is_respected(kind, difficulty):
    for problem in generate(kind, 20, 7, difficulty):
        assert problem.scratchpad == difficulty.scratchpad
        if kind == "countdown":
            assert len(problem.numbers) == difficulty.n_numbers
            assert all(1 <= n <= difficulty.max_number for n in problem.numbers)
            assert difficulty.target_min <= int(problem.answer) <= difficulty.target_max
        else:
            a, _, b = ARITHMETIC.fullmatch(problem.prompt).groups()
            for operand in (a, b):
                assert difficulty.digits_min <= len(operand) <= difficulty.digits_max
                assert operand == str(int(operand))


@pytest.mark.parametrize("kind", KINDS)
def test_generation_is_deterministic_per_seed(kind):
    difficulty = Difficulty(digits_min=2, digits_max=6, scratchpad=True)
    first = generate(kind, 30, 11, difficulty)
    assert first == generate(kind, 30, 11, difficulty)
    assert first[:10] == generate(kind, 10, 11, difficulty)
    assert first != generate(kind, 30, 12, difficulty)
    direct = generate(kind, 30, 11, Difficulty(digits_min=2, digits_max=6))
    assert [p.prompt for p in direct] == [p.prompt for p in first]


@pytest.mark.parametrize("kind", KINDS)
def test_splits_are_disjoint_and_the_eval_set_is_fixed(kind):
    difficulty = Difficulty(digits_min=1, digits_max=2)
    train, held_out = splits(kind, 3, 200, 50, difficulty)
    assert len(train) == 200 and len(held_out) == 50
    train_prompts = {p.prompt for p in train}
    held_out_prompts = {p.prompt for p in held_out}
    assert len(train_prompts) == 200 and len(held_out_prompts) == 50
    assert not train_prompts & held_out_prompts
    assert splits(kind, 3, 10, 50, difficulty)[1] == held_out
    assert splits(kind, 3, 200, 50, difficulty) == (train, held_out)
    assert splits(kind, 4, 200, 50, difficulty)[1] != held_out


def test_splits_too_large_for_the_problem_space_raise():
    with pytest.raises(ValueError, match="distinct add prompts"):
        splits("add", 0, 90, 20, Difficulty(digits_min=1, digits_max=1))  # only 100 exist


@pytest.mark.parametrize("kwargs", [
    {"digits_min": 0}, {"digits_max": 13}, {"digits_min": 3, "digits_max": 2},
    {"n_numbers": 1}, {"n_numbers": 7}, {"max_number": 0}, {"target_min": 0},
    {"target_min": 9, "target_max": 8}, {"digits_max": 2.0}, {"scratchpad": 1},
])
def test_bad_difficulty_is_refused(kwargs):
    with pytest.raises(ValueError):
        Difficulty(**kwargs)


def test_unknown_kind_and_impossible_countdown_raise():
    with pytest.raises(ValueError, match="choose one of"):
        generate("div", 1, 0)
    with pytest.raises(ValueError, match="widen the target range"):
        generate("countdown", 1, 0, Difficulty(n_numbers=2, max_number=1, target_min=50))


ADD = Problem("add", "37+485=", "522", "522")
ADD_WORKED = Problem("add", "37+485=", "522", "7+5+0=12:2\n3+8+1=12:22\n0+4+1=5:522\n#522",
                     scratchpad=True)
SUB = Problem("sub", "37-485=", "-448", "-448")
ZERO = Problem("sub", "5-5=", "0", "0")
COUNT = Problem("countdown", "3,5,7:22=", "22", "3*5+7", (3, 5, 7))
COUNT_WORKED = Problem("countdown", "3,5,7:22=", "22", "3*5=15\n15+7=22\n#3*5+7", (3, 5, 7),
                       scratchpad=True)
REPEATED = Problem("countdown", "4,4,2:4=", "4", "4*2-4", (4, 4, 2))
BY_ZERO = Problem("countdown", "3,3,5:5=", "5", "5+3-3", (3, 3, 5))


@pytest.mark.parametrize("problem, completion", [
    (ADD, ""), (ADD, " "), (ADD, "\n"), (ADD, "522 523"), (ADD, "522\n523"), (ADD, "5 22"),
    (ADD, "0522"), (ADD, "+522"), (ADD, "522a"), (ADD, "abc"), (ADD, "522="), (ADD, " 522"),
    (ADD, "#522"), (ADD, "522."), (ADD, "(522)"), (ADD, "37+485"), (SUB, "-0448"), (SUB, "--448"),
    (ZERO, "-0"), (ZERO, "00"),
    (ADD_WORKED, "522"), (ADD_WORKED, "#522\n#522"), (ADD_WORKED, "#522 #522"),
    (ADD_WORKED, "#"), (ADD_WORKED, "7+5+0=12:2\n"), (ADD_WORKED, "#522\nx"),
    (ADD_WORKED, "x#522"), (ADD_WORKED, "#0522"),
    (COUNT, ""), (COUNT, "3*5+7 3*5+7"), (COUNT, "3*5+7\n3*5+7"), (COUNT, "(3*5+7"),
    (COUNT, "3*5+7)"), (COUNT, "3*(5+)7"), (COUNT, "()3*5+7"), (COUNT, "3 * 5 + 7"),
    (COUNT, "3*5+07"), (COUNT, "-3*5+7+6"), (COUNT, "3*5++7"), (COUNT, "3x5+7"), (COUNT, "3**5"),
    (COUNT, "3*5+7=22"), (COUNT, "+"), (COUNT, "(" * 5000 + "3" + ")" * 5000),
    (COUNT, "+".join(["3", "5", "7"] * 30)), (COUNT, "#3*5+7"),
    (COUNT_WORKED, "3*5+7"), (COUNT_WORKED, "#3*5+7\n#3*5+7"),
])
def test_malformed_output_is_rejected(problem, completion):
    assert extract_answer(problem, completion) is None
    assert not is_correct(problem, completion)
    assert reward(problem, completion, format_reward=0.1) == 0.0


@pytest.mark.parametrize("problem, completion", [
    (COUNT, "3*5+8"), (COUNT, "3*5+7+7"), (COUNT, "3*5"), (COUNT, "3*(5+7)"), (COUNT, "15+7"),
    (COUNT, "3*5+7+0"), (COUNT, "(7-7)*3+22"), (BY_ZERO, "5/(3-3)"), (BY_ZERO, "(3-3)/(3-3)*5"),
    (REPEATED, "4*2-2"), (REPEATED, "4+4-4"), (REPEATED, "4/2*4-4"), (ADD, "523"), (ADD, "-522"),
    (SUB, "448"), (ADD, "1" * 5000), (ADD_WORKED, "7+5+0=12:2\n#523"),
])
def test_well_formed_wrong_answers_earn_only_the_format_reward(problem, completion):
    assert extract_answer(problem, completion) is not None
    assert not is_correct(problem, completion)
    assert reward(problem, completion) == 0.0
    assert reward(problem, completion, format_reward=0.1) == 0.1


@pytest.mark.parametrize("problem, completion", [
    (COUNT, "7+3*5"), (COUNT, "(3*5)+(7)"), (COUNT, "5*3+7\n"), (COUNT_WORKED, "#7+5*3"),
    (COUNT_WORKED, "anything\n#(3)*5+7 "), (REPEATED, "4*2-4"), (REPEATED, "(4+4)/2"),
    (BY_ZERO, "5+3-3"), (BY_ZERO, "5*3/3"),
    (ADD, "522 \n"), (ADD_WORKED, "#522"), (ZERO, "0"), (SUB, "-448"),
])
def test_right_answers_are_accepted(problem, completion):
    assert is_correct(problem, completion), completion
    assert reward(problem, completion, format_reward=0.1) == 1.0


def test_intermediate_fractions_are_allowed():
    problem = Problem("countdown", "1,3,4,6:24=", "24", "", (1, 3, 4, 6))  # 6/(1-3/4) = 24
    assert is_correct(problem, "6/(1-3/4)")
    assert not is_correct(problem, "6/1-3/4")


def test_format_reward_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match="format_reward"):
        reward(ADD, "522", format_reward=1.5)


@st.composite
def countdown_attempts(draw):
    """(problem, expression text, oracle verdict): random trees over roughly the given numbers,
    with random parentheses, and a target that is often the expression's value."""
    numbers = draw(st.lists(st.integers(1, 30), min_size=2, max_size=5))
    pool = list(numbers)
    edit = draw(st.sampled_from(["none", "none", "drop", "duplicate", "replace"]))
    if edit == "drop":
        pool.pop(draw(st.integers(0, len(pool) - 1)))
    elif edit == "duplicate":
        pool.append(draw(st.sampled_from(pool)))
    elif edit == "replace":
        pool[draw(st.integers(0, len(pool) - 1))] = draw(st.integers(0, 40))
    pool = [str(n) for n in draw(st.permutations(pool))]
    while len(pool) > 1:
        i = draw(st.integers(0, len(pool) - 2))
        op = draw(st.sampled_from("+-*/"))
        left, right = (f"({t})" if draw(st.booleans()) else t for t in pool[i:i + 2])
        pool[i:i + 2] = [left + op + right]
    text = pool[0]
    value, _ = ast_value(text)
    target = draw(st.integers(1, 200))
    if value is not None and value.denominator == 1 and value >= 1 and draw(st.booleans()):
        target = int(value)
    problem = Problem("countdown", ",".join(map(str, numbers)) + f":{target}=", str(target), "",
                      tuple(numbers))
    return problem, text, oracle(numbers, target, text)


@settings(max_examples=300, deadline=None)
@given(countdown_attempts())
def test_countdown_checker_agrees_with_an_independent_evaluator(attempt):
    problem, text, verdict = attempt
    assert len(text) <= MAX_EXPRESSION_CHARS
    assert extract_answer(problem, text) == text
    assert is_correct(problem, text) == verdict


@FAST
@given(st.sampled_from([ADD, SUB, ZERO, COUNT, REPEATED]), st.text(ALPHABET, max_size=30))
def test_arbitrary_text_is_accepted_only_when_right(problem, text):
    answer = extract_answer(problem, text)
    if problem.kind == "countdown":
        if answer is not None:
            assert is_correct(problem, text) == oracle(problem.numbers, int(problem.answer),
                                                       answer)
    else:
        assert is_correct(problem, text) == (text.rstrip() == problem.answer)
