"""The demo lakehouse: synthetic customers, orders and web events flowing through Spark jobs.

Run it with ``python -m pipelines.demo --lineage-url URL --api-key TOKEN --data-dir DIR``
or ``spark-submit pipelines/demo/__main__.py …`` (see :mod:`pipelines.demo.runner`).
"""
