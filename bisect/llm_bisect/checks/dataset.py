"""Where the eval's problems come from: the bundled set, a local file, a Hugging Face dataset.

    (nothing)              the bundled set: 64 made-up arithmetic word problems in GSM8K's
                           format (offline; not GSM8K, and every figure of it says so)
    path: x.jsonl          GSM8K-format JSONL: `question`, `answer` ending in `#### N`
    path: x.parquet        the same columns in parquet (the Hub's own file format)
    dataset: openai/gsm8k  `datasets.load_dataset(name, config, split)`, from the node's
                           cache or a local dataset folder; from the Hub only with
                           `download: true` (a misspelt name is then not minutes of retries)
    dataset: ./gsm8k       a folder holding `test.jsonl` and `train.jsonl` (vLLM's own copy,
                           as tests/evals/gsm8k/gsm8k_eval.py downloads it) is read as it is

A `limit` larger than the problems there is an error, never fewer problems asked. The
problems carry their name (`Problems.name`: the set, or the file, and its size), which every
figure of theirs shows.

Few-shot examples (the `vllm` prompt format) come from a dataset's train split, or
else from the first rows of the file, which then are not asked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..files import NotReadable, regular_size
from .gsm8k import MAX_EVAL_BYTES, Problem, load_problems, problem_of

HUB_CONFIGS = {"openai/gsm8k": "main", "gsm8k": "main"}
"""Datasets whose config name is needed and known."""


BUNDLED = "bundled arithmetic"
"""What the bundled set is called wherever its numbers appear: made-up word problems in
GSM8K's format, not GSM8K."""


@dataclass(frozen=True)
class Problems:
    """The problems asked and the worked examples shown before each (may be empty)."""

    asked: list[Problem]
    shots: list[Problem]
    name: str = ""
    """What they are, as every figure of theirs is labelled: "bundled arithmetic, 64
    problems, not GSM8K", "gsm8k.jsonl, 1,319 problems" ('' where not said: `described`)."""

    def described(self) -> str:
        """Their name, or their number where they were given without one."""
        return self.name or f"{len(self.asked):,} problems"


def _named(source: str, asked: int, there: int) -> str:
    """ "{source}, N problems" (of how many are there, where a `limit` kept fewer); the
    bundled set says it is not GSM8K."""
    size = f"{asked:,} problems" if asked == there else f"the first {asked:,} of {there:,} problems"
    return f"{source}, {size}" + (", not GSM8K" if source == BUNDLED else "")


def _rows(rows: Sequence[Any], where: str) -> list[Problem]:
    return [problem_of(row, f"{where} row {i}") for i, row in enumerate(rows, 1)]


def _datasets() -> Any:
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            "eval: reading parquet files and Hugging Face datasets needs the `datasets` "
            "package (pip install 'llm-bisect[gsm8k]')"
        ) from None
    return datasets


@contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """Hugging Face's offline mode for one load: the cache and local folders, no request.

    `datasets` and `huggingface_hub` read HF_HUB_OFFLINE once, when imported, so it is set on
    them here; the caller's environment, which servers inherit, is left as it is."""
    from huggingface_hub import constants as hub  # a dependency of datasets

    names = [n for n in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if hasattr(datasets.config, n)]
    saved = [getattr(datasets.config, n) for n in names], hub.HF_HUB_OFFLINE
    for n in names:
        setattr(datasets.config, n, True)
    hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for n, value in zip(names, saved[0], strict=True):
            setattr(datasets.config, n, value)
        hub.HF_HUB_OFFLINE = saved[1]


@contextmanager
def _quiet() -> Iterator[None]:
    """The libraries' warnings held back during a load (each retry of the Hub is one): what
    went wrong is said once, in the error."""
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "datasets")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _hub(
    name: str, config: str | None, split: str, key: str, download: bool = False
) -> list[Problem]:
    datasets = _datasets()
    try:
        with _quiet(), nullcontext() if download else _offline(datasets):
            table = datasets.load_dataset(name, config or HUB_CONFIGS.get(name), split=split)
    except Exception as exc:  # datasets raises many kinds: name the dataset, not the kind
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = "" if download else "; offline: `download: true` fetches it from the Hub"
        raise ConfigError(
            f"{key}: cannot load '{name}' split '{split}' ({first[:200]}){hint}"
        ) from None
    try:
        return _rows(list(table), f"'{name}' {split}")
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _parquet(path: Path) -> list[Problem]:
    size = regular_size(path)  # `datasets` would open a FIFO, and wait
    if size > MAX_EVAL_BYTES:
        raise NotReadable(0, f"over {MAX_EVAL_BYTES} bytes")
    datasets = _datasets()
    table = datasets.load_dataset("parquet", data_files=str(path), split="train")
    return _rows(list(table), path.name)


def _split_file(dataset: str, split: str) -> Path | None:
    """`DIR/{split}.jsonl` when `dataset` is a local folder holding one (vLLM's own GSM8K copy,
    ci-datasets/gsm8k/{train,test}.jsonl): read as GSM8K-format JSONL, without `datasets`."""
    folder = Path(dataset)
    found = folder / f"{split}.jsonl"
    return found if folder.is_dir() and found.is_file() else None


def _local(dataset: str, split: str, key: str) -> list[Problem]:
    path = Path(dataset) / f"{split}.jsonl"
    try:
        return load_problems(path)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read '{path}' ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{key}: '{path}' is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise ConfigError(f"{key}: '{path}' {exc}") from None


def load(
    *,
    path: Path | None = None,
    dataset: str | None = None,
    dataset_config: str | None = None,
    split: str = "test",
    shots: int = 0,
    limit: int | None = None,
    key: str = "eval",
    download: bool = False,
) -> Problems:
    """The problems an eval config names, and `shots` worked examples. A hub dataset comes
    from the node's cache (or is a local folder) unless `download`."""
    if dataset is not None:
        where = f"{key}.dataset"

        local = _split_file(dataset, split) is not None  # vLLM's copy: each split a file

        def read(part: str) -> list[Problem]:
            if local:
                return _local(dataset, part, where)
            return _hub(dataset, dataset_config, part, where, download)

        asked = read(split)
        source = f"{Path(dataset).name}/{split}.jsonl" if local else f"{dataset} {split} split"
        examples = read("train")[:shots] if shots else []
        if len(examples) < shots:
            raise ConfigError(
                f"{where}: {shots} worked examples asked, its train split holds {len(examples)}"
            )
    else:
        if path is not None and path.suffix == ".parquet":
            every = _parquet(path)
        else:
            every = load_problems(path)
        source = BUNDLED if path is None else path.name
        if shots >= len(every):
            raise ConfigError(f"{key}.shots: {shots} examples leave none of {len(every)} to ask")
        examples, asked = every[:shots], every[shots:]
    if not asked:
        raise ConfigError(f"{key}: holds no problems")
    if limit and limit > len(asked):
        raise ConfigError(
            f"{key}.limit: {limit} problems asked, and {len(asked)} are there to ask "
            "(fewer would not be the eval asked for)"
        )
    kept = asked[:limit] if limit else asked
    return Problems(kept, examples, _named(source, len(kept), len(asked)))
