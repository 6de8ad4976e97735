"""Lineage, impact, root-cause and column-lineage answers (and column-level impact),
orphans and sources against a naive breadth-first search over the edge rows, and node
data as of any instant against rendering it from the rows.

Random graphs (layers of datasets joined by jobs, edges opened and closed at random
instants, changes after the answers were first read), random roots, depths, directions
and instants: the API's answer (ids, distances, sides) must be what a search over
``graph_tableedge`` or ``graph_columnedge`` as of that instant finds. The graph is served as in production: on
PostgreSQL with node documents rendered ahead by a pass, mapped from the host's file,
and nodes changed since rendered on demand.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from catalog import actions
from graph.models import ColumnEdge, Direction, Run, RunState, TableEdge
from tests.graph_builders import JOBS_NS, T0, LineageBuilder

pytestmark = pytest.mark.django_db(transaction=True)

INSTANTS = [T0 + timedelta(days=10 * i) for i in range(8)]


def random_graph(rng: random.Random) -> LineageBuilder:
    """Four layers of datasets; each job reads one to three datasets of lower layers and
    writes one or two of the next, over a random interval of time (some only read, some
    write from a later instant on, some stop writing and read on: retired jobs)."""
    g = LineageBuilder()
    layers = [[f"l{layer}_{i}" for i in range(rng.randint(2, 5))] for layer in range(4)]
    for names in layers:
        g.datasets(*names)
    for n in range(rng.randint(6, 14)):
        layer = rng.randint(1, 3)
        lower = [name for below in layers[:layer] for name in below]
        start = rng.choice(INSTANTS[:6])
        until = rng.choice([None, None, *[t for t in INSTANTS if t > start]])
        # Some jobs only read (never retired); some write only from a later instant on.
        writes = [] if rng.random() < 0.15 else layers[layer]
        g.job(
            f"job_{n}",
            reads=rng.sample(lower, rng.randint(1, min(3, len(lower)))),
            writes=rng.sample(writes, rng.randint(1, min(2, len(writes)))) if writes else [],
            at=start,
            until=until,
        )
        outputs = TableEdge.objects.filter(job=g.jobs[f"job_{n}"], direction=Direction.OUTPUT)
        later = [t for t in INSTANTS if t > start and (until is None or t < until)]
        if later and rng.random() < 0.2:
            start = rng.choice(later)
            outputs.update(valid_from=start)
        if until is None and rng.random() < 0.25:  # it stops writing, reading on: retired
            after = [t for t in INSTANTS if t > start]
            if after:
                outputs.update(valid_to=rng.choice(after))
        add_runs(rng, g, f"job_{n}")
    return g


def add_runs(rng: random.Random, g: LineageBuilder, job: str) -> None:
    """Zero to four runs, each created at a random instant and finishing (completed or
    failed) some days later; the job's latest run is the last created."""
    created = sorted(rng.sample(range(70), rng.randint(0, 4)))
    for day in created:
        at = T0 + timedelta(days=day, hours=1)
        state = rng.choice([RunState.COMPLETED, RunState.FAILED])
        run = g.run(job, state, at)
        Run.objects.filter(pk=run.pk).update(
            state_event_time=at + timedelta(days=rng.randint(0, 6)), ended_at=None
        )


def live_table_edges(at: datetime | None) -> tuple[dict, dict, dict, dict]:
    """(dataset → jobs reading it, job → datasets it writes, dataset → jobs writing it,
    job → datasets it reads) from the edge rows valid at ``at`` (the open ones when
    None), read afresh from the database."""
    edges = TableEdge.objects.select_related("job__namespace", "dataset__namespace")
    reads, writes = defaultdict(set), defaultdict(set)
    read_by, written_by = defaultdict(set), defaultdict(set)
    # A job that had written something by then but writes nothing then is retired: its
    # reads are not part of that graph.
    wrote_by_then = {
        f"job:{e.job.namespace.name}:{e.job.name}"
        for e in edges
        if e.direction == Direction.OUTPUT and (at is None or e.valid_from <= at)
    }
    for e in edges:
        live = (
            e.valid_to is None
            if at is None
            else e.valid_from <= at and (e.valid_to is None or e.valid_to > at)
        )
        if not live:
            continue
        job = f"job:{e.job.namespace.name}:{e.job.name}"
        ds = f"dataset:{e.dataset.namespace.name}:{e.dataset.name}"
        if e.direction == Direction.INPUT:
            reads[ds].add(job)
            read_by[job].add(ds)
        else:
            writes[job].add(ds)
            written_by[ds].add(job)
    for job in wrote_by_then - set(writes):
        for ds in read_by.pop(job, set()):
            reads[ds].discard(job)
    return reads, writes, written_by, read_by


