"""A generative target's data set (``generation.dataset``): a JSONL file (relative to the scenario)
whose every line is one distinct request, sent in turn.

A line is a JSON object with one of:

- ``prompt``: the request's text (a chat target sends it as the user's message);
- ``messages``: an OpenAI chat ``messages`` list (``{"role": ..., "content": "..."}`` each, the
  conversation so far), sent as it is (``openai-chat`` targets only);
- ``conversations``: a ShareGPT conversation (``{"from": "human" | "gpt" | "system", "value": "..."}``
  each): the request is its first human turn (a system turn before it kept), and the answer that
  follows it in the file sets the request's output tokens (counted with the target's tokenizer,
  else in words) unless the line gives ``output_tokens``; its later human turns are the next turns
  of a conversation (``generation.conversation``), each asking for the tokens of the answer after it;

and optionally ``output_tokens`` (the request's ``max_tokens``; else the target's). A target that is
not a chat (``openai-completions``, ``triton-generate``) sends the text of the line's last user turn
and takes no ``messages`` lines. Each prompt's
tokens are counted (the target's tokenizer, else words: the message contents without the server's
chat template) for the summary's ``generation.lengths``. Every problem names the file and the line.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from inferload.scenario.input_files import read_limited
from inferload.scenario.lengths import MAX_LENGTH, MAX_LENGTHS_FILE_BYTES, MAX_REQUESTS, DrawnRequest, token_counter

#: OpenAI chat roles a ``messages`` line may use
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
#: ShareGPT speakers, as the chat roles they are
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant"}
#: the keys that give a line's request (exactly one per line)
REQUEST_KEYS = ("prompt", "messages", "conversations")


def _chat_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: messages: expected a non-empty list of {{role, content}} objects")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ValueError(f"{where}: messages[{index}]: expected an object with a role and a text content")
        if message.get("role") not in CHAT_ROLES:
            raise ValueError(
                f"{where}: messages[{index}].role: expected one of {', '.join(sorted(CHAT_ROLES))}; got {message.get('role')!r}"
            )
        messages.append({"role": str(message["role"]), "content": message["content"]})
    return tuple(messages)


FollowUps = tuple[tuple[str, str | None], ...]


def _sharegpt_request(value: Any, where: str) -> tuple[tuple[dict[str, str], ...], str | None, FollowUps]:
    """The messages up to the first human turn, the answer after it (None: none follows), and each
    later human turn with the answer after it (a conversation's next turns)."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: conversations: expected a non-empty list of {{from, value}} objects")
    turns = []
    for index, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ValueError(f"{where}: conversations[{index}]: expected an object with from and a text value")
        role = SHAREGPT_ROLES.get(str(turn.get("from")))
        if role is None:
            raise ValueError(
                f"{where}: conversations[{index}].from: expected one of {', '.join(SHAREGPT_ROLES)}; got {turn.get('from')!r}"
            )
        turns.append((role, turn["value"]))
    first_user = next((index for index, (role, _) in enumerate(turns) if role == "user"), None)
    if first_user is None:
        raise ValueError(f"{where}: conversations: no human turn (the request is the first one)")
    asked = tuple({"role": role, "content": text} for role, text in turns[: first_user + 1] if role != "assistant")

    def answer_after(index: int) -> str | None:
        after = turns[index + 1] if index + 1 < len(turns) else None
        return after[1] if after is not None and after[0] == "assistant" else None

    later = tuple(
        (text, answer_after(index)) for index, (role, text) in enumerate(turns) if role == "user" and index > first_user
    )
    return asked, answer_after(first_user), later


DatasetLine = tuple[tuple[dict[str, str], ...], str | None, int | None, bool, FollowUps]


def _stamp(path: str) -> tuple[int, int]:
    """The file's modification time and size: a file written again is read again."""
    try:
        stat = Path(path).stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def read_dataset_lines(path: str) -> tuple[DatasetLine, ...]:
    """Each line's request: its messages (a ``prompt`` line: one user message), the answer a
    ShareGPT line recorded (None: none), its ``output_tokens`` (None: not given), whether it was
    a ``messages`` line (sent as a list: chat only), and a ShareGPT line's later human turns with the
    answers recorded after them. ValueError naming the file and the line."""
    return _read_dataset_lines(path, _stamp(path))


@functools.cache
def _read_dataset_lines(path: str, stamp: tuple[int, int]) -> tuple[DatasetLine, ...]:
    text = read_limited(Path(path), MAX_LENGTHS_FILE_BYTES)
    lines: list[DatasetLine] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{where}: expected a JSON object: {error}") from None
        given = [key for key in REQUEST_KEYS if isinstance(entry, dict) and key in entry]
        if len(given) != 1:
            found = f"; got {', '.join(given)}" if given else ""
            raise ValueError(f"{where}: expected a JSON object with one of {', '.join(REQUEST_KEYS)}{found}")
        output_tokens = entry.get("output_tokens")
        if output_tokens is not None and (type(output_tokens) is not int or not 1 <= output_tokens <= MAX_LENGTH):
            raise ValueError(f"{where}: output_tokens: expected an integer from 1 to {MAX_LENGTH:,}; got {output_tokens!r}")
        answer: str | None = None
        later: FollowUps = ()
        if given == ["prompt"]:
            if not isinstance(entry["prompt"], str) or not entry["prompt"]:
                raise ValueError(f"{where}: prompt: expected a non-empty text; got {entry['prompt']!r}")
            messages: tuple[dict[str, str], ...] = ({"role": "user", "content": entry["prompt"]},)
        elif given == ["messages"]:
            messages = _chat_messages(entry["messages"], where)
        else:
            messages, answer, later = _sharegpt_request(entry["conversations"], where)
        lines.append((messages, answer, output_tokens, given == ["messages"], later))
        if len(lines) > MAX_REQUESTS:
            raise ValueError(f"{path}: more than {MAX_REQUESTS:,} requests")
    if not lines:
        raise ValueError(f"{path}: no requests (expected a JSON object per line)")
    return tuple(lines)


def has_message_lists(path: str) -> bool:
    """Some line of the data set is a ``messages`` list (only a chat target can send it)."""
    return any(as_list for _, _, _, as_list, _ in read_dataset_lines(path))


def dataset_requests(path: str, tokenizer: str | None) -> tuple[DrawnRequest, ...]:
    """Every line's request, in order, its prompt's tokens counted (the tokenizer's, else words)."""
    return _dataset_requests(path, tokenizer, _stamp(path))


@functools.cache
def _dataset_requests(path: str, tokenizer: str | None, stamp: tuple[int, int]) -> tuple[DrawnRequest, ...]:
    lines = _read_dataset_lines(path, stamp)
    count_tokens = token_counter(tokenizer)

    def counted(texts: list[str]) -> list[int]:
        return count_tokens(texts) if count_tokens is not None else [len(text.split()) for text in texts]

    prompts = counted(["\n".join(message["content"] for message in messages) for messages, *_ in lines])
    answers = iter(counted([answer for _, answer, asked, *_ in lines if answer is not None and asked is None]))
    later_answers = iter(counted([answer for *_, later in lines for _, answer in later if answer is not None]))
    requests = []
    for (messages, answer, asked, as_list, later), held in zip(lines, prompts, strict=True):
        output_tokens = asked if asked is not None or answer is None else max(1, next(answers))
        users = [message["content"] for message in messages if message["role"] == "user"]
        prompt = users[-1] if users else messages[-1]["content"]
        follow_ups = tuple((text, None if answer is None else max(1, next(later_answers))) for text, answer in later)
        chat = messages if as_list or len(messages) > 1 else None
        requests.append(DrawnRequest(prompt, None, held, output_tokens, chat, follow_ups))
    return tuple(requests)
