"""Which values of a config or a command line are secrets: variables named like one or taken
from the caller (`${HF_TOKEN}`), flags named like one (`--api-key X`), logins in addresses.
Pure: names in, names out (redact.py masks the values)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .templates import _ENV_REF, filled_literal

_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|API_?KEY|KEY|CREDENTIALS?|AUTH)(?:$|_)", re.I
)
"""Names of secrets: HF_TOKEN, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY; not TOKENIZERS_PARALLELISM."""


def secret_names(env: Mapping[str, str]) -> list[str]:
    """Env entries whose values are secrets: taken from the caller (`${VAR}`) or named like one.

    Literal values such as `VLLM_ATTENTION_BACKEND: FLASHINFER` stay readable in logs.
    """
    return sorted(k for k, v in env.items() if _ENV_REF.search(v) or _SECRET_NAME.search(k))


def secret_flag(name: str) -> bool:
    """A command-line flag named like a secret (`--api-key`, `--hf-token`)."""
    return bool(secret_names({name.lstrip("-").replace("-", "_").upper(): ""}))


def secret_flag_values(argv: Sequence[str]) -> list[str]:
    """The values of the flags named like secrets in a command line (`--api-key X`,
    `--api-key=X`): masked wherever the command is written."""
    found: list[str] = []
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if not name.startswith("--") or not secret_flag(name):
            continue
        if eq:
            found.append(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            found.append(argv[i + 1])
    return [v for v in found if v]


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """Every secret a command line carries: the values of flags named like secrets
    (`--api-key X`) and each login in a URL (`--otlp-traces-endpoint https://u:T@host/`,
    `--x=https://u:T@host/`), as written and decoded. Pure."""
    return list(argv_secret_names(argv))


def _variable(flag: str, suffix: str = "") -> str:
    stem = re.sub(r"[^A-Z0-9]+", "_", flag.lstrip("-").upper()).strip("_") or "SECRET"
    return f"LLM_BISECT_{stem}{suffix}"


def _value_after(argv: Sequence[str], i: int) -> bool:
    """The word after flag `i` is its value (`--api-key X`), not the next flag."""
    return i + 1 < len(argv) and bool(argv[i + 1]) and not argv[i + 1].startswith("-")


def argv_secret_names(argv: Sequence[str]) -> dict[str, str]:
    """Each secret a command line carries (see argv_secrets), and the variable a printed
    command takes it from (`--api-key X`: LLM_BISECT_API_KEY; the login of
    `--otlp-traces-endpoint URL`: LLM_BISECT_OTLP_TRACES_ENDPOINT_LOGIN). Pure."""
    from .redact import url_logins  # redact is pure and imports nothing of ours

    found: dict[str, str] = {}

    def add(secret: str, variable: str) -> None:
        """A variable of its own per secret (a second URL's login: `..._LOGIN_2`), the secret
        as written in a template (`{{`) and as the server gets it (`{`)."""
        if secret in found:
            return
        taken = set(found.values())
        unique, n = variable, 1
        while unique in taken:
            n += 1
            unique = f"{variable}_{n}"
        for form in dict.fromkeys((secret, filled_literal(secret))):
            found.setdefault(form, unique)

    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        flag = name if name.startswith("--") else ""
        if flag and eq and secret_flag(flag) and value:
            add(value, _variable(flag))
        elif flag and not eq and secret_flag(flag) and _value_after(argv, i):
            add(argv[i + 1], _variable(flag))
        before = argv[i - 1] if i and argv[i - 1].startswith("--") else "url"
        where, url = (flag, value) if flag and eq else (before, word)
        for secret, part in url_logins(url):
            add(secret, _variable(where, f"_{part}"))
    return found


CALLER_SECRET_MIN = 8
"""A caller's variable named like a secret is masked from this length: real tokens are long,
while `HF_HUB_DISABLE_IMPLICIT_TOKEN=true` must not mask every `true`."""


def caller_secret_names(environ: Mapping[str, str]) -> list[str]:
    """The caller's variables named like secrets (a process server inherits them)."""
    return sorted(
        k for k, v in environ.items() if _SECRET_NAME.search(k) and len(v) >= CALLER_SECRET_MIN
    )


def flag_value(words: Sequence[str], flag: str) -> str | None:
    """The value of the first `flag` in a command line (`--flag X` or `--flag=X`; "" where
    nothing follows it), None where it is absent. Pure."""
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name == flag:
            return value if eq else (words[i + 1] if i + 1 < len(words) else "")
    return None


API_KEY_ENV = "VLLM_API_KEY"
"""vLLM's variable for the key its OpenAI API demands (as `--api-key` sets it)."""


def served_api_key(
    argvs: Sequence[Sequence[str]], env: Mapping[str, str], environ: Mapping[str, str]
) -> str | None:
    """The key a server demands of each request (`Authorization: Bearer KEY`): the value of
    `--api-key` on its command lines, else VLLM_API_KEY in its environment (`env`, then
    the caller's `environ` where the server inherits it); `${VAR}` taken from `environ`.
    None where it asks for none, or the value is a template only a launch fills. Pure."""
    for argv in argvs:
        given = flag_value(argv, "--api-key")
        if given is not None:
            return _expanded(given, environ)
    found = env[API_KEY_ENV] if API_KEY_ENV in env else environ.get(API_KEY_ENV)
    return None if found is None else _expanded(found, environ)


def _expanded(value: str, environ: Mapping[str, str]) -> str | None:
    value = _ENV_REF.sub(lambda m: environ.get(m.group(1), m.group(0)), value)
    if not value or _ENV_REF.search(value) or re.search(r"(?<!\{)\{[A-Za-z_]", value):
        return None  # unset, or filled only where it launches
    return filled_literal(value)
