"""The standard OpenLineage facets, checked against the models openlineage-python ships.

A facet whose key the spec defines for where it stands (``schema`` in a dataset's
``facets``, ``ownership`` in a job's, ``outputStatistics`` in an output's
``outputFacets``...) must match the attrs class that ``openlineage.client.generated``
generates from the spec's JSON schema: its required fields present, every field of the
type the class declares, enumerations among their values, and the class's own validators
(a ``runId`` that is a UUID) satisfied. Fields the class does not know are allowed, as
the spec's ``additionalProperties`` allows them; facets the spec does not define (custom
facets) are kept as sent.

``problem(scope, key, value)`` answers the first mismatch as ``(path, message)`` with
the path relative to the facet (``.owners[0].name``), or None. The checkers are built
once per class from its type hints, so nothing here restates a schema by hand.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any

import attr
from openlineage.client.generated import (
    base_subset_dataset,
    catalog_dataset,
    column_lineage_dataset,
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
    dataset_type_dataset,
    dataset_version_dataset,
    datasource_dataset,
    documentation_dataset,
    documentation_job,
    environment_variables_run,
    error_message_run,
    execution_parameters_run,
    external_query_run,
    extraction_error_run,
    hierarchy_dataset,
    input_statistics_input_dataset,
    job_dependencies_run,
    job_type_job,
    lifecycle_state_change_dataset,
    nominal_time_run,
    output_statistics_output_dataset,
    ownership_dataset,
    ownership_job,
    parent_run,
    processing_engine_run,
    schema_dataset,
    source_code_job,
    source_code_location_job,
    sql_job,
    storage_dataset,
    symlinks_dataset,
    tags_dataset,
    tags_job,
    tags_run,
    test_run,
)

# Where a facet stands -> its key in the spec -> the class generated from its schema.
STANDARD: dict[str, dict[str, type]] = {
    "run": {
        "parent": parent_run.ParentRunFacet,
        "nominalTime": nominal_time_run.NominalTimeRunFacet,
        "errorMessage": error_message_run.ErrorMessageRunFacet,
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet,
        "environmentVariables": environment_variables_run.EnvironmentVariablesRunFacet,
        "executionParameters": execution_parameters_run.ExecutionParametersRunFacet,
        "externalQuery": external_query_run.ExternalQueryRunFacet,
        "extractionError": extraction_error_run.ExtractionErrorRunFacet,
        "jobDependencies": job_dependencies_run.JobDependenciesRunFacet,
        "tags": tags_run.TagsRunFacet,
        "test": test_run.TestRunFacet,
    },
    "job": {
        "sql": sql_job.SQLJobFacet,
        "jobType": job_type_job.JobTypeJobFacet,
        "documentation": documentation_job.DocumentationJobFacet,
        "ownership": ownership_job.OwnershipJobFacet,
        "sourceCode": source_code_job.SourceCodeJobFacet,
        "sourceCodeLocation": source_code_location_job.SourceCodeLocationJobFacet,
        "tags": tags_job.TagsJobFacet,
    },
    "dataset": {
        "schema": schema_dataset.SchemaDatasetFacet,
        "columnLineage": column_lineage_dataset.ColumnLineageDatasetFacet,
        "dataSource": datasource_dataset.DatasourceDatasetFacet,
        "documentation": documentation_dataset.DocumentationDatasetFacet,
        "lifecycleStateChange": lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet,
        "ownership": ownership_dataset.OwnershipDatasetFacet,
        "storage": storage_dataset.StorageDatasetFacet,
        "symlinks": symlinks_dataset.SymlinksDatasetFacet,
        "version": dataset_version_dataset.DatasetVersionDatasetFacet,
        "datasetType": dataset_type_dataset.DatasetTypeDatasetFacet,
        "catalog": catalog_dataset.CatalogDatasetFacet,
        "hierarchy": hierarchy_dataset.HierarchyDatasetFacet,
        "tags": tags_dataset.TagsDatasetFacet,
    },
    "inputFacets": {
        "dataQualityMetrics": data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet,
        "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet,
        "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet,
        "subset": base_subset_dataset.InputSubsetInputDatasetFacet,
    },
    "outputFacets": {
        "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,
        "subset": base_subset_dataset.OutputSubsetOutputDatasetFacet,
    },
}

# A mismatch: the path below the checked value (built only on error) and what is wrong.
Problem = tuple[str, str]
Check = Callable[[Any], Problem | None]

_JSON_TYPES: dict[type, tuple[str, Callable[[Any], bool]]] = {
    str: ("a string", lambda v: isinstance(v, str)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
}


def problem(scope: str, key: str, value: Any) -> Problem | None:
    """The first way ``value`` fails the standard facet ``key`` of ``scope`` (run, job,
    dataset, inputFacets, outputFacets), or None (also for a facet the spec does not
    define there)."""
    cls = STANDARD[scope].get(key)
    return None if cls is None else _class_check(cls)(value)


def _nullable(hint: Any) -> tuple[bool, Any]:
    """Whether ``hint`` admits None, and the hint without None."""
    args = typing.get_args(hint)
    if (isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union) and (
        type(None) in args
    ):
        rest = [arg for arg in args if arg is not type(None)]
        return True, rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return False, hint


def _check(hint: Any) -> Check:
    """The checker of a value of type ``hint`` (a hint of a generated class; None is
    settled by the caller)."""
    if hint is Any or hint is object:
        return lambda value: None
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [_check(arg) for arg in args]

        def union(value: Any) -> Problem | None:
            found = [check(value) for check in inner]
            return None if None in found else found[0]

        return union
    origin = typing.get_origin(hint)
    if origin is list:
        nullable, element = _nullable(args[0]) if args else (True, Any)
        item = _check(element)

        def listed(value: Any) -> Problem | None:
            if not isinstance(value, list):
                return ("", "must be a list")
            for index, element in enumerate(value):
                found = item(element) if element is not None or not nullable else None
                if found is not None:
                    return (f"[{index}]{found[0]}", found[1])
            return None

        return listed
    if origin is dict:
        member = _check(args[1]) if len(args) == 2 else _check(Any)

        def mapping(value: Any) -> Problem | None:
            if not isinstance(value, dict):
                return ("", "must be an object")
            for name, element in value.items():
                found = member(element)
                if found is not None:
                    return (f".{name}{found[0]}", found[1])
            return None

        return mapping
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        allowed = frozenset(member.value for member in hint)
        wording = f"must be one of {', '.join(sorted(map(str, allowed)))}"
        return lambda value: (
            None if isinstance(value, (str, int, float)) and value in allowed else ("", wording)
        )
    if isinstance(hint, type) and attr.has(hint):
        return _class_check(hint)
    if hint in _JSON_TYPES:
        wording, test = _JSON_TYPES[hint]
        message = f"must be {wording}"
        return lambda value: None if test(value) else ("", message)
    return _check(Any)  # nothing the generated classes use today


# The checker of each generated class, registered before its fields are compiled, so that
# a class that holds itself (nested schema fields) finds its own checker.
_CLASSES: dict[type, Check] = {}
_UNKNOWN = (None, None, False, None)  # a field the class does not know: allowed as is


def _class_check(cls: type) -> Check:
    """The checker of an object of generated class ``cls``."""
    if cls in _CLASSES:
        return _CLASSES[cls]
    # name -> (type one isinstance settles or None, checker, admits null, validated field)
    known: dict[str, tuple[type | None, Check | None, bool, Any]] = {}
    required: list[str] = []

    def obj(value: Any) -> Problem | None:
        if not isinstance(value, dict):
            return ("", "must be an object")
        for name in required:
            if name not in value:
                return (f".{name}", "is required")
        for name, item in value.items():
            plain, check, nullable, validated = known.get(name, _UNKNOWN)
            if check is None or (plain is not None and type(item) is plain):
                continue
            if item is None:
                if nullable:
                    continue
                return (f".{name}", "must not be null")
            found = check(item)
            if found is None and validated is not None:
                found = _validated(validated, item)
            if found is not None:
                return (f".{name}{found[0]}", found[1])
        return None

    _CLASSES[cls] = obj
    hints = typing.get_type_hints(cls)
    for field in attr.fields(cls):
        nullable, hint = _nullable(hints[field.name])
        validated = field if field.validator is not None else None
        plain = hint if hint in (str, bool) and validated is None else None
        known[field.name] = (plain, _check(hint), nullable, validated)
        if field.default is attr.NOTHING:
            required.append(field.name)
    return obj


# Values each validator passed (producer URLs, schema URLs: the same few again and again).
_PASSED: dict[Any, set[Any]] = {}
_PASSED_LIMIT = 4096


def _validated(field: Any, value: Any) -> Problem | None:
    """What the class's own validator of ``field`` (none uses the instance) says of ``value``."""
    passed = _PASSED.setdefault(field.validator, set())
    if isinstance(value, str) and value in passed:
        return None
    try:
        field.validator(None, field, value)
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        return ("", f"is not valid: {str(exc)[:200] or type(exc).__name__}")
    if isinstance(value, str) and len(passed) < _PASSED_LIMIT:
        passed.add(value)
    return None
