"""PySpark jobs for GDPR subject requests: scan for a subject's rows, count and erase them.

They never import Django: the app hands them a JSON plan file (datasets, columns, no values),
the identifier values in memory or on stdin, and reads back a JSON result file.
"""
