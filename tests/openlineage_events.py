"""OpenLineage's JSON schemas, vendored from the specification (``tests/openlineage/``, its
version in ``VERSION``): :func:`validate` checks a run event and each of its facets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).parent / "openlineage"


def _registry() -> Any:
    from referencing import Registry, Resource

    resources = []
    for path in [SCHEMAS / "OpenLineage.json", *sorted((SCHEMAS / "facets").glob("*.json"))]:
        schema = json.loads(path.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def validate(event: dict[str, Any]) -> None:
    """``event`` valid as a RunEvent, and each of its facets valid against the schema its
    ``_schemaURL`` names (vendored: a facet of another version is a failure here)."""
    from jsonschema import Draft202012Validator

    def check(instance: Any, ref: str) -> None:
        Draft202012Validator({"$ref": ref}, registry=REGISTRY,
                             format_checker=Draft202012Validator.FORMAT_CHECKER).validate(
            instance)

    check(event, "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent")
    facets = [*event["run"].get("facets", {}).values(), *event["job"].get("facets", {}).values()]
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            facets += dataset.get(key, {}).values()
    assert facets
    for facet in facets:
        check(facet, facet["_schemaURL"])
