"""Operating Lineage Explorer: liveness and readiness probes and Prometheus metrics."""
