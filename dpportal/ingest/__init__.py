"""Reading uploaded tables: CSV, TSV and XLSX into one typed, columnar (Parquet) copy.

Compressed uploads (gzip, or a zip holding one table) are unpacked first (`archive`).

Everything streams in bounded memory: bytes are checked while they are written (`scan`), the
text is parsed in blocks by pyarrow and written block by block to Parquet (`text`), and the
profile used for schema proposals is accumulated per block (`profile`). Workbooks are checked
and turned into CSV first (`xlsx`). The budget follows the parsed content (`fingerprint`).
Problems raise `IngestError` with a message for the custodian that says what is wrong, where
(line, column) and how to fix it.

The profile is computed from the raw data but holds only a type proposal and the count of empty
cells per column (owner-only); bounds and categories never come from it.
"""

from dpportal.ingest.archive import Unpacked, unpack_upload
from dpportal.ingest.detect import MAX_COLUMNS
from dpportal.ingest.fingerprint import content_fingerprint
from dpportal.ingest.scan import ByteScan, IngestError, scan_file
from dpportal.ingest.text import IngestResult, ingest_text
from dpportal.ingest.xlsx import XLSX_MAX_MEMBERS, xlsx_to_csv

__all__ = [
    "MAX_COLUMNS",
    "XLSX_MAX_MEMBERS",
    "ByteScan",
    "Unpacked",
    "IngestError",
    "IngestResult",
    "content_fingerprint",
    "ingest_text",
    "scan_file",
    "unpack_upload",
    "xlsx_to_csv",
]
