"""OpenTelemetry spans and metrics, live while the run goes (export: the optional extra
``otel``).

Spans start when the work starts and end when it ends, so a tracing backend sees a step
that is still running (and a crashed process leaves the spans it had already sent). Names,
attributes and values follow the OpenTelemetry semantic conventions for generative AI as
the pinned ``opentelemetry-semantic-conventions`` package carries them (semantic
conventions 1.41's "Semantic conventions for generative client AI spans" and "... GenAI
agent and framework spans"; :mod:`plandag.telemetry` says which version and why),
written with that package's constants:

=====================================  ==================================================
``invoke_agent plandag`` (INTERNAL)    :meth:`plandag.planner.agent.Agent.run`: planning
                                       (its ``chat`` spans), the run, replans and the
                                       joiner, in one trace; ``gen_ai.operation.name``
                                       ``invoke_agent``, ``gen_ai.provider.name`` (the
                                       planner's), ``gen_ai.agent.name`` ``plandag``,
                                       ``gen_ai.agent.version``, ``gen_ai.request.model``.
``invoke_workflow plandag``            :func:`plandag.scheduler.run_plan`: the run of one
(INTERNAL)                             plan, a process of several tool and model calls
                                       that plandag orchestrates (the conventions' workflow
                                       span); ``gen_ai.operation.name``
                                       ``invoke_workflow``, ``gen_ai.workflow.name``
                                       ``plandag``, ``plandag.run_id``, ``plandag.steps``,
                                       ``plandag.status`` at the end.
``execute_tool TOOL`` (INTERNAL)       one attempt of one step: ``gen_ai.operation.name``
                                       ``execute_tool``, ``gen_ai.tool.name``,
                                       ``gen_ai.tool.type`` ``function``,
                                       ``gen_ai.tool.call.id`` (``RUN:STEP``, the step's
                                       idempotency key), ``gen_ai.tool.description``,
                                       ``plandag.step.id``, ``plandag.attempt``.
``chat MODEL`` (CLIENT)                one attempt of one model call, the planner's or a
                                       step's: the one span of the call that carries its
                                       usage (:mod:`plandag.models.telemetry` lists its
                                       attributes).
=====================================  ==================================================

The conventions (1.41) name no span of planning itself: the planner's and the joiner's
model calls are ``chat`` spans under ``invoke_agent``. Usage is on the ``chat`` spans only,
so a backend that adds usage up counts each token once.

A failure sets ``error.type`` (the failure's reason code, else the exception's class name)
and the span's status ``ERROR`` with the message.

The switches below, the conventions' constants and the span machinery live in
:mod:`plandag.telemetry`; the ``chat`` spans and the ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration`` metrics in :mod:`plandag.models.telemetry`; the run
and step spans in :mod:`plandag.scheduler.spans` (the model layer and the scheduler make
their spans with the OpenTelemetry API, without knowing this package); they are handed on
here under the same names.

**Nesting.** Each span is the current span (a context variable) while its work runs, so
what runs inside it is its child: the steps of a run, the model calls of a step or of the
planner. The ``anthropic`` SDK's own spans are off (plandag's ``chat`` span is the call's
one span; the trace context goes in the request's headers). Sync tools run in worker
threads with a copy of the step's context (:func:`plandag.tools.base.run_in_daemon_thread`),
so a sync tool's own spans nest under its step too.

**Content.** Spans carry no message content unless the standard switch
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` asks for it: then
``gen_ai.input.messages`` / ``gen_ai.system_instructions`` / ``gen_ai.output.messages`` on
model calls (the conventions' ``parts`` format) and ``gen_ai.tool.call.arguments`` /
``gen_ai.tool.call.result`` on steps. With ``--redact`` (:func:`set_redact`) no content
reaches any span, whatever the environment says.

**Where spans and metrics go.** plandag's tracer comes from the provider given to
:func:`use_tracer_provider`, else from the global one when an application or
:func:`exporter_from_env` has set it; its meter likewise (:func:`use_meter_provider`);
with neither, no span or metric is made at all (no cost per step).
:func:`exporter_from_env` builds providers from the standard ``OTEL_*`` environment
variables (OpenTelemetry specification, "Environment Variable Specification" and "OTLP
Exporter Configuration") and registers them as the global ones; it imports nothing of the
OpenTelemetry SDK unless an exporter is configured.
"""

from __future__ import annotations

from plandag.models.telemetry import (
    ModelCall,
    end_model_call,
    output_messages,
    sdk_options,
    start_model_call,
    trace_headers,
)
from plandag.planner.spans import start_agent
from plandag.scheduler.spans import WORKFLOW_NAME, end_run, end_step, start_run, start_step
from plandag.telemetry import (
    CAPTURE_CONTENT_VARIABLE,
    SEMCONV_PACKAGE,
    LiveSpan,
    capture_content,
    conventions,
    error_type,
    input_messages,
    meter_provider,
    otel_attributes,
    redacting,
    set_redact,
    start_span,
    system_instructions,
    tracer,
    tracer_provider,
    use_meter_provider,
    use_tracer_provider,
)
from plandag.trace.export import OtelExporter as OtelExporter
from plandag.trace.export import exporter_from_env as exporter_from_env

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "SEMCONV_PACKAGE",
    "WORKFLOW_NAME",
    "LiveSpan",
    "ModelCall",
    "OtelExporter",
    "capture_content",
    "conventions",
    "end_model_call",
    "end_run",
    "end_step",
    "error_type",
    "exporter_from_env",
    "input_messages",
    "meter_provider",
    "otel_attributes",
    "output_messages",
    "redacting",
    "sdk_options",
    "set_redact",
    "start_agent",
    "start_model_call",
    "start_run",
    "start_span",
    "start_step",
    "system_instructions",
    "trace_headers",
    "tracer",
    "tracer_provider",
    "use_meter_provider",
    "use_tracer_provider",
]