def naive(root: str, depth: int, direction: str, at: datetime | None) -> dict[str, Any]:
    """{node id: (distance, side)} by breadth-first search over the edge rows valid at
    ``at`` (the open ones when None)."""
    reads, writes, written_by, read_by = live_table_edges(at)
    found: dict[str, Any] = {root: (0, "root")}
    sides = {"downstream": (reads, writes), "upstream": (written_by, read_by)}
    for side in ("upstream", "downstream"):
        if direction not in (side, "both"):
            continue
        to_jobs, to_datasets = sides[side]
        frontier = [root]
        if root.startswith("job:"):
            # A job's own inputs or outputs are as near as the job itself.
            frontier = [d for d in sorted(to_datasets[root]) if d not in found]
            for ds in frontier:
                found.setdefault(ds, (0, side))
        for distance in range(1, depth + 1):
            jobs = [j for d in frontier for j in sorted(to_jobs[d]) if j not in found]
            for job in jobs:
                found.setdefault(job, (distance, side))
            frontier = [d for j in jobs for d in sorted(to_datasets[j]) if d not in found]
            for ds in frontier:
                found.setdefault(ds, (distance, side))
    return found


def naive_root_cause(root: str, depth: int, at: datetime | None) -> dict[str, Any]:
    """Root cause from the rows: the upstream search, each job's run as of ``at`` (the
    latest created by then; failed only once its failure was known), and the datasets a
    failed job's output flows into within that upstream graph."""
    upstream = {n: d for n, (d, _) in naive(root, depth, "upstream", at).items()}
    failed = set()
    for name in [n.rpartition(":")[2] for n in upstream if n.startswith("job:")]:
        runs = Run.objects.filter(job__name=name)
        if at is not None:
            runs = runs.filter(created_at__lte=at)
        run = runs.order_by("-created_at", "-id").first()
        if (
            run is not None
            and run.state == RunState.FAILED
            and (at is None or run.state_event_time <= at)
        ):
            failed.add(f"job:{JOBS_NS}:{name}")
    reads, writes, _, _ = live_table_edges(at)
    suspects, queue = set(), sorted(failed)
    while queue:
        node = queue.pop()
        for nxt in (writes if node.startswith("job:") else reads)[node]:
            if nxt in upstream and nxt not in suspects:
                suspects.add(nxt)
                queue.append(nxt)
    return {
        "nodes": upstream,
        "jobs": {n: (d, n in failed) for n, d in upstream.items() if n.startswith("job:")},
        "failures": failed,
        "suspects": {s for s in suspects if s.startswith("dataset:")},
    }


def answered(client: Any, root: str, depth: int, direction: str, at: datetime | None) -> dict:
    params = {"nodeId": root, "depth": depth, "direction": direction}
    if at is not None:
        params["asOf"] = at.isoformat()
    response = client.get("/api/v1/lineage", params)
    assert response.status_code == 200, response.content
    return {n["id"]: (n["distance"], n["side"]) for n in response.json()["graph"]}


