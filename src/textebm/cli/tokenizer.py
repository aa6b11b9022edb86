"""Train a BPE or WordPiece tokenizer on a prepared dataset (for models trained from scratch).

The folder written loads with `AutoTokenizer.from_pretrained(DIR)`; it has the special tokens
<pad> <unk> <s> </s> <mask> <sep> and adds none of them when encoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from textebm.tokenizer import KINDS


@dataclass
class TrainConfig:
    data: list[Path] = field(metadata={"help": "dataset folder(s) holding train.jsonl (or .jsonl files); "
                                               "trains on their `text` and `text_pair` fields, one "
                                               "vocabulary for the union (e.g. paper c's shared BPE)"})
    vocab_size: int = field(metadata={"help": "vocabulary size, special tokens included", "min": 64})
    out: Path = field(metadata={"help": "output folder"})
    kind: str = field(default="bpe", metadata={"choices": list(KINDS),
                                               "help": "byte-level BPE (GPT-2 style) or WordPiece (BERT style)"})
    lowercase: bool = field(default=False, metadata={"help": "lowercase text before tokenizing"})
    overwrite: bool = field(default=False, metadata={"help": "replace an earlier tokenizer in --out"})


def train(cfg: TrainConfig) -> None:
    """Train a tokenizer on DATA/train.jsonl (one or more datasets) and save it as a Hugging Face tokenizer folder."""
    import logging

    from textebm.data.readers import JSONL_SUFFIXES
    from textebm.errors import TextebmError
    from textebm.outputs import check_output_dir, output_dir
    from textebm.tokenizer import train_jsonl

    paths = [Path(d) / "train.jsonl" if Path(d).is_dir() else Path(d) for d in cfg.data]
    for path in paths:
        if not path.is_file():
            raise TextebmError(f"--data {path}: not found; prepare a dataset with `textebm data prepare`")
        if path.suffix.lower() not in JSONL_SUFFIXES:
            raise TextebmError(f"--data {path}: a {path.suffix or 'file without an extension'} file, where a dataset "
                               "folder or a .jsonl file of {\"text\": ...} rows is expected; turn a text, CSV or TSV "
                               "file into a dataset with `textebm data convert --input FILE --out DIR`")
    check_output_dir(cfg.out, "tokenizer train", cfg.overwrite)  # before the work
    tokenizer = train_jsonl(paths, cfg.vocab_size, cfg.kind, cfg.lowercase)
    with output_dir(cfg.out, "tokenizer train", cfg.overwrite) as tmp:
        tokenizer.save_pretrained(tmp)
    logging.getLogger(__name__).info("wrote a %s tokenizer with %d entries to %s", cfg.kind, len(tokenizer), cfg.out)


COMMANDS = {"train": (TrainConfig, train)}
