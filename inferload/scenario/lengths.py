"""A generative target's request lengths (``generation.lengths``): how long each prompt is and how
many tokens each request asks for, drawn once per distinct request.

``input_tokens`` and ``output_tokens`` are laws (``fixed``: ``tokens``; ``uniform``: ``min`` ..
``max``, both included; ``normal``: ``mean``, ``sd``, cut to ``min`` .. ``max``), drawn for
``requests`` distinct requests with ``seed``; or ``file`` names a JSONL file (relative to the
scenario) whose every line gives one request's ``input_tokens`` and/or ``output_tokens`` (the pairs a
trace or a data set recorded). A request's output length is its ``max_tokens`` (with ``ignore_eos``
the server generates that many where it takes it). Its input length makes a synthetic prompt: words
of a fixed vocabulary, different in every request (so no two prompts share a prefix by chance), as
many as the length asks; with ``generation.tokenizer`` named, each word is weighed with that
tokenizer (a space and the word: the tokens it adds inside a text) and words are added until the
prompt holds the asked tokens, then every prompt is counted whole with the tokenizer, and those
counts are what the summary reports (a chat server's template adds its own tokens around the
message: its ``usage.prompt_tokens`` is that many more). ``shared_prefix`` puts the prompts in
groups that start with the same words (`SharedPrefix`).

A lengths file's line may also give ``hash_ids`` (Mooncake's trace layout): the ids of the prompt's
blocks of ``block_tokens`` tokens (Mooncake: 512), in order. Each id's block is the same words in
every prompt that names it (a server that caches prefixes sees the same shared blocks the recorded
requests had); the prompt is its blocks' words in order, cut to its ``input_tokens`` (the last block
is the part of its block that fits: ``input_tokens`` must lie within its last block).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, StrictStr, ValidationInfo, field_validator, model_validator

from inferload.scenario.fields import FrozenModel, Number
from inferload.scenario.input_files import read_limited, scenario_file, unreadable_problem
from inferload.scenario.messages import custom_error

#: the most tokens one length may ask for
MAX_LENGTH = 1_000_000
#: distinct requests drawn when the lengths name no number
DEFAULT_REQUESTS = 1000
#: the most distinct requests drawn (or lines in a lengths file)
MAX_REQUESTS = 100_000
#: the most bytes of a lengths file
MAX_LENGTHS_FILE_BYTES = 64 * 1024 * 1024
#: the tokens of a Mooncake trace's block (its ``hash_ids`` name blocks of this many prompt tokens)
MOONCAKE_BLOCK_TOKENS = 512
#: the most distinct blocks (``hash_ids``) a lengths file may name (each is made once, before the run)
MAX_BLOCKS = 200_000
#: the largest block id
MAX_BLOCK_ID = 2**63 - 1
#: the synthetic prompts' words: short, common English words (one token each in most tokenizers)
VOCABULARY: tuple[str, ...] = tuple(
    """time year people way day man thing woman life child world school state family student group
    country problem hand part place case week company system program question work government
    number night point home water room mother area money story fact month lot right study book eye
    job word business issue side kind head house service friend father power hour game line end
    member law car city community name president team minute idea kid body information back parent
    face others level office door health person art war history party result change morning reason
    research girl guy moment air teacher force education""".split()  # noqa: SIM905
)

Length = Annotated[int, Field(ge=1, le=MAX_LENGTH, strict=True)]


class LengthLaw(FrozenModel):
    """One length drawn per distinct request (tokens)."""

    law: Literal["fixed", "uniform", "normal"]
    tokens: Length | None = None  # fixed
    min: Length | None = None  # uniform, normal
    max: Length | None = None  # uniform, normal
    mean: Annotated[Number, Field(gt=0, le=MAX_LENGTH)] | None = None  # normal
    sd: Annotated[Number, Field(ge=0, le=MAX_LENGTH)] | None = None  # normal

    @model_validator(mode="after")
    def _keys_of_the_law(self) -> LengthLaw:
        needs = {"fixed": ("tokens",), "uniform": ("min", "max"), "normal": ("mean", "sd", "min", "max")}[self.law]
        missing = [key for key in needs if getattr(self, key) is None]
        extra = [key for key in ("tokens", "min", "max", "mean", "sd") if key not in needs and getattr(self, key) is not None]
        if missing or extra:
            given = f"; {', '.join(extra)} not for this law" if extra else ""
            raise custom_error(
                f"law {self.law} takes {', '.join(needs)}{given}" + (f"; missing {', '.join(missing)}" if missing else "")
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise custom_error(f"min {self.min} is above max {self.max}")
        return self

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` lengths (int64)."""
        if self.law == "fixed":
            assert self.tokens is not None
            return np.full(count, self.tokens, dtype=np.int64)
        assert self.min is not None and self.max is not None
        if self.law == "uniform":
            return rng.integers(self.min, self.max, count, endpoint=True, dtype=np.int64)
        assert self.mean is not None and self.sd is not None
        drawn = np.rint(rng.normal(float(self.mean), float(self.sd), count))
        return np.clip(drawn, self.min, self.max).astype(np.int64)

    def words(self) -> str:
        if self.law == "fixed":
            return f"{self.tokens}"
        if self.law == "uniform":
            return f"uniform {self.min}..{self.max}"
        return f"normal {self.mean:g} ± {self.sd:g} in {self.min}..{self.max}"


