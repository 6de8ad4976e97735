"""A synthetic lakehouse lineage graph, deterministic for a seed (no Django here).

Shape, for N datasets:

- five layers: raw 20 %, staging 25 %, core 20 %, marts 25 %, reports 10 %;
- every non-raw dataset is written by one job (jobs write one or two
  datasets of one layer), so there are about N / 2 jobs;
- a job reads ~3 datasets from the layers below it (mostly the one just
  below, with a popularity skew: some datasets are read far more than
  others), and mart/report jobs often read a *hub* (a conformed core table
  such as a calendar or customer dimension) — hubs end up read by thousands
  of jobs at 100,000 datasets;
- history: about ``closed_fraction`` of table edges are closed — inputs a
  job read until its wiring changed at some instant, replaced by the
  current inputs from then on — and column edges follow their table edges;
- ~``columns`` fields per dataset; each output field comes from 1-3 input
  fields (IDENTITY 45 %, TRANSFORMATION 25 %, AGGREGATION 10 %, INDIRECT
  20 %); field 0 tends to flow by identity, so keys (``customer_id`` in the
  CRM sources, a subject identifier) propagate down the layers;
- owners (teams), retention policies and one latest run per job (6 % failed).

Ids are 0-based here; the loader adds offsets. Field ``f`` of dataset ``d``
has local id ``d * columns + f``. Times are microseconds since the epoch;
``OPEN`` marks an edge still valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

OPEN = -1
LAYERS = ("raw", "staging", "core", "mart", "report")
LAYER_SHARE = (0.20, 0.25, 0.20, 0.25, 0.10)
SUBTYPES = (
    ("DIRECT", "IDENTITY", 0.45),
    ("DIRECT", "TRANSFORMATION", 0.25),
    ("DIRECT", "AGGREGATION", 0.10),
    ("INDIRECT", "JOIN", 0.08),
    ("INDIRECT", "FILTER", 0.07),
    ("INDIRECT", "GROUP_BY", 0.05),
)
FIELD_TYPES = ("string", "bigint", "double", "timestamp", "boolean", "date", "decimal(18,2)")
DATASET_NAMESPACES = (
    "postgres://crm-db:5432",
    "kafka://events-broker:9092",
    "s3://acme-lake",
    "bigquery",
    "postgres://reporting-db:5432",
)
JOB_NAMESPACES = ("airflow://prod-scheduler", "spark://etl-cluster")
RETENTION = (
    ("30-days", 30, "delete"),
    ("1-year", 365, "delete"),
    ("3-years", 1095, "anonymise"),
    ("7-years", 2555, "archive"),
)
SUBJECT_KIND = "customer"

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GenConfig:
    datasets: int
    seed: int = 42
    columns: int = 10
    closed_fraction: float = 0.2
    hubs: int | None = None
    hub_read_share: float = 0.5
    history_days: int = 365
    anchor: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    owners: int = 300

    @property
    def hub_count(self) -> int:
        return self.hubs if self.hubs is not None else max(2, self.datasets // 10_000)


@dataclass
class Generated:
    config: GenConfig
    namespaces: list[str]
    job_namespaces: list[str]
    # datasets
    ds_namespace: IntArray
    ds_name: list[str]
    ds_first_seen: IntArray
    ds_owner: IntArray
    ds_owner2: IntArray  # -1 when none
    ds_retention: IntArray  # -1 when none
    hubs: IntArray
    # fields (local id = dataset * columns + ordinal)
    field_name: list[str]  # by ordinal, overridden per dataset below
    field_type: IntArray
    subject_fields: IntArray  # local field ids identifying a customer
    email_fields: IntArray
    # jobs
    job_namespace: IntArray
    job_name: list[str]
    job_created: IntArray
    job_state: list[str]
    job_started: IntArray
    job_ended: IntArray
    # table edges
    te_job: IntArray
    te_ds: IntArray
    te_out: IntArray
    te_from: IntArray
    te_to: IntArray
    # column edges
    ce_job: IntArray
    ce_src: IntArray
    ce_tds: IntArray
    ce_tgt: IntArray  # -1: dataset-level dependency
    ce_kind: IntArray  # index into SUBTYPES
    ce_from: IntArray
    ce_to: IntArray
    stats: dict[str, int] = field(default_factory=dict)


def _us(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _skewed(rng: np.random.Generator, size: int, n: int) -> IntArray:
    """n indexes in [0, size) with a popularity skew (low indexes read more often)."""
    return np.minimum((size * rng.random(n) ** 2.2).astype(np.int64), size - 1)


def generate(config: GenConfig) -> Generated:
    rng = np.random.default_rng(config.seed)
    n = config.datasets
    cols = config.columns
    anchor = _us(config.anchor)
    day = 86_400 * 1_000_000
    start = anchor - config.history_days * day

    # --- datasets by layer ------------------------------------------------------------
    counts = [int(n * share) for share in LAYER_SHARE]
    counts[0] += n - sum(counts)
    layer = np.repeat(np.arange(len(LAYERS)), counts)
    layer_start = np.concatenate([[0], np.cumsum(counts)])
    namespace = np.where(
        layer == 0,
        rng.choice([0, 1, 2], size=n, p=[0.5, 0.2, 0.3]),
        np.where(layer == 4, 4, rng.choice([2, 3], size=n)),
    )
    names = []
    topics = ("orders", "customers", "payments", "sessions", "products", "shipments", "events")
    for i in range(n):
        layer_name = LAYERS[layer[i]]
        topic = topics[i % len(topics)]
        ns = namespace[i]
        if ns == 0:
            names.append(f"crm.public.{topic}_{i:06d}")
        elif ns == 1:
            names.append(f"{topic}.v1.stream_{i:06d}")
        elif ns == 2:
            names.append(f"warehouse/{layer_name}/{topic}/part_{i:06d}")
        elif ns == 3:
            names.append(f"acme-analytics.{layer_name}.{topic}_{i:06d}")
        else:
            names.append(f"reporting.{topic}_report_{i:06d}")
    hubs = layer_start[2] + np.arange(min(config.hub_count, counts[2]))
    first_seen = start + (rng.random(n) * 30 * day).astype(np.int64) + layer * day

    # --- jobs: consecutive datasets of one layer written together -----------------------
    writes: list[list[int]] = []
    for lay in range(1, len(LAYERS)):
        i, end = int(layer_start[lay]), int(layer_start[lay + 1])
        while i < end:
            size = 2 if rng.random() < 0.6 and i + 1 < end else 1
            writes.append(list(range(i, i + size)))
            i += size
    jobs = len(writes)
    job_layer = np.asarray([layer[w[0]] for w in writes], dtype=np.int64)
    job_created = start + (rng.random(jobs) * config.history_days * 0.3 * day).astype(np.int64)
    job_created = np.maximum(job_created, first_seen[[w[0] for w in writes]])
    # Wiring changes: inputs swapped at change_at (one of the closed-edge sources).
    change_at = job_created + (rng.random(jobs) * (anchor - job_created)).astype(np.int64)

    te_job, te_ds, te_out, te_from, te_to = [], [], [], [], []
    input_start = np.zeros(jobs + 1, dtype=np.int64)
    in_ds: list[int] = []
    in_from: list[int] = []
    in_to: list[int] = []
    hub_weights = 1.0 / np.arange(1, hubs.size + 1) ** 0.8
    hub_weights /= hub_weights.sum()
    # Share of jobs whose wiring changed, sized so ~closed_fraction of edges end up closed.
    change_share = min(1.0, config.closed_fraction * 6.4 / 1.6)
    for j in range(jobs):
        lay = int(job_layer[j])
        k = int(min(8, 1 + rng.poisson(2.0)))
        below = np.where(rng.random(k) < 0.75, lay - 1, rng.integers(0, lay, size=k))
        picks = []
        for src_layer in below:
            lo, hi = layer_start[src_layer], layer_start[src_layer + 1]
            picks.append(int(lo + _skewed(rng, int(hi - lo), 1)[0]))
        if lay >= 3 and hubs.size and rng.random() < config.hub_read_share:
            picks.append(int(rng.choice(hubs, p=hub_weights)))
        picks = list(dict.fromkeys(picks))
        created = int(job_created[j])
        changed = rng.random() < change_share
        former: list[int] = []
        if changed:
            # The job used to read 1-2 other datasets until change_at; some current
            # inputs were added at change_at.
            lo, hi = layer_start[lay - 1], layer_start[lay]
            former = [int(lo + x) for x in _skewed(rng, int(hi - lo), int(rng.integers(1, 3)))]
            former = [f for f in dict.fromkeys(former) if f not in picks]
        for idx, ds in enumerate(picks):
            frm = int(change_at[j]) if changed and idx == 0 else created
            in_ds.append(ds)
            in_from.append(frm)
            in_to.append(OPEN)
        for ds in former:
            in_ds.append(ds)
            in_from.append(created)
            in_to.append(int(change_at[j]))
        input_start[j + 1] = len(in_ds)
        for ds, frm, to in zip(
            in_ds[input_start[j] :], in_from[input_start[j] :], in_to[input_start[j] :], strict=True
        ):
            te_job.append(j)
            te_ds.append(ds)
            te_out.append(0)
            te_from.append(frm)
            te_to.append(to)
        for ds in writes[j]:
            te_job.append(j)
            te_ds.append(ds)
            te_out.append(1)
            te_from.append(created)
            te_to.append(OPEN)

    in_ds_a = np.asarray(in_ds, dtype=np.int64)
    in_from_a = np.asarray(in_from, dtype=np.int64)
    in_to_a = np.asarray(in_to, dtype=np.int64)

    # --- column edges: vectorised over every output field --------------------------------
    out_job = np.repeat(np.arange(jobs), [len(w) for w in writes])
    out_ds = np.asarray([d for w in writes for d in w], dtype=np.int64)
    tgt_job = np.repeat(out_job, cols)
    tgt_ds = np.repeat(out_ds, cols)
    tgt_ord = np.tile(np.arange(cols), out_ds.size)
    tgt_field = tgt_ds * cols + tgt_ord
    per_field = rng.choice([1, 2, 3, 4], size=tgt_field.size, p=[0.15, 0.30, 0.30, 0.25])
    e_job = np.repeat(tgt_job, per_field)
    e_tds = np.repeat(tgt_ds, per_field)
    e_tgt = np.repeat(tgt_field, per_field)
    e_tord = np.repeat(tgt_ord, per_field)
    n_inputs = input_start[e_job + 1] - input_start[e_job]
    choice = input_start[e_job] + (rng.random(e_job.size) * n_inputs).astype(np.int64)
    src_ds = in_ds_a[choice]
    same_ord = rng.random(e_job.size) < 0.5
    src_ord = np.where(same_ord, e_tord, rng.integers(0, cols, size=e_job.size))
    e_src = src_ds * cols + src_ord
    e_from = in_from_a[choice]
    e_to = in_to_a[choice]
    probs = np.asarray([p for _, _, p in SUBTYPES])
    e_kind = rng.choice(len(SUBTYPES), size=e_job.size, p=probs / probs.sum())
    # Keys flow by identity: field 0 copied from a field 0 stays an identity copy.
    e_kind[(e_tord == 0) & (src_ord == 0) & (rng.random(e_job.size) < 0.8)] = 0
    # A few dataset-level (INDIRECT FILTER, no target field) dependencies per job.
    pick = rng.random(jobs) < 0.2
    dl_jobs = np.flatnonzero(pick)
    dl_choice = input_start[dl_jobs] + (
        rng.random(dl_jobs.size) * (input_start[dl_jobs + 1] - input_start[dl_jobs])
    ).astype(np.int64)
    first_out = np.asarray([writes[j][0] for j in dl_jobs], dtype=np.int64)
    e_job = np.concatenate([e_job, dl_jobs])
    e_src = np.concatenate([e_src, in_ds_a[dl_choice] * cols + rng.integers(0, cols, dl_jobs.size)])
    e_tds = np.concatenate([e_tds, first_out])
    e_tgt = np.concatenate([e_tgt, np.full(dl_jobs.size, -1)])
    e_kind = np.concatenate([e_kind, np.full(dl_jobs.size, 4)])
    e_from = np.concatenate([e_from, in_from_a[dl_choice]])
    e_to = np.concatenate([e_to, in_to_a[dl_choice]])
    # One edge per (job, source, target, kind).
    key = np.stack([e_job, e_src, e_tgt, e_tds, e_kind, e_from])
    _, first = np.unique(key, axis=1, return_index=True)
    first.sort()

    # --- catalog extras ----------------------------------------------------------------
    raw_crm = np.flatnonzero((layer == 0) & (namespace == 0))
    subject_ds = raw_crm[rng.random(raw_crm.size) < 0.25]
    owner = rng.integers(0, config.owners, size=n)
    owner2 = np.where(rng.random(n) < 0.2, rng.integers(0, config.owners, size=n), -1)
    owner2 = np.where(owner2 == owner, -1, owner2)
    retention = np.where(rng.random(n) < 0.5, rng.integers(0, len(RETENTION), size=n), -1)
    base_names = ["id", "created_at", "updated_at", "status", "amount", "country", "channel"]
    field_name = [base_names[i] if i < len(base_names) else f"attr_{i:02d}" for i in range(cols)]
    field_type = rng.integers(0, len(FIELD_TYPES), size=n * cols)

    states = rng.choice(["COMPLETED", "FAILED", "RUNNING"], size=jobs, p=[0.90, 0.06, 0.04])
    started = anchor - (rng.random(jobs) * 2 * day).astype(np.int64)
    ended = np.where(
        states == "RUNNING", OPEN, started + (rng.random(jobs) * 3600e6).astype(np.int64)
    )

    gen = Generated(
        config=config,
        namespaces=list(DATASET_NAMESPACES),
        job_namespaces=list(JOB_NAMESPACES),
        ds_namespace=namespace,
        ds_name=names,
        ds_first_seen=first_seen,
        ds_owner=owner,
        ds_owner2=owner2,
        ds_retention=retention,
        hubs=hubs,
        field_name=field_name,
        field_type=field_type,
        subject_fields=subject_ds * cols,
        email_fields=subject_ds * cols + 1,
        job_namespace=np.where(job_layer <= 2, 1, 0),
        job_name=[f"{LAYERS[job_layer[j]]}.build_{j:06d}" for j in range(jobs)],
        job_created=job_created,
        job_state=states.tolist(),
        job_started=started,
        job_ended=ended,
        te_job=np.asarray(te_job, dtype=np.int64),
        te_ds=np.asarray(te_ds, dtype=np.int64),
        te_out=np.asarray(te_out, dtype=np.int64),
        te_from=np.asarray(te_from, dtype=np.int64),
        te_to=np.asarray(te_to, dtype=np.int64),
        ce_job=e_job[first],
        ce_src=e_src[first],
        ce_tds=e_tds[first],
        ce_tgt=e_tgt[first],
        ce_kind=e_kind[first],
        ce_from=e_from[first],
        ce_to=e_to[first],
    )
    gen.stats = {
        "datasets": n,
        "fields": n * cols,
        "jobs": jobs,
        "hubs": int(hubs.size),
        "table_edges": int(gen.te_job.size),
        "table_edges_closed": int((gen.te_to != OPEN).sum()),
        "column_edges": int(gen.ce_job.size),
        "column_edges_closed": int((gen.ce_to != OPEN).sum()),
        "subject_fields": int(subject_ds.size),
    }
    return gen
