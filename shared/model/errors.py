"""The one exception type of the model package.

Models arrive from the network (CBOR pushes) and from humans (JSON), so every way a model can be
malformed maps to this single ``ValueError`` subclass; handlers catch one type. The optional
``tree``/``node``/``field`` attributes say where the problem is, for logs and for tests.
"""

from __future__ import annotations


class ModelValidationError(ValueError):
    """A tree, an ensemble or serialised model data breaks the model format's rules."""

    def __init__(
        self,
        message: str,
        *,
        tree: int | None = None,
        node: int | None = None,
        field: str | None = None,
    ) -> None:
        where = []
        if tree is not None:
            where.append(f"tree {tree}")
        if node is not None:
            where.append(f"node {node}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.tree = tree
        self.node = node
        self.field = field