@pytest.mark.parametrize("seed", range(6))
def test_lineage_answers_are_a_search_over_the_edge_rows(seed, api, viewer, steward, settings):
    from graph import documents

    rng = random.Random(seed)
    g = random_graph(rng)
    if connection.vendor == "postgresql":
        # Production: documents rendered ahead and mapped from the host's file.
        settings.GRAPH_SHARED_NODE_DATA = True
        assert documents.render_documents().full
    client = api(viewer)
    roots = [g.id(name) for name in g.ds] + [g.id(f"job:{name}") for name in g.jobs]

    def check(rounds: int) -> None:
        for _ in range(rounds):
            root = rng.choice(roots)
            depth = rng.randint(1, 4)
            direction = rng.choice(["upstream", "downstream", "both"])
            at = rng.choice([None, None, *INSTANTS])
            expected = naive(root, depth, direction, at)
            assert answered(client, root, depth, direction, at) == expected, (
                root,
                depth,
                direction,
                at,
            )
            # Impact: what lies downstream, the root left out, and every edge among them
            # and the root (with each dataset's writers among them).
            below = {n: d for n, (d, side) in naive(root, depth, "downstream", at).items()}
            reads, writes, _, _ = live_table_edges(at)
            links = {
                (origin, destination)
                for origin, ends in (*reads.items(), *writes.items())
                for destination in ends
                if origin in below and destination in below
            }
            below.pop(root)
            impact = client.get(
                "/api/v1/lineage/impact",
                {"nodeId": root, "depth": depth} | ({} if at is None else {"asOf": at.isoformat()}),
            )
            assert impact.status_code == 200, impact.content
            found = impact.json()
            shown = {d["nodeId"]: d["distance"] for d in found["datasets"] + found["jobs"]}
            assert shown == below, (root, depth, at)
            assert {(e["origin"], e["destination"]) for e in found["edges"]} == links
            for d in found["datasets"]:
                assert d["viaJobs"] == sorted(o for o, t in links if t == d["nodeId"])
            # Root cause: everything upstream, each job's run as of then, failures first.
            cause = client.get(
                "/api/v1/lineage/root-cause",
                {"nodeId": root, "depth": depth} | ({} if at is None else {"asOf": at.isoformat()}),
            )
            assert cause.status_code == 200, cause.content
            found = cause.json()
            assert {
                "nodes": {n["id"]: n["distance"] for n in found["nodes"]},
                "jobs": {j["nodeId"]: (j["distance"], j["failed"]) for j in found["jobs"]},
                "failures": set(found["failures"]),
                "suspects": set(found["suspects"]),
            } == naive_root_cause(root, depth, at), (root, depth, at)
            flags = [j["failed"] for j in found["jobs"]]
            assert flags == sorted(flags, reverse=True), "failures first"

    def check_ends() -> None:
        """Orphans (no job reads them) and sources (read, written by none), with their
        readers and writers counted, as the rows say at each instant."""
        datasets = [g.id(name) for name in g.ds]
        for at in (None, *INSTANTS):
            reads, _, written_by, _ = live_table_edges(at)
            expected = {
                "orphans": {d: (len(written_by[d]), 0) for d in datasets if not reads[d]},
                "sources": {
                    d: (0, len(reads[d])) for d in datasets if reads[d] and not written_by[d]
                },
            }
            for end, wanted in expected.items():
                params = {"limit": 1000} | ({} if at is None else {"asOf": at.isoformat()})
                page = client.get(f"/api/v1/lineage/{end}", params).json()
                found = {d["nodeId"]: (d["producers"], d["consumers"]) for d in page["datasets"]}
                assert found == wanted, (end, at)

    check(25)
    check_ends()
    # Changes after the answers were read (and after the pass): a job rewired, a read
    # closed, a dataset edited. Every answer follows.
    name = rng.choice(sorted(g.jobs))
    target = rng.choice(sorted(g.ds))
    g.dataset("late")
    g.job(name, writes=["late"], at=INSTANTS[-1] - timedelta(days=1))
    roots.append(g.id("late"))
    edge = TableEdge.objects.filter(valid_to=None, direction=Direction.INPUT).order_by("?").first()
    if edge is not None:
        TableEdge.objects.filter(pk=edge.pk).update(valid_to=INSTANTS[-2])
    actions.update_dataset(g.ds[target], {"description": "Edited"}, actions.Actor(user=steward))
    check(25)
    check_ends()
    shown = client.get("/api/v1/lineage", {"nodeId": g.id(target), "depth": 1}).json()
    (node,) = [n for n in shown["graph"] if n["id"] == g.id(target)]
    assert node["data"]["description"] == "Edited"


def random_column_graph(rng: random.Random) -> LineageBuilder:
    """Three layers of datasets with three fields each; each job copies fields of lower
    layers into every field of the datasets it writes, over a random interval of time,
    and most of them make the dataset they write depend as a whole on the fields of one
    dataset read, from the highest layer (as a filter or a join key would)."""
    g = LineageBuilder()
    fields = ("id", "value", "extra")
    layers = [[f"c{layer}_{i}" for i in range(rng.randint(2, 4))] for layer in range(3)]
    for names in layers:
        g.datasets(*names, fields=fields)
    for n in range(rng.randint(4, 9)):
        layer = rng.randint(1, 2)
        lower = [name for below in layers[:layer] for name in below]
        reads = rng.sample(lower, rng.randint(1, min(2, len(lower))))
        writes = rng.sample(layers[layer], 1)
        start = rng.choice(INSTANTS[:6])
        until = rng.choice([None, None, *[t for t in INSTANTS if t > start]])
        columns = {
            f"{target}.{field}": rng.sample(
                [f"{source}.{f}" for source in reads for f in fields], rng.randint(1, 2)
            )
            for target in writes
            for field in fields
        }
        if rng.random() < 0.7:  # a dataset-level dependency: the whole dataset reads a field
            columns[f"{writes[0]}."] = [f"{max(reads)}.{f}" for f in fields]
        g.job(f"job_{n}", reads=reads, writes=writes, at=start, until=until, columns=columns)
    return g


