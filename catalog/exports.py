"""CSV that a spreadsheet reads as text: every CSV export of the project is written here.

Names come from lineage producers and SQL logs, so a cell may start with what a
spreadsheet runs as a formula (OWASP's CSV injection): such a cell is prefixed
with a quote. Rows end with CRLF (RFC 4180), so the writer quotes a cell holding
a carriage return as well as one holding a newline: a bare CR in a name can no
longer start a new row that begins with a formula.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

# Spreadsheets run cells starting with these (full-width forms too, in some locales).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def safe_cell(value: object) -> str:
    """The cell's text, quoted when a spreadsheet would run it as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A CSV document: the header, then each row, every cell through ``safe_cell``. A row
    with a cell holding another locale's separator has every cell quoted: a spreadsheet
    that splits on it would otherwise start a new cell, perhaps a formula, inside one."""
    buffer = io.StringIO()
    plain = csv.writer(buffer, lineterminator="\r\n")
    quoted = csv.writer(buffer, lineterminator="\r\n", quoting=csv.QUOTE_ALL)
    plain.writerow(header)
    for row in rows:
        cells = [safe_cell(value) for value in row]
        (quoted if any(";" in cell or "\t" in cell for cell in cells) else plain).writerow(cells)
    return buffer.getvalue()
