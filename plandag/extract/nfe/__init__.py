"""NF-e / NFC-e extraction: the stored plan, its tools and checks, one file at a time.

:func:`extract_document` runs the stored plan (``plan.json``: read → parse → invoice →
field groups in parallel → record with the six NF-e checks) through the scheduler and
returns one record per invoice in the file, or one error record when the file is not a
usable invoice. The batch driver (``plandag extract nfe``) calls it for each input.
"""

from plandag.extract.nfe.document import error_record as error_record
from plandag.extract.nfe.document import extract_document as extract_document
from plandag.extract.nfe.document import load_plan_text as load_plan_text
from plandag.extract.nfe.document import record_status as record_status
from plandag.extract.nfe.record import NfeRecord as NfeRecord
from plandag.extract.nfe.record import nfe_record_json_schema as nfe_record_json_schema

__all__ = [
    "NfeRecord",
    "error_record",
    "extract_document",
    "load_plan_text",
    "nfe_record_json_schema",
    "record_status",
]
