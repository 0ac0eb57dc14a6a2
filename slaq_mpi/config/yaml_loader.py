"""The YAML loader of experiment files: safe, refusing a key given twice, reading ``1e-4`` as a
number."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import yaml

__all__ = ["yaml_loader"]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (it keeps the last), and
    reading ``1e-4`` as a number as YAML 1.2 does (PyYAML's YAML 1.1 wants ``1.0e-4``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:  # before merge keys (<<: *anchor) are flattened in
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a key written here may override a merged one
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# exponent floats without a dot or a signed exponent (1e-4, 2E9, -3e+2): text to YAML 1.1
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def yaml_loader() -> type[yaml.SafeLoader]:
    """The YAML loader of experiment files (safe; refuses duplicate keys; reads 1e-4 as a number)."""
    return _Loader
