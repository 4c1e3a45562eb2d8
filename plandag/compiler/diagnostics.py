"""The compiler's diagnostics (:mod:`plandag.dag.diagnostics`), named where the compiler's
callers look for them.
"""

from plandag.dag.diagnostics import DIAGNOSTIC_CODES as DIAGNOSTIC_CODES
from plandag.dag.diagnostics import OUT_OF_REGISTRY_CODES as OUT_OF_REGISTRY_CODES
from plandag.dag.diagnostics import Diagnostic as Diagnostic
from plandag.dag.diagnostics import DiagnosticCollector as DiagnosticCollector
from plandag.dag.diagnostics import Severity as Severity
from plandag.dag.diagnostics import printable as printable

__all__ = [
    "DIAGNOSTIC_CODES",
    "OUT_OF_REGISTRY_CODES",
    "Diagnostic",
    "DiagnosticCollector",
    "Severity",
    "printable",
]
