"""template.yaml as CloudFormation reads it: YAML whose short intrinsics (`!Ref X`, `!GetAtt A.B`, `!Sub ...`) stay
unresolved `Tag`s, and where the checkout's template and layer are.

Production tools (deploy/) and the local stack (local.template, which resolves the tags against local names) both
read the template through here; deploy/ never imports local/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
LAYER_DIR = ROOT / "layers" / "common"


class Tag:
    """An unresolved CloudFormation intrinsic (`!Ref X`, `!GetAtt A.B`, `!Sub ...`)."""

    def __init__(self, name: str, value: Any):
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return f"!{self.name} {self.value!r}"


class _Loader(yaml.SafeLoader):
    pass


def _construct(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Tag:
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return Tag(suffix, value)


_Loader.add_multi_constructor("!", _construct)


def parse(text: str) -> dict[str, Any]:
    """A template's text as data, each intrinsic a `Tag`."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
