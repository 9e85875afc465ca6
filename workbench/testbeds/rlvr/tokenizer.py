"""A character-level tokenizer for the arithmetic tasks, built locally (no download).

One token per character of ``problems.ALPHABET`` (space and newline included) after four
special tokens: ``<|pad|>`` = 0, ``<|bos|>`` = 1, ``<|eos|>`` = 2, ``<|unk|>`` = 3 (``|`` is
not in the alphabet, so no generated text can spell a special token). It is a
``tokenizers`` WordLevel model whose pre-tokenizer isolates every character and whose decoder
fuses tokens back without separators, wrapped in ``transformers.PreTrainedTokenizerFast`` so
that ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` round-trip it like any Hugging Face
tokenizer. Encoding with special tokens prepends ``<|bos|>``; ``decode(ids,
skip_special_tokens=True)`` returns the original string exactly (no inserted spaces, no
clean-up of spaces before punctuation). Padding is on the left, as batched generation needs.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from workbench.testbeds.rlvr.problems import ALPHABET

PAD, BOS, EOS, UNK = "<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)


def char_vocab(alphabet: str = ALPHABET) -> dict[str, int]:
    """Token -> id: the special tokens first (``<|pad|>`` = 0), then each character in order."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet has repeated characters: {alphabet!r}")
    tokens = list(SPECIAL_TOKENS) + list(alphabet)
    return {token: index for index, token in enumerate(tokens)}


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """The character tokenizer over ``alphabet`` (default: the tasks' ALPHABET)."""
    vocab = char_vocab(alphabet)
    core = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    # "[\s\S]" matches any single character, newline included; each becomes its own piece.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
