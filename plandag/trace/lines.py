"""The JSON text of the trace lines a run writes for every step, assembled from its parts.

:class:`~plandag.trace.writer.TraceWriter` writes a line by building a dict, converting it
(:func:`~plandag.scheduler.result.to_jsonable`), masking it (:mod:`plandag.trace.redact`)
and encoding it whole. For the three lines of each step (``step_started``, ``step_ended``,
the ``step`` span) :class:`StepLines` writes the same text from the parts: the keys and the
words that come back at every step (tool names, statuses, reasons) are masked and encoded
once per environment of secrets, numbers are written as the JSON encoder writes them,
and a result, args or error is encoded by the C encoder as it is when masking and
conversion would keep it (a walk with the same rules). Whatever it cannot vouch for (a value
that masking or conversion would change, a time that is not a finite number, a redactor
other than :class:`~plandag.trace.redact.Redactor`) makes it answer None, and the writer
takes its general way for that line: the text is the same either way.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring
from typing import Any

from pydantic_core import SchemaSerializer, core_schema

from plandag.scheduler.result import AttemptRecord, StepRecord
from plandag.surrogates import escape_json_text
from plandag.trace.redact import KEY_NUMBERS, KEY_PLAIN, Redactor, is_secret_key

__all__ = ["LINE_ENCODER", "StepLines", "attempt_status"]

#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``, built once: the encoder
#: of every trace line.
LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

_CANCEL_REASONS = frozenset({"deadline", "stalled", "interrupted"})


# The keys of the lines StepLines writes (the writer's _observe and _step_span).
_FIXED_KEYS = (
    "attempt",
    "tool",
    "status",
    "reason",
    "detail",
    "error",
    "depends_on",
    "attempts",
    "checks",
    "args",
    "result",
    "superseded_by",
    "segment",
    "restored",
    "start",
    "end",
    "retry",
    "children",
    "kind",
    "passed",
    "message",
)

#: Texts remembered (their JSON once masked): at most this many, of at most
#: :data:`_TEXT_CHARACTERS` characters each; then forgotten all at once.
_TEXTS = 4096
_TEXT_CHARACTERS = 256
#: How deep and how many items a value is looked at before the general way is taken
#: (far within to_jsonable's own limits, so that it never cuts what is looked at here).
_DEPTH = 16
_ITEMS = 4096


def _string(text: str) -> str:
    """``text`` as a JSON string in a trace line (lone surrogates escaped)."""
    return escape_json_text(encode_basestring(text))


_FLOAT_JSON = SchemaSerializer(core_schema.float_schema()).to_json
# used only when it writes what float.__repr__ writes (the band's ends, a time's 17 digits)
_FLOAT_JSON_SAME = all(
    _FLOAT_JSON(sample).decode() == float.__repr__(sample)
    for sample in (0.0001, 0.1, 1.5, 2.0**30 + 2.0**-22, 1796658087.2491956, 9.999999999999999e15)
)


def _float(value: float) -> str:
    """``float.__repr__(value)``: the JSON encoder's text of a finite float, its shortest
    round-trip digits.

    Between 1e-4 and 1e16 (times since the epoch, durations) pydantic-core's JSON
    serializer (Ryu's algorithm) writes them: the same text, several times cheaper than
    ``float.__repr__`` (David Gay's dtoa, in big integers for the 16 or 17 digits of a
    time). Outside that band the two write exponents differently (``1e-05`` and ``1e-5``).
    """
    if 0.0001 <= value < 1e16 and _FLOAT_JSON_SAME:
        return _FLOAT_JSON(value).decode()
    return float.__repr__(value)


def _ints(values: Any) -> str | None:
    """The JSON text of a list of ints (a step's parents), or None for anything else."""
    if type(values) is not list:
        return None
    if len(values) == 1:  # a chain's step
        only = values[0]
        return f"[{only}]" if type(only) is int else None
    for item in values:
        if type(item) is not int:
            return None
    return "[" + ",".join(map(int.__repr__, values)) + "]"


def _number_text(value: Any) -> str | None:
    """:func:`_number`, and ``null``, ``true``, ``false`` for None and booleans."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    return _number(value)


def _number(value: Any) -> str | None:
    """A number's JSON text (the encoder's: ``float.__repr__``, ``int.__repr__``), or None
    for a value that is not exactly an int or a finite float (converted otherwise)."""
    kind = type(value)
    if kind is float:
        return _float(value) if math.isfinite(value) else None
    if kind is int:
        return int.__repr__(value)
    return None


class StepLines:
    """The text of one run's step lines, as :class:`~plandag.trace.writer.TraceWriter`'s
    general way writes them.

    Args:
        run_id: the run's id, on every line.
        segment: the writer's segment number.
        redact: the writer's redactor: a :class:`~plandag.trace.redact.Redactor` or None
            (nothing masked).

    Call :meth:`ready` before each group of lines: it forgets what was learnt when the
    redactor's secrets changed, and says whether the lines can be written here at all.
    """

    def __init__(self, run_id: str, segment: int, redact: Redactor | None) -> None:
        self._redact = redact
        self._segment = str(int(segment))
        run = _string(run_id)
        self._event_head = '{"type":"event","run_id":' + run + ',"time":'
        self._span_head = '{"type":"span","run_id":' + run + ',"time":'
        self._rules: tuple[str, ...] | None = None
        self._fixed = redact is None
        # text -> its JSON once masked; text -> whether masking keeps it
        self._texts: dict[str, str] = {}
        self._kept_texts: dict[str, bool] = {}
        self._keys: dict[str, int] = {}
        # tool name -> the end of a span name's JSON text (names are written as they are)
        self._names: dict[str, str] = {}
        # step id -> the time of its last step_started line, that time's JSON text and the
        # id's
        self._starts: dict[int, tuple[Any, str, str]] = {}
        # tool name -> the texts of a plain step's lines around it (:meth:`_tool_parts`),
        # and those that hold only the status ``succeeded`` (:meth:`_plain_parts`), for the
        # redactor's current rules
        self._tools: dict[str, tuple[str, str, str]] = {}
        self._plain: tuple[str, str, str] | None = None

    def ready(self) -> bool:
        """Whether the step lines can be written here now (the redactor's rules keep every
        key of them); learns the redactor's current rules first."""
        redact = self._redact
        if redact is None:
            return True
        rules = redact.rules()
        if rules is not self._rules:
            self._rules = rules
            self._texts.clear()
            self._kept_texts.clear()
            self._keys.clear()
            self._tools.clear()
            self._plain = None
            self._fixed = all(self._key_kind(key) == KEY_PLAIN for key in _FIXED_KEYS) and (
                self._key_kind("step_id") in (KEY_PLAIN, KEY_NUMBERS)
            )
        return self._fixed

    # -- parts -------------------------------------------------------------------------

    def _learn(self, text: str) -> tuple[str, bool]:
        masked = text if self._redact is None else self._redact.text(text)
        encoded = _string(masked)
        kept = masked == text
        if len(text) <= _TEXT_CHARACTERS:
            if len(self._texts) >= _TEXTS:
                self._texts.clear()
                self._kept_texts.clear()
            self._texts[text] = encoded
            self._kept_texts[text] = kept
        return encoded, kept

    def text(self, text: str) -> str:
        """``text`` masked (as a string value under a key that names nothing special) and
        encoded as a JSON string."""
        encoded = self._texts.get(text)
        return encoded if encoded is not None else self._learn(text)[0]

    def _key_kind(self, key: Any) -> int:
        if type(key) is not str:
            return 0
        kind = self._keys.get(key)
        if kind is None:
            kind = KEY_PLAIN if self._redact is None else self._redact.key_kind(key)
            if len(key) <= _TEXT_CHARACTERS:
                if len(self._keys) >= _TEXTS:
                    self._keys.clear()
                self._keys[key] = kind
        return kind

    def _kept(self, value: Any, depth: int, budget: list[int]) -> bool:
        """Whether masking and conversion keep ``value`` (under a plain key) as it is;
        ``budget``: how many more items may be looked at."""
        kind = type(value)
        if kind is str:
            kept = self._kept_texts.get(value)
            return kept if kept is not None else self._learn(value)[1]
        if value is None or kind is int or kind is bool:
            return True
        if kind is float:
            return math.isfinite(value)
        if depth > _DEPTH:
            return False
        if kind is dict:
            budget[0] -= len(value)
            if budget[0] < 0:
                return False
            keys, texts = self._keys, self._kept_texts
            for key, item in value.items():
                key_kind = keys.get(key) if type(key) is str else 0
                if key_kind is None:
                    key_kind = self._key_kind(key)
                if key_kind != KEY_PLAIN:
                    if key_kind != KEY_NUMBERS or _number_text(item) is None:
                        return False  # under KEY_NUMBERS: a number, a boolean or None only
                    continue
                item_kind = type(item)
                if item_kind is str:  # as below, without the call
                    kept = texts.get(item)
                    if kept is None:
                        kept = self._learn(item)[1]
                    if not kept:
                        return False
                elif item is None or item_kind is int or item_kind is bool:
                    continue
                elif not self._kept(item, depth + 1, budget):
                    return False
            return True
        if kind is list:
            budget[0] -= len(value)
            if budget[0] < 0:
                return False
            secrets = self._redact is not None
            for item in value:
                if (
                    secrets
                    and type(item) is list
                    and len(item) == 2
                    and isinstance(item[0], str)
                    and item[1] is not None
                    and is_secret_key(item[0])
                ):  # a header pair: masked
                    return False
                if not self._kept(item, depth + 1, budget):
                    return False
            return True
        return False

    def _container(self, value: Any) -> str | None:
        """The JSON text of a dict or list that masking and conversion keep, else None."""
        if not self._kept(value, 1, [_ITEMS]):
            return None
        return escape_json_text(LINE_ENCODER.encode(value))

    def value(self, value: Any) -> str | None:
        """``value``'s JSON text under a key that names nothing special, when masking and
        conversion keep it as it is; None otherwise."""
        kind = type(value)
        if kind is str:
            encoded = self._texts.get(value)
            if encoded is not None:
                return encoded
            return self._learn(value)[0]
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value else "false"
        if kind is int or kind is float:
            return _number(value)
        if kind is dict or kind is list:
            return self._container(value)
        return None

    def result(self, result: Any, text: str | None = None, compact: bool = False) -> str:
        """The JSON text of a step's result (JSON-safe already, bounded): as it is when
        masking keeps it, else masked by the redactor.

        Args:
            result: the result.
            text: its JSON text (lone surrogates escaped) when known, else None.
            compact: ``text`` is its compact JSON as the encoder wrote it (no surrogate
                escaped): masking secrets alone is then told from the text
                (:meth:`~plandag.trace.redact.Redactor.keeps_json_text`), without a walk.
        """
        kind = type(result)
        if result is None:
            return "null"
        if kind is str:
            return self.text(result)
        if kind is dict or kind is list:
            if text is not None:
                redact = self._redact
                if redact is None:
                    return text
                # the rules ready() read for this event
                if compact and not redact.personal and redact.keeps_json_text(text, self._rules):
                    return text
            if self._kept(result, 1, [_ITEMS]):
                return text if text is not None else escape_json_text(LINE_ENCODER.encode(result))
        elif kind is bool or kind is int or (kind is float and math.isfinite(result)):
            return LINE_ENCODER.encode(result)
        masked = self._redact(result) if self._redact is not None else result
        return escape_json_text(LINE_ENCODER.encode(masked))

    # -- lines -------------------------------------------------------------------------

    def event(self, kind: str, time: float, attrs: str) -> str | None:
        """An ``event`` line (with its newline) of ``kind`` (JSON text) at ``time`` whose
        ``attrs`` are the JSON text given; None when the time is not a finite number."""
        when = _float(time) if type(time) is float and time - time == 0.0 else _number(time)
        if when is None:
            return None
        return f'{self._event_head}{when},"kind":{kind},"attrs":{attrs}}}\n'

    def started(self, step_id: Any, tool: Any, attempt: Any, time: float) -> str | None:
        """The ``step_started`` line, or None (the general way writes it)."""
        if type(step_id) is not int or type(tool) is not str or type(attempt) is not int:
            return None
        parts = self._tools.get(tool)
        if parts is None:
            parts = self._tool_parts(tool)
        when = _float(time) if type(time) is float and time - time == 0.0 else _number(time)
        if when is None:
            return None
        starts = self._starts
        if len(starts) >= _TEXTS:
            starts.clear()
        number = str(step_id)
        starts[step_id] = (time, when, number)  # the span's start, when the step ends
        return (
            f'{self._event_head}{when},"kind":"step_started","attrs":{{"step_id":{number}'
            f"{parts[0]}{attempt}}}}}\n"
        )

    def ended(
        self, step_id: Any, status: str, reason: Any, time: float, extra: str = ""
    ) -> str | None:
        """The ``step_ended`` line (``extra``: the JSON text of the fields after
        ``reason``, each with its leading comma), or None (the general way writes it)."""
        if reason is None:
            reason_text = "null"
        elif type(reason) is str:
            reason_text = self.text(reason)
        else:
            return None
        if type(step_id) is not int or type(status) is not str:
            return None
        when = _float(time) if type(time) is float and time - time == 0.0 else _number(time)
        if when is None:
            return None
        return (
            f'{self._event_head}{when},"kind":"step_ended","attrs":{{"step_id":{step_id},'
            f'"status":{self.text(status)},"reason":{reason_text}{extra}}}}}\n'
        )

    def span(
        self,
        record: StepRecord,
        start: Any,
        end: Any,
        depends_on: Any,
        args: Any,
        result: Any,
        restored: bool,
        result_text: str | None = None,
        compact: bool = False,
    ) -> str | None:
        """The ``step`` span line of ``record`` (with its newline), or None.

        Args:
            record: the step's record.
            start, end: the span's times.
            depends_on: the step's parents; args: its args (or None).
            result: its result, JSON-safe and bounded already (the writer's ``_bounded``).
            restored: whether it was restored from an earlier segment.
            result_text: the result's JSON text (lone surrogates escaped), when known;
            compact: whether it needed no escape (:meth:`result`).
        """
        step_id, tool, status = record.id, record.tool, record.status
        if type(step_id) is not int or type(tool) is not str or type(status) is not str:
            return None
        when = _float(end) if type(end) is float and end - end == 0.0 else _number(end)
        since = _float(start) if type(start) is float and start - start == 0.0 else _number(start)
        if when is None or since is None:
            return None
        value = self.value
        reason = "null" if record.reason is None else value(record.reason)
        detail = "null" if record.detail is None else value(record.detail)
        error = "null" if record.error is None else value(record.error.as_dict())
        parents = _ints(depends_on)
        if parents is None:
            parents = value(depends_on)
        given = "null" if args is None else value(args)
        superseded = "null" if record.superseded_by is None else value(record.superseded_by)
        if (
            reason is None
            or detail is None
            or error is None
            or parents is None
            or given is None
            or superseded is None
        ):
            return None
        attempts = []
        for attempt in record.attempt_log:
            item = self._attempt(attempt)
            if item is None:
                return None
            attempts.append(item)
        checks = []
        for outcome in record.checks:
            kind, message = value(outcome.kind), value(outcome.detail)
            outcome_status = value(outcome.status)
            if kind is None or message is None or outcome_status is None:
                return None
            passed = "false" if outcome.status == "fail" else "true"
            checks.append(
                f'{{"kind":{kind},"passed":{passed},"status":{outcome_status},"message":{message}}}'
            )
        named = self._names.get(tool)
        if named is None:
            named = self._name(tool)
        masked = self._texts.get(tool)
        if masked is None:
            masked = self._learn(tool)[0]
        return (
            f'{self._span_head}{when},"kind":"step","name":"step {step_id} {named},'
            f'"start":{since},"end":{when},'
            f'"attrs":{{"step_id":{step_id},"tool":{masked},"status":{self.text(status)},'
            f'"reason":{reason},"detail":{detail},"error":{error},"depends_on":{parents},'
            f'"attempts":[{",".join(attempts)}],"checks":[{",".join(checks)}],'
            f'"args":{given},"result":{self.result(result, result_text, compact)},'
            f'"superseded_by":{superseded},'
            f'"segment":{self._segment},"restored":{"true" if restored else "false"}}}}}\n'
        )

    def succeeded(
        self, step_id: Any, time: Any, record: StepRecord, depends_on: Any, args: Any, result: str
    ) -> str | None:
        """The ``step_ended`` line and the ``step`` span (each with its newline) of a step
        that succeeded plainly: at one attempt, with no reason, detail, error, retry, check,
        step_child or replacement; None for any other step (:meth:`ended` and :meth:`span`
        write it), or a time that is not a finite number.

        Args:
            step_id: the event's step id (the record's); time: the event's time.
            record: the step's record.
            depends_on: the step's parents; args: its args (or None).
            result: the JSON text of its result (:meth:`result`).
        """
        record_id = record.id
        if (
            type(step_id) is not int
            or (record_id is not step_id and (type(record_id) is not int or record_id != step_id))
            or record.status != "succeeded"
            or record.reason is not None
            or record.detail is not None
            or record.error is not None
            or record.superseded_by is not None
            or record.checks
            or len(record.attempt_log) != 1
        ):
            return None
        attempt = record.attempt_log[0]
        attempt_number, tool = attempt.number, record.tool
        if (
            attempt.reason is not None
            or attempt.error is not None
            or attempt.retry is not None
            or attempt.children
            or type(attempt_number) is not int
            or type(tool) is not str
        ):
            return None
        start, end, finish = record.started_at, record.ended_at, attempt.ended_at
        # the same time is written once: the event's is the span's end, the attempt's start
        # the span's start (the runner's own objects)
        when = _float(end) if type(end) is float and end - end == 0.0 else _number(end)
        known = self._starts.pop(step_id, None)
        if known is not None and known[0] is start:  # written by its step_started line
            since: str | None = known[1]
            number = known[2]
        else:
            since = (
                _float(start) if type(start) is float and start - start == 0.0 else _number(start)
            )
            number = str(step_id)
        if time is end:
            ended = when
        else:
            ended = _float(time) if type(time) is float and time - time == 0.0 else _number(time)
        began = attempt.started_at
        if began is start:
            first = since
        else:
            first = (
                _float(began) if type(began) is float and began - began == 0.0 else _number(began)
            )
        if finish is end:
            last = when
        else:
            last = (
                _float(finish)
                if type(finish) is float and finish - finish == 0.0
                else _number(finish)
            )
        if when is None or since is None or ended is None or first is None or last is None:
            return None
        if type(depends_on) is list and len(depends_on) == 1 and type(depends_on[0]) is int:
            parents: str | None = f"[{depends_on[0]}]"  # a chain's step
        else:
            parents = _ints(depends_on)
            if parents is None:
                parents = self.value(depends_on)
        given = "null" if args is None else self.value(args)
        if parents is None or given is None:
            return None
        tool_parts = self._tools.get(tool)
        if tool_parts is None:
            tool_parts = self._tool_parts(tool)
        plain = self._plain
        if plain is None:
            plain = self._plain_parts()
        return (
            f'{self._event_head}{ended},"kind":"step_ended","attrs":{{"step_id":{number}'
            f'{plain[0]}{when},"kind":"step","name":"step {number}{tool_parts[1]}{since}'
            f',"end":{when},"attrs":{{"step_id":{number}{tool_parts[2]}{parents}'
            f',"attempts":[{{"attempt":{attempt_number},"start":{first},"end":{last}'
            f'{plain[1]}{given},"result":{result}{plain[2]}'
        )

    def _tool_parts(self, tool: str) -> tuple[str, str, str]:
        """The texts of a plain step's lines that follow ``step_id``'s value and hold the
        tool's name: in the ``step_started`` line, the span's name and the span's attrs."""
        masked = self._texts.get(tool)
        if masked is None:
            masked = self._learn(tool)[0]
        named = self._names.get(tool)
        if named is None:
            named = self._name(tool)
        status = self.text("succeeded")
        parts = (
            f',"tool":{masked},"attempt":',
            f' {named},"start":',
            f',"tool":{masked},"status":{status},"reason":null,"detail":null,"error":null,'
            '"depends_on":',
        )
        if len(tool) <= _TEXT_CHARACTERS:
            if len(self._tools) >= _TEXTS:
                self._tools.clear()
            self._tools[tool] = parts
        return parts

    def _plain_parts(self) -> tuple[str, str, str]:
        """The texts of a plain step's lines that hold its status and nothing that varies:
        after the step_ended line's ``step_id``, after the attempt's end, after the
        result."""
        status = self.text("succeeded")
        self._plain = (
            f',"status":{status},"reason":null}}}}\n{self._span_head}',
            f',"status":{status},"reason":null,"error":null}}],"checks":[],"args":',
            f',"superseded_by":null,"segment":{self._segment},"restored":false}}}}\n',
        )
        return self._plain

    def _name(self, tool: str) -> str:
        """The JSON text of a span name ``step N TOOL`` after its opening ``"step N ``: the
        tool's name as it is (a name is not masked), escaped, and the closing quote."""
        named = _string(tool)[1:]
        if len(tool) <= _TEXT_CHARACTERS:
            if len(self._names) >= _TEXTS:
                self._names.clear()
            self._names[tool] = named
        return named

    def _attempt(self, attempt: AttemptRecord) -> str | None:
        number, start, end = attempt.number, attempt.started_at, attempt.ended_at
        if type(number) is not int:
            return None
        since = _float(start) if type(start) is float and start - start == 0.0 else _number(start)
        if end is None:
            when: str | None = "null"
        else:
            when = _float(end) if type(end) is float and end - end == 0.0 else _number(end)
        reason: str | None
        error: str | None
        if attempt.reason is None and attempt.error is None:  # as attempt_status
            status = self.text("running" if end is None else "succeeded")
            reason = error = "null"
        else:
            status = self.text(attempt_status(attempt))
            reason = "null" if attempt.reason is None else self.value(attempt.reason)
            error = "null" if attempt.error is None else self.value(attempt.error.as_dict())
        if since is None or when is None or reason is None or error is None:
            return None
        text = (
            f'{{"attempt":{number},"start":{since},"end":{when},'
            f'"status":{status},"reason":{reason},"error":{error}'
        )
        if attempt.retry is not None:
            retry = self.value(attempt.retry)
            if retry is None:
                return None
            text += f',"retry":{retry}'
        if attempt.children:
            text += f',"children":{len(attempt.children)}'
        return text + "}"


def attempt_status(attempt: AttemptRecord) -> str:
    """The outcome of one attempt: ``running`` (no end yet), ``succeeded`` (no reason),
    ``cancelled`` (reason ``deadline`` / ``stalled`` / ``interrupted`` without an error) or
    ``failed``."""
    if attempt.ended_at is None:
        return "running"
    if attempt.reason is None and attempt.error is None:
        return "succeeded"
    if attempt.reason in _CANCEL_REASONS and attempt.error is None:
        return "cancelled"
    return "failed"