class SharedPrefix(FrozenModel):
    """Prompts in groups that share their start: request i is in group i mod ``groups``, and its prompt
    is its group's prefix of ``tokens`` tokens, then its own drawn input tokens (a server that caches
    prefixes computes the shared part once: its TTFT shows it)."""

    groups: Annotated[int, Field(ge=1, le=MAX_REQUESTS, strict=True)]
    tokens: Length


class LengthsSpec(FrozenModel):
    """Each distinct request's prompt length and asked output length: laws, or a file of pairs."""

    input_tokens: LengthLaw | None = None
    output_tokens: LengthLaw | None = None
    #: a JSONL file (relative to the scenario): one request's ``input_tokens`` and/or ``output_tokens`` per line
    file: StrictStr | None = None
    #: distinct requests drawn from the laws (the pool the target's users rotate through)
    requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS, strict=True)] = DEFAULT_REQUESTS
    seed: Annotated[int, Field(ge=0, strict=True)] = 0
    #: the prompts in groups sharing a prefix (the drawn input tokens follow it)
    shared_prefix: SharedPrefix | None = None
    #: the tokens of each block a lengths file's ``hash_ids`` name (Mooncake's: 512)
    block_tokens: Length = MOONCAKE_BLOCK_TOKENS

    @field_validator("file")
    @classmethod
    def _lengths_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario file; read (every line checked) when its folder is known."""
        return scenario_file(value, info, "a JSONL file of lengths", lambda path: unreadable_problem(path, read_length_lines))

    @model_validator(mode="after")
    def _laws_or_a_file(self) -> LengthsSpec:
        laws = self.input_tokens is not None or self.output_tokens is not None
        if self.file is not None and laws:
            raise custom_error("give the lengths as laws (input_tokens, output_tokens) or as a file, not both")
        if self.file is None and not laws:
            raise custom_error("give input_tokens, output_tokens (laws) or file (a JSONL file of lengths)")
        if self.file is not None and self.requests != DEFAULT_REQUESTS:
            raise custom_error("a lengths file's lines are the requests: remove requests")
        if self.shared_prefix is not None and self.file is None and self.input_tokens is None:
            raise custom_error("shared_prefix starts the prompts that input_tokens makes: give input_tokens too")
        if self.file is not None and Path(self.file).is_file():
            blocked = [(n, line) for n, line in enumerate(read_length_lines(self.file), start=1) if line.hash_ids]
            if blocked and self.shared_prefix is not None:
                raise custom_error("the file's hash_ids give the prompts' shared blocks: remove shared_prefix")
            for n, line in blocked:
                if (problem := line.blocks_problem(self.block_tokens)) is not None:
                    raise custom_error(f"{self.file}: request {n}: {problem}")
        return self


@dataclass(frozen=True)
class LengthLine:
    """One line of a lengths file: its prompt and output tokens (None: not given) and its blocks'
    ids (Mooncake's ``hash_ids``; None: not given)."""

    input_tokens: int | None
    output_tokens: int | None
    hash_ids: tuple[int, ...] | None = None

    def blocks_problem(self, block_tokens: int) -> str | None:
        """Why the blocks cannot make the prompt (None: they can): its input tokens must lie in its last block."""
        assert self.hash_ids is not None and self.input_tokens is not None
        blocks = -(-self.input_tokens // block_tokens)
        if blocks == len(self.hash_ids):
            return None
        return (
            f"{len(self.hash_ids)} hash_ids for input_tokens {self.input_tokens}: blocks of {block_tokens} tokens"
            f" (block_tokens) make {blocks}"
        )


@functools.cache
def read_length_lines(path: str) -> tuple[LengthLine, ...]:
    """A lengths file's lines; ValueError naming the file and the line when a line is not a JSON
    object with ``input_tokens`` and/or ``output_tokens`` (integers from 1 to MAX_LENGTH) and, with
    ``input_tokens``, optionally ``hash_ids`` (a list of block ids from 0 to MAX_BLOCK_ID), or the file
    holds none, more than MAX_REQUESTS lines or more than MAX_BLOCKS distinct blocks."""
    text = read_limited(Path(path), MAX_LENGTHS_FILE_BYTES)
    lines: list[LengthLine] = []
    blocks: set[int] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{path}: line {number}: expected a JSON object: {error}") from None
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: line {number}: expected a JSON object with input_tokens and/or output_tokens")
        values = []
        for key in ("input_tokens", "output_tokens"):
            value = entry.get(key)
            if value is not None and (type(value) is not int or not 1 <= value <= MAX_LENGTH):
                raise ValueError(f"{path}: line {number}: {key}: expected an integer from 1 to {MAX_LENGTH:,}; got {value!r}")
            values.append(value)
        if values == [None, None]:
            raise ValueError(f"{path}: line {number}: expected input_tokens and/or output_tokens")
        hash_ids = entry.get("hash_ids")
        if hash_ids is not None:
            if values[0] is None:
                raise ValueError(f"{path}: line {number}: hash_ids name the prompt's blocks: give its input_tokens too")
            if (
                not isinstance(hash_ids, list)
                or not hash_ids
                or any(type(block) is not int or not 0 <= block <= MAX_BLOCK_ID for block in hash_ids)
            ):
                raise ValueError(
                    f"{path}: line {number}: hash_ids: expected a list of block ids (whole numbers >= 0); got {str(hash_ids)[:80]}"
                )
            blocks.update(hash_ids)
            if len(blocks) > MAX_BLOCKS:
                raise ValueError(f"{path}: more than {MAX_BLOCKS:,} distinct hash_ids (each block is made before the run)")
        lines.append(LengthLine(values[0], values[1], None if hash_ids is None else tuple(hash_ids)))
        if len(lines) > MAX_REQUESTS:
            raise ValueError(f"{path}: more than {MAX_REQUESTS:,} lines of lengths")
    if not lines:
        raise ValueError(f"{path}: no lengths (expected a JSON object per line)")
    return tuple(lines)


@dataclass(frozen=True)
class DrawnRequest:
    """One distinct request's lengths: its prompt (None: the target's own prompt), the tokens the
    prompt was asked to hold and holds (counted with the tokenizer, else its words), the
    output tokens it asks for (None: the target's ``max_tokens``), the chat messages a data set
    gave (None: the prompt is the one user message), and a recorded conversation's later user turns
    with the output tokens each asks for (None: the target's ``max_tokens``)."""

    prompt: str | None
    input_tokens: int | None
    counted_input_tokens: int | None
    output_tokens: int | None
    messages: tuple[dict[str, str], ...] | None = None
    follow_ups: tuple[tuple[str, int | None], ...] = ()


def synthetic_words(index: int, count: int, vocabulary: Sequence[str] = VOCABULARY) -> list[str]:
    """``count`` words of ``vocabulary`` drawn with ``index`` as the seed: the same for one index
    every time; different requests' prompts differ from their first words on."""
    picks = np.random.default_rng([index, 0x1E57]).integers(0, len(vocabulary), count)
    return [vocabulary[pick] for pick in picks.tolist()]


#: rounds of counting and mending a prompt's words to its asked tokens
MEND_ROUNDS = 6


def _sized_prompts(
    lengths: list[int | None],
    count_tokens: Callable[[list[str]], list[int]] | None,
    seed_base: int = 0,
    follows_text: bool = False,
) -> list[tuple[str, int] | None]:
    """Each asked length's prompt and the tokens it holds (None where no length is asked). Without
    a tokenizer a prompt is that many words. With one, words that are one token inside a text are
    preferred (all words when fewer than 8 are), the prompt is counted whole, and words are added or
    taken off until it holds the asked tokens or MEND_ROUNDS have passed (a word of several tokens
    can leave it a few over; a prompt never has fewer tokens than its first word, which starts with
    the word the tokenizer counts fewest tokens for alone). Prompt i's words are drawn with seed
    ``seed_base + i``. ``follows_text``: each is counted as it reads after other text and a space
    (its first word like any other)."""
    if count_tokens is None:
        return [None if n is None else (" ".join(synthetic_words(seed_base + index, n)), n) for index, n in enumerate(lengths)]
    weights = dict(zip(VOCABULARY, count_tokens([f" {word}" for word in VOCABULARY]), strict=True))
    single = [word for word in VOCABULARY if weights[word] == 1]
    vocabulary = single if len(single) >= 8 else list(VOCABULARY)
    # a text's first word has no space before it: some tokenizers count it as more tokens
    alone = dict(zip(VOCABULARY, count_tokens(list(VOCABULARY)), strict=True))
    first = [word for word in VOCABULARY if alone[word] == min(alone.values())]
    if follows_text:
        first = vocabulary
    lead = " " if follows_text else ""

    def count(indices: list[int]) -> list[int]:
        return count_tokens([lead + " ".join(words[index]) for index in indices])

    words: dict[int, list[str]] = {
        index: [first[index % len(first)], *synthetic_words(seed_base + index, n - 1, vocabulary)]
        for index, n in enumerate(lengths)
        if n is not None
    }
    held: dict[int, int] = {}
    for _ in range(MEND_ROUNDS):
        indices = [index for index in words if held.get(index) != lengths[index]]
        if not indices:
            break
        for index, tokens in zip(indices, count(indices), strict=True):
            held[index] = tokens
            asked = lengths[index]
            assert asked is not None
            if tokens < asked:
                words[index] += synthetic_words(seed_base + index + len(words[index]) * 7919, asked - tokens, vocabulary)
            elif tokens > asked and len(words[index]) > 1:
                cut = tokens - asked
                while cut > 0 and len(words[index]) > 1:
                    cut -= max(1, weights.get(words[index].pop(), 1))
    final = [index for index in words if held.get(index) != lengths[index]]
    for index, tokens in zip(final, count(final), strict=True):
        held[index] = tokens
    return [None if n is None else (" ".join(words[index]), held[index]) for index, n in enumerate(lengths)]


@functools.cache
def drawn_requests(spec: LengthsSpec, tokenizer: str | None) -> tuple[DrawnRequest, ...]:
    """Every distinct request's lengths and prompt (deterministic: the laws drawn with ``seed``, or
    the file's lines in order); with ``tokenizer``, prompts are sized and counted with it."""
    if spec.file is not None:
        lines: Sequence[LengthLine] = read_length_lines(spec.file)
    else:
        rng = np.random.default_rng(spec.seed)
        count = spec.requests
        inputs = spec.input_tokens.draw(rng, count).tolist() if spec.input_tokens else [None] * count
        outputs = spec.output_tokens.draw(rng, count).tolist() if spec.output_tokens else [None] * count
        lines = [LengthLine(i, o) for i, o in zip(inputs, outputs, strict=True)]
    count_tokens = token_counter(tokenizer)
    sized = [None if line.hash_ids else line.input_tokens for line in lines]
    prompts = _sized_prompts(sized, count_tokens, follows_text=spec.shared_prefix is not None)
    if spec.shared_prefix is not None:
        prompts = _after_prefixes(prompts, spec.shared_prefix, count_tokens)
    if any(line.hash_ids for line in lines):
        prompts = _blocked_prompts(lines, prompts, spec.block_tokens, count_tokens)
    return tuple(
        DrawnRequest(None, line.input_tokens, None, line.output_tokens)
        if prompt is None
        else DrawnRequest(prompt[0], line.input_tokens, prompt[1], line.output_tokens)
        for prompt, line in zip(prompts, lines, strict=True)
    )


#: the seeds of the blocks' words start here (the requests' own from 0, the shared prefixes' from PREFIX_SEEDS)
BLOCK_SEEDS = 1 << 41


def _blocked_prompts(
    lines: Sequence[LengthLine],
    prompts: list[tuple[str, int] | None],
    block_tokens: int,
    count_tokens: Callable[[list[str]], list[int]] | None,
) -> list[tuple[str, int] | None]:
    """The prompts of the lines with ``hash_ids``: each block's words made once (the same words
    wherever its id is named), a prompt its blocks in order with the last one cut to the prompt's
    input tokens, counted whole; the other lines' prompts as they are."""
    ids = sorted({block for line in lines if line.hash_ids for block in line.hash_ids})
    made = _sized_prompts([block_tokens] * len(ids), count_tokens, BLOCK_SEEDS, follows_text=True)
    words = {block: entry[0].split(" ") for block, entry in zip(ids, made, strict=True) if entry is not None}
    joined = list(prompts)
    for index, line in enumerate(lines):
        if not line.hash_ids or line.input_tokens is None:
            continue
        *full, last = line.hash_ids
        kept = line.input_tokens - len(full) * block_tokens  # the last block's share, 1 .. block_tokens
        text = " ".join([*(" ".join(words[block]) for block in full), " ".join(words[last][:kept])])
        joined[index] = (text, line.input_tokens)
    if count_tokens is not None:
        blocked = {index: entry[0] for index, entry in enumerate(joined) if entry is not None and lines[index].hash_ids}
        for (index, text), tokens in zip(blocked.items(), count_tokens(list(blocked.values())), strict=True):
            joined[index] = (text, tokens)
    return joined


#: the seeds of the shared prefixes' words start here (the requests' own from 0)
PREFIX_SEEDS = 1 << 40


def _after_prefixes(
    prompts: list[tuple[str, int] | None], shared: SharedPrefix, count_tokens: Callable[[list[str]], list[int]] | None
) -> list[tuple[str, int] | None]:
    """Each prompt after its group's prefix (request i: group i mod ``shared.groups``), counted whole."""
    prefixes = _sized_prompts([shared.tokens] * shared.groups, count_tokens, PREFIX_SEEDS)
    joined: list[tuple[str, int] | None] = []
    for index, prompt in enumerate(prompts):
        prefix = prefixes[index % shared.groups]
        assert prefix is not None
        joined.append(None if prompt is None else (f"{prefix[0]} {prompt[0]}", prefix[1] + prompt[1]))
    if count_tokens is not None:  # the joint may count differently from its two parts
        whole = [entry for entry in joined if entry is not None]
        counts = iter(count_tokens([text for text, _ in whole]))
        joined = [None if entry is None else (entry[0], next(counts)) for entry in joined]
    return joined


def token_counter(tokenizer: str | None) -> Callable[[list[str]], list[int]] | None:
    """Each text's tokens with ``tokenizer`` (the engine's `tokenizers`); None without a tokenizer or
    without the engine (the prompts are then sized and counted in words)."""
    if tokenizer is None:
        return None
    try:
        from inferload import _native
    except ImportError:
        return None

    def count(texts: list[str]) -> list[int]:
        counts: list[int] = _native.count_tokens(tokenizer, texts)
        return counts

    return count
