"""How a problem is put to the model and where its answer is read: the prompt template.

``raw`` (the default, for the from-scratch warm-up model): the prompt is ``problem.prompt``
(``"37+485="``) and the whole completion must be the answer (``checker``'s rule).

``few-shot`` and ``chat`` (for a pretrained model, e.g. a Qwen2.5-0.5B on disk, which writes
prose around its answer): the model is asked to end with a line ``#### ANSWER`` (GSM8K's
convention), and the graded answer is the text after the **last** ``####`` of the completion,
up to the end of that line, whitespace stripped (``marked_answer``); a completion without
``####`` is malformed. That text then goes through the same exact checker as a raw completion
without a scratchpad (canonical integer, or a countdown expression), so "the answer is 522"
and "#### 0522" are both wrong.

- ``few-shot``: ``shots`` solved training problems, each ``prompt + "\\n#### " + answer +
  "\\n\\n"``, then the problem's ``prompt + "\\n"``; the default stop string is ``"\\n\\n"``
  (the shots' separator), so a base model stops after its answer line. Every character stays in
  the character tokenizer's alphabet, so the warm-up model can read it too.
- ``chat``: one user message asking for the result (arithmetic: ``Compute 37+485.``;
  countdown: the numbers and the target) and for the final answer after ``####``, rendered by
  the tokenizer's own ``apply_chat_template(..., add_generation_prompt=True)``; a tokenizer
  without a chat template is an error. No default stop string: an instruct model's tokenizer
  ends its turn with its eos; for a base model's template give the end-of-turn marker
  (``stop: ["<|im_end|>"]`` for Qwen).

Stop strings are matched on the decoded response with special tokens kept (so an end-of-turn
marker can be one), and the response is cut after the token that completes the first of them
(``backends``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from workbench.testbeds.rlvr.problems import Problem

TEMPLATES = ("raw", "few-shot", "chat")
Template = Literal["raw", "few-shot", "chat"]
ANSWER_MARK = "####"
DEFAULT_STOP = {"raw": (), "few-shot": ("\n\n",), "chat": ()}


def marked_answer(completion: str) -> str | None:
    """The text after the last ``####`` of ``completion`` up to the end of its line, stripped;
    None when there is no ``####``."""
    head, mark, tail = completion.rpartition(ANSWER_MARK)
    if not mark:
        return None
    return tail.split("\n", 1)[0].strip()


def final_answer(problem: Problem) -> str:
    """The answer text a shot shows: the solution, or a scratchpad solution's ``#`` line."""
    if problem.scratchpad:
        return problem.solution.rpartition("\n")[2][1:]
    return problem.solution


def instruction(problem: Problem) -> str:
    """The chat template's user message for ``problem``."""
    question = problem.prompt.removesuffix("=")
    if problem.kind == "countdown":
        numbers = ", ".join(str(n) for n in problem.numbers)
        return (f"Using the numbers {numbers}, each exactly once, with + - * / and "
                f"parentheses, write an expression equal to {problem.answer}. Write the final "
                f"expression alone on the last line, after '{ANSWER_MARK} '.")
    return (f"Compute {question}. Write the final answer as an integer alone on the last line, "
            f"after '{ANSWER_MARK} '.")


@dataclasses.dataclass(frozen=True)
class PromptFormat:
    """A prompt template with its shots (``few-shot``) and its stop strings."""

    template: Template = "raw"
    shots: tuple[Problem, ...] = ()
    stop: tuple[str, ...] = ()

    @classmethod
    def build(cls, template: str, train: Sequence[Problem], shots: int = 4,
              stop: Sequence[str] | None = None) -> PromptFormat:
        """The format ``template`` with the first ``shots`` training problems as examples
        (``few-shot`` only) and ``stop`` (None: the template's default)."""
        if template not in TEMPLATES:
            raise ValueError(f"unknown prompt_template {template!r}; choose one of "
                             f"{', '.join(TEMPLATES)}")
        if stop is not None and any(not s for s in stop):
            raise ValueError("stop strings must not be empty")
        examples = tuple(train[:shots]) if template == "few-shot" else ()
        return cls(template, examples, tuple(DEFAULT_STOP[template] if stop is None else stop))

    @property
    def rule(self) -> Literal["whole", "marked"]:
        """The checker's answer rule: the whole completion (raw) or after ``####``."""
        return "whole" if self.template == "raw" else "marked"

    def render(self, problem: Problem, tokenizer=None) -> str:
        """The prompt text the model continues."""
        if self.template == "raw":
            return problem.prompt
        if self.template == "few-shot":
            shots = "".join(f"{p.prompt}\n{ANSWER_MARK} {final_answer(p)}\n\n"
                            for p in self.shots)
            return f"{shots}{problem.prompt}\n"
        if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("prompt_template 'chat' needs a tokenizer with a chat template "
                             "(the model directory's tokenizer has none); use 'few-shot'")
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": instruction(problem)}], tokenize=False,
            add_generation_prompt=True)

    def apply(self, problems: Sequence[Problem], tokenizer=None) -> list[Problem]:
        """``problems`` with their prompts rendered (the checker reads the other fields)."""
        if self.template == "raw":
            return list(problems)
        return [dataclasses.replace(p, prompt=self.render(p, tokenizer)) for p in problems]
