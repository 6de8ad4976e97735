"""PySpark jobs for Lineage Explorer: the demo lakehouse, the OpenLineage emitter, bulk backfill.

Nothing here imports Django; the jobs talk to the app through OpenLineage HTTP, JSON plans
and result files, so they run unchanged under ``spark-submit`` on any cluster. Importing this
package (or ``pipelines.fingerprint``) does not import PySpark.
"""
