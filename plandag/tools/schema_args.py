"""Arguments described by a JSON Schema instead of a Python signature.

A tool that does not come from a Python function (a tool of an MCP server,
:mod:`plandag.tools.mcp`) states its arguments as a JSON Schema. :func:`json_schema_args_model`
turns that schema into the pydantic args model every :class:`~plandag.tools.base.Tool` has, so
that the compiler, the planner's prompt and ``plandag tools`` treat it like any other tool's:

* ``model_validate`` validates against the JSON Schema itself (the ``jsonschema`` library,
  the schema's own ``$schema`` draft, Draft 2020-12 when it names none) and raises
  ``pydantic.ValidationError`` with one error per problem, located at the argument it is
  about (``("city",)``, ``("items", 2)``): a missing argument is ``missing``, an argument the
  schema does not allow is ``extra_forbidden``, anything else ``json_schema`` with the
  validator's message. The compiler then passes over the errors of arguments fed by
  references, as for any tool.
* An argument the schema does not name is refused (``extra_forbidden``) when the schema
  lists ``properties`` and says nothing of ``additionalProperties`` or
  ``patternProperties``, as for a tool written in Python: a misspelt argument is an error,
  not an argument the server silently drops (servers generated from a signature, as the
  SDK's ``MCPServer`` does, leave ``additionalProperties`` out). A schema that allows more
  (``additionalProperties: true`` or a schema) is followed.
* ``model_json_schema`` returns the schema as given (a copy).
* ``model_fields`` has one field per top-level property, under the property's name (an
  alias), so the argument names are listed the usual way.

Remote ``$ref`` targets are never fetched: a reference the schema does not hold itself is an
error of the schema (``jsonschema`` 4.18 and later resolve only what they are given).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import InitErrorDetails, PydanticCustomError

from plandag.errors import ToolDefinitionError

__all__ = ["MAX_SCHEMA_ERRORS", "JsonSchemaArgs", "json_schema_args_model", "schema_errors"]

MAX_SCHEMA_ERRORS = 50
"""At most this many problems are reported for one set of arguments."""


class JsonSchemaArgs(BaseModel):
    """Base of the args models built by :func:`json_schema_args_model` (module docstring)."""

    model_config = ConfigDict(extra="allow", populate_by_name=False)

    input_schema: ClassVar[dict[str, Any]] = {}
    """The JSON Schema the model validates against (as given)."""
    schema_validator: ClassVar[Any] = None
    """The ``jsonschema`` validator of :attr:`input_schema`."""
    named_only: ClassVar[frozenset[str] | None] = None
    """The only argument names allowed, when the schema is silent about others (module
    docstring); None when the schema alone decides."""

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> JsonSchemaArgs:
        """Validate ``obj`` against the JSON Schema; the model of the valid arguments.

        Raises:
            pydantic.ValidationError: one error per problem (module docstring).
        """
        problems = schema_errors(cls.schema_validator, obj)
        if cls.named_only is not None and isinstance(obj, Mapping):
            problems.extend(
                {"type": "extra_forbidden", "loc": (key,), "input": value}
                for key, value in obj.items()
                if key not in cls.named_only
            )
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return super().model_validate(obj, *args, **kwargs)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON Schema as given (a copy; the generator's options do not apply)."""
        return copy.deepcopy(cls.input_schema)


def _custom(message: str) -> PydanticCustomError:
    return PydanticCustomError("json_schema", "{message}", {"message": message})


def _extra_keys(error: jsonschema.exceptions.ValidationError) -> list[str]:
    """The keys ``additionalProperties: false`` refused in ``error.instance``."""
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    properties = schema.get("properties") or {}
    patterns = list((schema.get("patternProperties") or {}).keys())

    extra = []
    instance = error.instance if isinstance(error.instance, Mapping) else {}
    for key in instance:
        if key in properties:
            continue
        if any(isinstance(pattern, str) and re.search(pattern, str(key)) for pattern in patterns):
            continue
        extra.append(str(key))
    return extra


def schema_errors(validator: Any, instance: Any) -> list[InitErrorDetails]:
    """The problems of ``instance`` under ``validator`` (a ``jsonschema`` validator), as
    pydantic line errors: at most :data:`MAX_SCHEMA_ERRORS`, in the order of their location.

    Args:
        validator: a ``jsonschema`` validator instance, or None (nothing is checked).
        instance: the arguments (a dict, normally).

    Returns:
        ``InitErrorDetails`` for ``pydantic.ValidationError.from_exception_data``; empty when
        the arguments are valid.
    """
    if validator is None:
        return []
    found: list[InitErrorDetails] = []
    errors = sorted(
        validator.iter_errors(instance), key=lambda item: [str(part) for part in item.path]
    )
    for error in errors:
        location = tuple(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, Mapping):
            for name in error.validator_value or ():
                if name not in error.instance:
                    found.append({"type": "missing", "loc": (*location, name), "input": instance})
        elif (
            error.validator == "additionalProperties"
            and error.validator_value is False
            and isinstance(error.instance, Mapping)
        ):
            for key in _extra_keys(error):
                found.append(
                    {
                        "type": "extra_forbidden",
                        "loc": (*location, key),
                        "input": error.instance[key],
                    }
                )
        else:
            found.append({"type": _custom(error.message), "loc": location, "input": error.instance})
        if len(found) >= MAX_SCHEMA_ERRORS:
            break
    return found[:MAX_SCHEMA_ERRORS]


def json_schema_args_model(name: str, schema: Mapping[str, Any]) -> type[JsonSchemaArgs]:
    """The args model of a tool ``name`` whose arguments ``schema`` describes.

    Args:
        name: the tool's name (the model is called ``{name}_args``).
        schema: a JSON Schema of an object (``"type": "object"``, or no ``type``).

    Returns:
        A subclass of :class:`JsonSchemaArgs` (module docstring).

    Raises:
        ToolDefinitionError: the schema is not a valid JSON Schema, or does not describe an
            object.
    """
    document = copy.deepcopy(dict(schema))
    kind = document.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise ToolDefinitionError(
            f"tool {name}: its input schema describes {kind!r}, not an object of named arguments"
        )
    try:
        validator_class = jsonschema.validators.validator_for(
            document, default=jsonschema.Draft202012Validator
        )
        validator_class.check_schema(document)
    except jsonschema.exceptions.SchemaError as error:
        raise ToolDefinitionError(
            f"tool {name}: its input schema is not a valid JSON Schema ({error.message})"
        ) from error
    validator = validator_class(document)
    properties = document.get("properties")
    fields: dict[str, Any] = {}
    if isinstance(properties, Mapping):
        for index, key in enumerate(properties):
            fields[f"argument_{index}"] = (Any, Field(default=None, alias=str(key)))
    model = create_model(f"{name}_args", __base__=JsonSchemaArgs, **fields)
    model.input_schema = document
    model.schema_validator = validator
    if (
        isinstance(properties, Mapping)
        and "additionalProperties" not in document
        and "patternProperties" not in document
    ):
        model.named_only = frozenset(str(key) for key in properties)
    return model
