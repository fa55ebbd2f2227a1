"""Templates in a config: `{placeholder}`s filled per probe (`{commit}`, `{port}`), literal
braces written twice, and `${VAR}` taken from the caller's environment. Pure."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from .errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

ENV_REF = _ENV_REF
"""`${VAR}` in a config value."""


IMAGE_PLACEHOLDERS = frozenset({"commit", "short"})
"""What an image reference or a wheel index may name: the commit, whole or short."""


def template_fields(template: str, key: str) -> list[str]:
    """The placeholder names in a `{...}` template; `{{` and `}}` are literal braces. A
    placeholder is a bare name: `{port:d}` or `{commit!r}` would fail only when filled."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"malformed template {template!r} ({exc})") from exc
    for _, field, spec, conversion in parts:
        if field is not None and not field.isidentifier():  # JSON in a flag: {"a": 1}
            whole = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(
                f"'{{{whole}}}' is read as a placeholder: write a literal brace twice "
                f"('{{{{{whole}}}}}')"
            )
        if field is not None and (spec or conversion):
            written = field + (f"!{conversion}" if conversion else "")
            written += f":{spec}" if spec else ""
            raise ValueError(f"placeholder '{{{written}}}' takes no conversion or format")
    return [f for _, f, _, _ in parts if f is not None]


def fill(template: str, values: Mapping[str, str]) -> str:
    """Fill a template validated by `template_fields`."""
    return template.format_map(dict(values))


class _Kept(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def shown(template: str) -> str:
    """A template as a person reads it: its placeholders kept (`{port}`), a literal brace
    (`{{`, as JSON from an eval file is escaped) shown once."""
    return template.format_map(_Kept())


def expand_value(value: str, environ: Mapping[str, str], key: str) -> str:
    """Expand `${VAR}` in one value from the caller's environment; `key` names it in errors."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            raise ConfigError(f"{key}: ${{{name}}} is not set in the environment")
        return environ[name]

    return _ENV_REF.sub(sub, value)


def literal(text: str) -> str:
    """Text as a template holds it to mean itself: its braces doubled (`fill` undoes it)."""
    return text.replace("{", "{{").replace("}", "}}")


def filled_literal(text: str) -> str:
    """What `fill` makes of a template's doubled braces (`{{` → `{`), placeholders aside."""
    return text.replace("{{", "{").replace("}}", "}")


def expand_template(template: str, environ: Mapping[str, str], key: str) -> str:
    """Expand `${VAR}` in a `{...}` template; the values' own braces stay literal."""
    parts = _ENV_REF.split(template)  # text, name, text, name, ..., text
    for i in range(1, len(parts), 2):
        value = expand_value("${" + parts[i] + "}", environ, key)
        parts[i] = literal(value)
    return "".join(parts)


def expand_env(env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Expand `${VAR}` in server.env values from the caller's environment."""
    return {k: expand_value(v, environ, f"server.env.{k}") for k, v in env.items()}
