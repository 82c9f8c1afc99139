"""The built-in LLM: a small llama-architecture model with random weights, written as GGUF with the
``gguf`` package (no download), for llama.cpp's server (`inferload.local.servers.llamacpp_serve`).

    python -m inferload.local.models.llm PATH

Its answers are noise, but its server is real: llama.cpp tokenizes the prompt, runs 4 transformer
layers 256 wide per token, streams one event per token and counts them in ``usage``. The vocabulary
is SentencePiece-style (``tokenizer.ggml.model = "llama"``): the three control tokens, the 256 byte
tokens ``<0xNN>`` (so any text can be tokenized) and a few hundred words. The weights are random but
for one constant that keeps the control and byte tokens from being sampled: the model says words
only (never an end of sequence: requests hold their length with ``max_tokens``), so its text
tokenizes back to the tokens it generated, with the tokenizer written beside it (`write_tokenizer`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from inferload.local.models.specs import artifacts_root

#: the model's name as the server lists it (``GET /v1/models``)
LLM_NAME = "random-llama"
WIDTH, LAYERS, HEADS, FEED_FORWARD, CONTEXT = 256, 4, 4, 512, 4096
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from it an be this are or his which her had not but "
    "have were they one all their has been when there who more will would can no out so said what up its "
    "about into than them only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still own "
    "see men work long get here between both life being under never day same another know while last might "
    "us great old year off come since against go came right used take three light house keeper sea ship "
    "night storm lamp tower wave shore rock wind"
)
#: whole words in the vocabulary besides the bytes, each with a SentencePiece score
WORDS = tuple(_WORD_TEXT.split())
#: the constant of the residual stream's dimension 0 (see `write_random_llama`)
_WORDS_ONLY = 10.0
#: a chat template llama.cpp renders with its Jinja engine: each message on its own line
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def llm_model_path() -> Path:
    """Where the built-in LLM's GGUF file lives (``llm/`` beside the sample models' folders)."""
    return artifacts_root() / "llm" / f"{LLM_NAME}.gguf"


def tokenizer_path(model: Path) -> Path:
    """Where a model's tokenizer (Hugging Face's ``tokenizer.json`` format) lives: beside it."""
    return model.with_name(f"{model.stem}.tokenizer.json")


def write_tokenizer(path: Path) -> Path:
    """The model's vocabulary as a Hugging Face ``tokenizer.json`` (a unigram model, as SentencePiece's,
    with the same pieces, scores and byte fallback): what a client names to count the model's tokens
    (``generation.tokenizer``). Each word the model says is one piece (``\u2581`` + the word)."""
    tokens, scores, types = _vocabulary()
    import gguf

    control = {int(gguf.TokenType.UNKNOWN), int(gguf.TokenType.CONTROL)}
    special = [
        {
            "id": index,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for index, (token, kind) in enumerate(zip(tokens, types, strict=True))
        if kind in control
    ]
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "Unigram",
            "unk_id": 0,
            "vocab": [[t, s] for t, s in zip(tokens, scores, strict=True)],
            "byte_fallback": True,
        },
    }
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    partial.replace(path)
    return path


def _vocabulary() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["\u2581" + word for word in WORDS]  # SentencePiece's word-start mark
    types += [gguf.TokenType.NORMAL] * len(WORDS)
    scores = [0.0] * (3 + 256) + [-float(rank) for rank in range(len(WORDS))]
    return tokens, scores, [int(t) for t in types]


def write_random_llama(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` and its tokenizer beside it (`tokenizer_path`), each through a
    temporary file, so a reader never sees half of one."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = _vocabulary()
    rng = np.random.default_rng(seed)
    head_dim = WIDTH // HEADS

    def weight(rows: int, columns: int) -> np.ndarray:
        return (rng.standard_normal((rows, columns)) * 0.02).astype(np.float16)

    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(LLM_NAME)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)
    ones = np.ones(WIDTH, dtype=np.float32)
    # dimension 0 of the residual stream holds a constant no layer writes to; the output layer turns
    # it into a logit far below every word's for the control and byte tokens, so the model says words
    embedding = weight(len(tokens), WIDTH)
    embedding[:, 0] = _WORDS_ONLY
    writer.add_tensor("token_embd.weight", embedding)
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            projection = weight(WIDTH, WIDTH)
            if name == "attn_output":
                projection[0, :] = 0
            writer.add_tensor(f"{block}.{name}.weight", projection)
        writer.add_tensor(f"{block}.ffn_norm.weight", ones)
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(FEED_FORWARD, WIDTH))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(FEED_FORWARD, WIDTH))
        down = weight(WIDTH, FEED_FORWARD)
        down[0, :] = 0
        writer.add_tensor(f"{block}.ffn_down.weight", down)
    writer.add_tensor("output_norm.weight", ones)
    output = weight(len(tokens), WIDTH)
    output[:, 0] = 0
    output[: len(tokens) - len(WORDS), 0] = -_WORDS_ONLY
    writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    write_tokenizer(tokenizer_path(path))
    return path


def ensure_llm_model() -> Path:
    """The built-in LLM's file, written first (with its tokenizer) when either is not there."""
    path = llm_model_path()
    if not (path.is_file() and tokenizer_path(path).is_file()):
        write_random_llama(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferload.local.models.llm", description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=None, help=f"where to write it (default: {llm_model_path()})")
    args = parser.parse_args(argv)
    written = write_random_llama(args.path) if args.path is not None else ensure_llm_model()
    print(f"{written} ({written.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
