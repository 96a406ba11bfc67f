"""Data source options: parsing the string options Spark passes into typed values, with
zarrlake errors that name the option at fault."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarrlake.errors import InvalidInputError

STORAGE_OPTIONS = ("endpoint_url", "region", "access_key_id", "secret_access_key", "allow_http")
"""Storage options accepted as plain data source options; any other storage option can be
given as `storage.<name>`."""
STORAGE_PREFIX = "storage."
_BOOL = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def required(options: Mapping[str, str], name: str, what: str) -> str:
    """The option `name`, stripped; InvalidInputError naming `what` when missing or blank."""
    value = _lower(options).get(name)
    if value is None or not str(value).strip():
        raise InvalidInputError(f"the zarrlake data source needs option {name!r} ({what})")
    return str(value).strip()


def get_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """The option `name` as a positive int (`default` when unset); InvalidInputError otherwise."""
    value = _lower(options).get(name)
    if value is None:
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        raise InvalidInputError(f"option {name!r} must be an integer, not {value!r}") from None
    if n <= 0:
        raise InvalidInputError(f"option {name!r} must be positive, not {n}")
    return n


def get_flag(options: Mapping[str, str], name: str) -> bool:
    """The option `name` as a boolean ("true"/"false", any case; False when unset)."""
    value = _lower(options).get(name)
    if value is None:
        return False
    flag = str(value).strip().lower()
    if flag not in ("true", "false"):
        raise InvalidInputError(f"option {name!r} must be 'true' or 'false', not {value!r}")
    return flag == "true"


def get_ints(options: Mapping[str, str], name: str) -> tuple[int, ...] | None:
    """The option `name` as a tuple of ints ("1,2" or "(1, 2)"), or None when unset."""
    value = _lower(options).get(name)
    if value is None:
        return None
    try:
        out = tuple(int(p) for p in str(value).replace(" ", "").strip("()[]").split(",") if p)
    except ValueError:
        raise InvalidInputError(
            f"option {name!r} must be a comma-separated list of integers, not {value!r}"
        ) from None
    if not out or any(n < 0 for n in out):
        raise InvalidInputError(f"option {name!r} must list non-negative integers: {value!r}")
    return out


def get_names(options: Mapping[str, str], *names: str) -> tuple[str, ...] | None:
    """A comma-separated list from the first of `names` that is set."""
    lowered = _lower(options)
    for name in names:
        value = lowered.get(name)
        if value is not None:
            out = tuple(p.strip() for p in str(value).split(",") if p.strip())
            if not out:
                raise InvalidInputError(f"option {name!r} is empty; give it a value")
            return out
    return None


@dataclass(frozen=True)
class RepoOptions:
    """Where the repository is: what Repo.open needs."""

    location: str
    metastore: str | None
    storage_options: dict[str, Any]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RepoOptions:
        """The repository options of a read or write: location, metastore, storage options."""
        location = required(options, "repo", "the repository location: a path or URL")
        lowered = _lower(options)
        storage: dict[str, Any] = {}
        for key, value in lowered.items():
            name = key[len(STORAGE_PREFIX) :] if key.startswith(STORAGE_PREFIX) else key
            if name in STORAGE_OPTIONS or key.startswith(STORAGE_PREFIX):
                storage[name] = (
                    _BOOL.get(str(value).lower(), value) if name == "allow_http" else value
                )
        return cls(location, lowered.get("metastore") or None, storage)

    def open(self):  # -> zarrlake.Repo
        """Open the repository these options name."""
        from zarrlake.repo import Repo

        return Repo.open(
            self.location, metastore=self.metastore, storage_options=self.storage_options or None
        )


def array_paths(options: Mapping[str, str]) -> tuple[str, ...]:
    """The array path(s) of `array` or `arrays`, without leading or trailing slashes."""
    paths = get_names(options, "arrays", "array")
    if paths is None:
        raise InvalidInputError(
            "the zarrlake data source needs option 'array' (an array path such as "
            "'group/temperature') or 'arrays' (a comma-separated list)"
        )
    out = tuple(p.strip("/") for p in paths)
    if any(not p for p in out):
        raise InvalidInputError(
            f"invalid array path in {paths!r}; give paths such as 'group/t2m', comma-separated"
        )
    if len(set(p.rsplit("/", 1)[-1] for p in out)) != len(out):
        raise InvalidInputError(
            f"arrays {', '.join(out)} must have distinct names: each one's value column is "
            "named after its last path component"
        )
    return out
