"""Building a chapter's recorded values with one figure changed, for the claim builders' tests."""

import copy


def with_values(base: dict, **paths) -> dict:
    """A deep copy of ``base`` with ``a__b=value`` set at ``[a][b]`` (nested keys joined by ``__``)."""
    r = copy.deepcopy(base)
    for path, v in paths.items():
        keys = path.split("__")
        d = r
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = v
    return r