def field_id(f: Any) -> str:
    return f"datasetField:{f.dataset.namespace.name}:{f.dataset.name}:{f.name}"


def column_edges_at(
    at: datetime | None, dataset_level: bool = False
) -> list[tuple[str, str, str | None]]:
    """(source field id, target field id, job id or None) of the field-to-field edge rows
    valid at ``at`` (the open ones when None); with ``dataset_level``, of the rows whose
    target is a whole dataset (a dataset id in the second place)."""
    rows = ColumnEdge.objects.filter(target_field__isnull=dataset_level).select_related(
        "source_field__dataset__namespace",
        "target_field__dataset__namespace",
        "target_dataset__namespace",
        "job__namespace",
    )
    return [
        (
            field_id(e.source_field),
            (
                f"dataset:{e.target_dataset.namespace.name}:{e.target_dataset.name}"
                if dataset_level
                else field_id(e.target_field)
            ),
            None if e.job is None else f"job:{e.job.namespace.name}:{e.job.name}",
        )
        for e in rows
        if (
            e.valid_to is None
            if at is None
            else e.valid_from <= at and (e.valid_to is None or e.valid_to > at)
        )
    ]


def naive_columns(root: str, depth: int, downstream: bool, at: datetime | None) -> dict:
    """{field id: (distance, side)} by breadth-first search over the column edge rows valid
    at ``at`` (the open ones when None)."""
    up, down = defaultdict(set), defaultdict(set)
    for source, target, _ in column_edges_at(at):
        up[target].add(source)
        down[source].add(target)
    found: dict[str, Any] = {root: (0, "root")}
    for side, links in (("upstream", up), ("downstream", down)):
        if side == "downstream" and not downstream:
            continue
        frontier = [root]
        for distance in range(1, depth + 1):
            frontier = sorted({t for f in frontier for t in links[f] if t not in found})
            for field in frontier:
                found[field] = (distance, side)
    return found


@pytest.mark.parametrize("seed", range(8))
def test_column_lineage_answers_are_a_search_over_the_column_edge_rows(seed, api, viewer, settings):
    from graph import documents

    rng = random.Random(1000 + seed)
    g = random_column_graph(rng)
    if connection.vendor == "postgresql":
        settings.GRAPH_SHARED_NODE_DATA = True
        assert documents.render_documents().full
    client = api(viewer)
    roots = [g.id(spec) for spec in sorted(g.fields)]
    sources = [g.id(spec) for spec in sorted(g.fields) if spec.startswith("c0_")]
    for _ in range(30):
        # Half the roots in the first layer, so that answers reach two layers down.
        root = rng.choice(sources if rng.random() < 0.5 else roots)
        depth = rng.randint(1, 4)
        downstream = rng.random() < 0.5
        at = rng.choice([None, None, *INSTANTS])
        params = {"nodeId": root, "depth": depth, "withDownstream": str(downstream).lower()}
        if at is not None:
            params["asOf"] = at.isoformat()
        response = client.get("/api/v1/column-lineage", params)
        assert response.status_code == 200, response.content
        shown = {n["id"]: (n["distance"], n["side"]) for n in response.json()["graph"]}
        expected = naive_columns(root, depth, downstream, at)
        assert shown == expected, (root, depth, downstream, at)
        if not downstream:
            continue
        # Column-level impact: the fields reached downstream, by dataset, and the jobs of
        # the edges among them; datasets depending as a whole on a field reached (one step
        # further, within the depth), with the jobs of those dependencies.
        below = {f: d for f, (d, side) in expected.items() if side != "upstream"}
        datasets: dict[str, list] = {}
        for field, distance in below.items():
            if field == root:
                continue
            dataset, _, name = field.removeprefix("datasetField:").rpartition(":")
            entry = datasets.setdefault(f"dataset:{dataset}", [distance, set()])
            entry[0] = min(entry[0], distance)
            entry[1].add(name)
        jobs: dict[str, int] = {}
        links: set[tuple[str, str]] = set()
        for source, target, job in column_edges_at(at):
            if source in below and target in below:
                links |= {(source, target)} if job is None else {(source, job), (job, target)}
                if job is not None:
                    jobs[job] = min(jobs.get(job, below[target]), below[target])
        for source, dataset, job in column_edges_at(at, dataset_level=True):
            distance = below.get(source, depth) + 1
            if distance > depth:
                continue
            entry = datasets.setdefault(dataset, [distance, set()])
            entry[0] = min(entry[0], distance)
            links |= {(source, dataset)} if job is None else {(source, job), (job, dataset)}
            if job is not None:
                jobs[job] = min(jobs.get(job, distance), distance)
        params.pop("withDownstream")
        impact = client.get("/api/v1/lineage/impact", params).json()
        assert {
            d["nodeId"]: [d["distance"], set(d["fields"])] for d in impact["datasets"]
        } == datasets, (root, depth, at)
        assert {j["nodeId"]: j["distance"] for j in impact["jobs"]} == jobs, (root, depth, at)
        assert {(e["origin"], e["destination"]) for e in impact["edges"]} == links


@pytest.mark.parametrize("seed", range(6))
def test_node_data_as_of_any_instant_is_what_the_rows_render(seed, api, viewer, steward, settings):
    """Every dataset's node data and every job's latest run in a lineage answer, now and as
    of each instant, are what rendering them from the rows as of then gives: descriptions,
    sensitivity and flags declared at random instants (and copied along the column edges),
    runs created and settled at random instants, edits after the pass that wrote the node
    store. On PostgreSQL answers come through the node store (its directory's change marks,
    flag shortcut and run bounds); on SQLite, where there is none, from the database."""
    from catalog.flags import field_flags, flags_as_of
    from catalog.models import DatasetField, PiiCategory
    from graph import documents, nodedata
    from graph.details import latest_runs

    rng = random.Random(2000 + seed)
    g = random_column_graph(rng)
    for name in sorted(g.jobs):
        add_runs(rng, g, name)
    person = actions.Actor(user=steward)
    customer = actions.ensure_subject_kind("customer")

    def edit(instants: list[datetime]) -> None:
        for n in range(rng.randint(4, 10)):
            field = g.fields[rng.choice(sorted(g.fields))]
            at = rng.choice(instants) + timedelta(hours=rng.randint(0, 48))
            choice = rng.random()
            if choice < 0.4:
                declared = rng.random() < 0.7
                flag = {
                    "pii_category": PiiCategory.IDENTIFIER if declared else "",
                    "subject_kind": customer if declared else None,
                }
                actions.update_field(field, flag, person, at=at)
            elif choice < 0.7:
                actions.update_field(field, {"description": f"field {n}"}, person, at=at)
            else:
                changes = {"description": f"table {n}", "sensitivity": rng.choice(["", "internal"])}
                actions.update_dataset(field.dataset, changes, person, at=at)
            field.refresh_from_db()

    client = api(viewer)
    pks = {g.id(name): ("dataset", ds.pk) for name, ds in g.ds.items()}
    pks |= {g.id(f"job:{name}"): ("job", job.pk) for name, job in g.jobs.items()}
    fields = {g.id(spec): f.pk for spec, f in g.fields.items()}

    def check() -> None:
        for at in (None, *INSTANTS):
            for name in sorted(g.ds):
                params = {"nodeId": g.id(name), "depth": 1}
                if at is not None:
                    params["asOf"] = at.isoformat()
                response = client.get("/api/v1/lineage", params)
                assert response.status_code == 200, response.content
                for node in response.json()["graph"]:
                    kind, pk = pks[node["id"]]
                    if kind == "dataset":
                        expected = nodedata.render_datasets([pk], at)[pk].data
                        assert node["data"] == json.loads(expected), (node["id"], at)
                    else:
                        run = latest_runs([pk], at).get(pk)
                        shown = node["data"]["latestRun"]
                        assert shown == nodedata.run_json(run), (node["id"], at)
            # Each field of a column answer with the subject kind it showed then.
            for spec in sorted(g.fields):
                params = {"nodeId": g.id(spec), "depth": 1, "withDownstream": "true"}
                if at is not None:
                    params["asOf"] = at.isoformat()
                response = client.get("/api/v1/column-lineage", params)
                assert response.status_code == 200, response.content
                shown = {n["id"]: n["data"]["subjectKind"] for n in response.json()["graph"]}
                by_pk = {fields[node_id]: kind for node_id, kind in shown.items()}
                flags = (
                    flags_as_of(list(by_pk), at)
                    if at is not None
                    else field_flags(list(DatasetField.objects.filter(pk__in=list(by_pk))))
                )
                assert by_pk == {pk: flags[pk].subject_kind for pk in by_pk}, (spec, at)

    edit(INSTANTS)
    if connection.vendor == "postgresql":
        settings.GRAPH_SHARED_NODE_DATA = True
        assert documents.render_documents().full
    check()
    edit(INSTANTS[-3:])  # after the pass: the node store's marks no longer hold for these
    check()
