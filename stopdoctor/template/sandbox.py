"""The chat-template sandbox: render chat templates the way transformers does, inside a sandbox with time and size limits.

What lives here:
- `compile_template` / `render_chat`: a renderer whose output is byte-identical to
  `tokenizer.apply_chat_template(..., tokenize=False)` for the same messages and special tokens;
  `ChatRenderer` renders many conversations with one template (labels: a whole dataset).
  The environment copies transformers' (`transformers/utils/chat_template_utils.py`,
  `_cached_compile_jinja_template` and `render_jinja_template`, transformers 5.x): an
  `ImmutableSandboxedEnvironment` with `trim_blocks`, `lstrip_blocks`, `loopcontrols`, the
  `{% generation %}` tag, `raise_exception`, `strftime_now`, `tojson` (ensure_ascii=False),
  a restricted `dict` and `namespace`.
- Limits on top of transformers' sandbox: template size, wall-clock time, size of every value and
  output buffer, and a total string-work budget. They are checked from hooks the template cannot
  avoid (every call, attribute/item access, arithmetic operator, loop iteration, output append;
  a plain dict lookup such as `message['content']` does no work and skips the clock), so no thread
  or signal is needed to stop a hostile template. Results that can outgrow their
  inputs (indent, replace, join, format, expandtabs, tojson(indent), str() of a container) are
  sized before they are built; one Python call the clock cannot interrupt must not build gigabytes.
- `render_deadline`: one wall-clock budget shared by every render inside it (a command renders a
  template many times; RenderLimits.max_total_seconds).

Imports: jinja2 and the standard library only, plus `stopdoctor.core.errors`. Never transformers or torch:
this module is on the static `inspect` / `render` / `probe-stop` path.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from stopdoctor.core.errors import InputError, TemplateError

__all__ = [
    "ChatRenderer",
    "CompiledTemplate",
    "RenderLimits",
    "TemplateLimitError",
    "TemplateRaisedError",
    "compile_template",
    "render_chat",
    "render_deadline",
]


# --------------------------------------------------------------------------------------------
# Limits and errors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderLimits:
    """How much a chat template may do before it is refused."""

    max_output_chars: int = 2_000_000
    max_seconds: float = 5.0
    max_template_chars: int = 1_000_000
    # Total characters of strings (and items of lists) the template may create while rendering,
    # including intermediate values it throws away. Bounds memory churn that never reaches output.
    max_work_chars: int = 40_000_000
    # Jinja's parser and Python's compile() take ~0.5 ms per tag and cannot be interrupted, so the
    # time limit cannot cover compilation; this bounds it instead (real templates use < 500 tags).
    max_template_tags: int = 2_500
    # All renders inside one `render_deadline()` together (inspect renders a template ~15 times):
    # a template just under max_seconds per render must not hold a command for minutes.
    max_total_seconds: float = 10.0


class TemplateRaisedError(TemplateError):
    """The template called its own `raise_exception(message)`: it rejects this conversation."""


class TemplateIgnoresMessages(TemplateError):
    """The template renders, but the conversation's content never appears in its output."""


class TemplateLimitError(TemplateError):
    """The template was stopped: it broke the sandbox rules or exceeded a time or size limit."""


class _LimitExceeded(Exception):
    """Raised from inside rendering; becomes a TemplateLimitError with the template line."""


class _TemplateRaised(jinja2.exceptions.TemplateError):
    """What `raise_exception` raises. A jinja TemplateError, as in transformers, with the
    template's message verbatim as its only argument."""


_TEMPLATE_FILENAME = "<template>"
# No chat template needs integers this big; multiplying bigger ones takes seconds per operation.
_MAX_INT_DIGITS = 20_000


# --------------------------------------------------------------------------------------------
# Per-render budget, reached from the sandbox hooks through a context variable
# --------------------------------------------------------------------------------------------


class _Budget:
    __slots__ = ("deadline", "max_value", "work_left", "limits", "overdue")

    def __init__(self, limits: RenderLimits, deadline: float, work: int, overdue: str | None = None) -> None:
        self.limits = limits
        self.deadline = deadline
        self.max_value = limits.max_output_chars
        self.work_left = work
        self.overdue = overdue or f"it ran longer than {limits.max_seconds:g} s"

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _LimitExceeded(self.overdue)

    def check_digits(self, digits: int) -> None:
        if digits > _MAX_INT_DIGITS:
            raise _LimitExceeded(f"it built an integer of about {digits} digits, over {_MAX_INT_DIGITS}")

    def check_int(self, value: Any, what: str) -> None:
        # A width/count parameter larger than the output cap can only build something too big.
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_value:
            raise _LimitExceeded(
                f"{what} {value} is over the {self.max_value}-character output limit"
            )

    def produced(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            self.check_digits(value.bit_length() // 3)
            return value
        size = _size(value)
        if size:
            if size > self.max_value:
                raise _LimitExceeded(
                    f"it built a value of {size} characters/items, over the "
                    f"{self.max_value} limit"
                )
            self.work_left -= size
            if self.work_left < 0:
                raise _LimitExceeded(
                    f"it built more than {self.limits.max_work_chars} characters of "
                    "intermediate strings"
                )
        return value


# Used when no render is active: constant folding at compile time calls filters and getitem.
# Only the size checks apply then (a folded filter that fails is simply computed at render time).
_COMPILE_BUDGET = _Budget(RenderLimits(), float("inf"), 1 << 62)
_ACTIVE: ContextVar[_Budget | None] = ContextVar("stopdoctor_template_budget", default=None)
# (monotonic deadline, seconds) shared by every render inside `render_deadline`.
_OVERALL: ContextVar[tuple[float, float] | None] = ContextVar("stopdoctor_render_deadline", default=None)


@contextmanager
def render_deadline(limits: RenderLimits = RenderLimits(), own: bool = False) -> Iterator[None]:
    """Give every template render inside one shared deadline of `limits.max_total_seconds` (an
    enclosing, earlier deadline wins, unless `own`: work that grows with the input, such as one
    dataset example, gets a deadline of its own). Each render still has its own `max_seconds`."""
    deadline = (time.monotonic() + limits.max_total_seconds, limits.max_total_seconds)
    outer = None if own else _OVERALL.get()
    token = _OVERALL.set(min(outer, deadline) if outer is not None else deadline)
    try:
        yield
    finally:
        _OVERALL.reset(token)


def overall_deadline_passed() -> bool:
    """Whether the enclosing `render_deadline` has run out: every later render would fail too."""
    overall = _OVERALL.get()
    return overall is not None and time.monotonic() >= overall[0]


def _render_budget(limits: RenderLimits) -> _Budget:
    own = time.monotonic() + limits.max_seconds
    overall = _OVERALL.get()
    if overall is not None and overall[0] < own:
        return _Budget(limits, overall[0], limits.max_work_chars,
                       f"rendering the template took more than {overall[1]:g} s in all")
    return _Budget(limits, own, limits.max_work_chars)


def _budget() -> _Budget:
    return _ACTIVE.get() or _COMPILE_BUDGET


def _size(value: Any) -> int:
    if isinstance(value, (str, list, tuple, dict, set, frozenset, bytes)):
        return len(value)
    return 0


def _text_size(value: Any, limit: int) -> int:
    """About len(str(value)), computed without building it, and stopping once past `limit`: `str()` of
    a list of a thousand references to one long string is gigabytes. Each item counts at least 1,
    so the walk visits at most `limit` items."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2  # quotes, inside a container's repr
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)  # brackets, ", " between items
            stack.extend(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, jinja2.utils.Namespace):
            total += 12
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        else:
            total += 24  # floats, undefined, placeholders: short reprs
    return total


def _check_text(value: Any, budget: _Budget, what: str) -> None:
    if isinstance(value, str):
        size = len(value)
    elif isinstance(value, (int, float, bool)) or value is None:
        return
    else:
        size = _text_size(value, budget.max_value)
    if size > budget.max_value:
        raise _LimitExceeded(f"{what} would be over {budget.max_value} characters")


def _predict_call(name: str, target: Any, args: tuple, kwargs: dict, budget: _Budget) -> None:
    """Refuse a string method whose result is bound to be too big, before it runs."""
    text = target.__self__
    if not isinstance(text, str):
        return
    if name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            budget.check_int(len(text) + text.count("\t") * max(size, 0), "a tab-expanded string of size")
    elif name == "join" and args:
        items = args[0]
        if isinstance(items, (list, tuple)):
            budget.check_int(len(text) * max(len(items) - 1, 0), "a joined string of size")
            _check_text(list(items), budget, "a joined string")
    elif name in ("format", "format_map"):
        values = [*args, *kwargs.values()]
        if values:
            _check_text(values, budget, "a formatted string")
            biggest = max(_text_size(v, budget.max_value) for v in values)
            budget.check_int(len(text) + text.count("{") * biggest, "a formatted string of size")
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            _predict_replace(text, old, new, args[2] if len(args) > 2 else -1, budget)
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.check_int(len(text) * longest, "a translated string of size")


def _predict_replace(text: str, old: str, new: str, count: Any, budget: _Budget) -> None:
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    budget.check_int(len(text) + found * (len(new) - len(old)), "a replaced string of size")


def _predict_filter(name: str, args: tuple, kwargs: dict, budget: _Budget) -> None:
    """Refuse a filter call whose result is bound to be too big, before it builds it."""
    if not args:
        return
    value, params = args[0], args[1:]
    if name in _STRINGIFYING_FILTERS:
        _check_text(value, budget, f"the {name} filter's text")
    if not isinstance(value, str):
        return
    if name == "indent":
        width = params[0] if params else kwargs.get("width", 4)
        unit = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        budget.check_int(len(value) + (value.count("\n") + 1) * max(unit, 0), "an indented string of size")
    elif name == "replace" and len(params) >= 2:
        old, new = str(params[0]), str(params[1])
        _predict_replace(value, old, new, params[2] if len(params) > 2 else kwargs.get("count"), budget)
    elif name == "wordwrap":
        width = params[0] if params else kwargs.get("width", 79)
        wrap = params[2] if len(params) > 2 else kwargs.get("wrapstring")
        wrap_len = len(wrap) if isinstance(wrap, str) else 1
        if isinstance(width, int) and width > 0:
            breaks = len(value) // width + value.count(" ") + value.count("\n") + value.count("\t") + 1
            budget.check_int(len(value) + breaks * wrap_len, "a wrapped string of size")
    elif name == "format":
        _check_format_string(value, budget, brace=False)
        if params or kwargs:
            biggest = max(_text_size(v, budget.max_value) for v in (*params, *kwargs.values()))
            budget.check_int(len(value) + value.count("%") * biggest, "a formatted string of size")


# Filters that turn their input into text (str(), join, JSON, repr): the input's text size is checked first.
_STRINGIFYING_FILTERS = frozenset({
    "string", "join", "tojson", "pprint", "format", "replace", "indent", "wordwrap", "center", "truncate",
    "e", "escape", "forceescape", "urlencode", "urlize", "title", "upper", "lower", "capitalize", "trim",
    "striptags", "wordcount", "xmlattr", "safe",
})


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 - jinja's names
    """jinja's `lipsum`, refused before it runs when it could write more than the output limit
    (it is one Python call, which the time limit cannot interrupt)."""
    budget = _budget()
    if isinstance(n, int) and isinstance(max, int) and isinstance(min, int):
        words = max if max > min else min
        budget.check_int(n * (abs(words) * 12 + 10), "lipsum of size")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


# '%10000000d', '%.9999999f', '{:>10000000}': widths that allocate before we could measure them.
_PERCENT_WIDTH_RE = re.compile(r"%[-#0 +]*(\d*)(?:\.(\d+))?")
_BRACE_WIDTH_RE = re.compile(r"\{[^{}]*:[^{}\d]*(\d+)(?:\.(\d+))?[^{}]*\}")


def _check_format_string(fmt: Any, budget: _Budget, brace: bool) -> None:
    if not isinstance(fmt, str):
        return
    for match in (_BRACE_WIDTH_RE if brace else _PERCENT_WIDTH_RE).finditer(fmt):
        for group in match.groups():
            if group and len(group) > 6:
                budget.check_int(int(group), "format width")


def _predict_binop(op: str, left: Any, right: Any, budget: _Budget) -> None:
    """Refuse an operation before it runs when its result is bound to be too big."""
    sized = (str, list, tuple)
    if op == "*":
        if isinstance(left, sized) and isinstance(right, int):
            budget.check_int(len(left) * right, "a repeated value of size")
        elif isinstance(right, sized) and isinstance(left, int):
            budget.check_int(len(right) * left, "a repeated value of size")
        elif isinstance(left, int) and isinstance(right, int):
            budget.check_digits((left.bit_length() + right.bit_length()) // 3)
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            budget.check_digits((left.bit_length() * right) // 3)
    elif op == "+":
        if isinstance(left, sized) and isinstance(right, sized):
            budget.check_int(len(left) + len(right), "a joined value of size")
    elif op == "%" and isinstance(left, str):
        _check_format_string(left, budget, brace=False)
        if "*" in left:
            for item in right if isinstance(right, tuple) else (right,):
                budget.check_int(item, "format width")
        values = list(right.values()) if isinstance(right, dict) else right if isinstance(right, tuple) else [right]
        if values and left.count("%"):
            biggest = max(_text_size(v, budget.max_value) for v in values)
            budget.check_int(len(left) + left.count("%") * biggest, "a formatted string of size")


# --------------------------------------------------------------------------------------------
# The environment: transformers' globals and filters, plus the limit hooks
# --------------------------------------------------------------------------------------------


def _raise_exception(message: Any) -> None:
    # transformers: `raise jinja2.exceptions.TemplateError(message)`
    raise _TemplateRaised(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Same signature and defaults as transformers' override of jinja's tojson: no HTML escaping,
    # non-ASCII kept, indent/separators/sort_keys exposed. Equal to json.dumps, but built chunk by
    # chunk so that an indent repeated on every nested line stops at the output limit, not at GBs.
    if indent is None:
        return json.dumps(x, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
    budget = _budget()
    if isinstance(indent, int) and not isinstance(indent, bool):
        budget.check_int(indent, "tojson indent")
    elif isinstance(indent, str):
        budget.check_int(len(indent), "tojson indent of size")
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    chunks = []
    total = 0
    for chunk in encoder.iterencode(x):
        total += len(chunk)
        if total > budget.max_value:
            raise _LimitExceeded(f"tojson built more than {budget.max_value} characters")
        chunks.append(chunk)
    return "".join(chunks)


def _strftime_now(format: str) -> str:  # noqa: A002 - the template calls it positionally
    return datetime.now().strftime(format)


class _TemplateDict:
    """transformers' `TemplateDict`: `dict(...)` without exposing the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """transformers' `TemplateNamespace`: no underscore-prefixed attributes."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - same trick as jinja's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute."
            )


class _GenerationRecorder:
    """Collects the character spans `{% generation %}` blocks write, as transformers'
    AssistantTracker does for `return_assistant_tokens_mask`: a block's start is the length of
    everything the top-level template yielded before it (so, as there, a block inside a macro
    or a `{% set %}` block is placed where that block's output is yielded, not where it lands)."""

    __slots__ = ("offset", "spans")

    def __init__(self) -> None:
        self.offset = 0  # characters yielded so far; kept current by CompiledTemplate.render
        self.spans: list[tuple[int, int]] = []


_RECORDER: ContextVar[_GenerationRecorder | None] = ContextVar("stopdoctor_generation_recorder", default=None)


class _GenerationExtension(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body unchanged, as transformers'
    AssistantTracker does; records the body's character span when a render asks for it."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(
            self.call_method("_generation_support"), [], [], body
        ).set_lineno(lineno)

    def _generation_support(self, caller: Any) -> str:
        body = caller()
        recorder = _RECORDER.get()
        if recorder is not None:
            recorder.spans.append((recorder.offset, recorder.offset + len(body)))
        return body


class _LimitsExtension(jinja2.ext.Extension):
    """Holds the runtime guards the instrumented AST calls: one per loop, one per `~`."""

    def _guard_iter(self, iterable: Any) -> Iterator[Any]:
        budget = _budget()
        for item in iterable:
            budget.tick()
            yield item

    def _guard_value(self, value: Any) -> Any:
        return _budget().produced(value)

    def _guard_text(self, value: Any) -> Any:
        """An operand of `~` is made text with str(): check how long that would be first."""
        _check_text(value, _budget(), "a `~` operand's text")
        return value


class _Instrument(NodeTransformer):
    """Route every loop's iterable and every `~` concatenation through the limit guards."""

    def __init__(self, ext: _LimitsExtension) -> None:
        self.ext = ext

    def visit_For(self, node: jinja2.nodes.For) -> jinja2.nodes.Node:
        self.generic_visit(node)
        node.iter = self.ext.call_method("_guard_iter", [node.iter], lineno=node.iter.lineno)
        return node

    def visit_Concat(self, node: jinja2.nodes.Concat) -> jinja2.nodes.Node:
        self.generic_visit(node)
        node.nodes = [self.ext.call_method("_guard_text", [operand], lineno=operand.lineno) for operand in node.nodes]
        return self.ext.call_method("_guard_value", [node], lineno=node.lineno)


# Extensions whose methods the compiled template calls directly (see _GuardedCodeGenerator).
_DIRECT_EXTENSIONS = frozenset({_LimitsExtension.identifier, _GenerationExtension.identifier})


class _GuardedBuffer(list):
    """Output buffer of macros, call blocks and `{% set %}` blocks: each append is checked."""

    __slots__ = ("_budget", "_chars")

    def __init__(self) -> None:
        super().__init__()
        self._budget = _budget()
        self._chars = 0

    def _account(self, text: Any) -> None:
        budget = self._budget
        budget.tick()
        self._chars += len(text)
        if self._chars > budget.max_value:
            raise _LimitExceeded(
                f"a block built more than {budget.max_value} characters of output"
            )
        budget.work_left -= len(text)
        if budget.work_left < 0:
            raise _LimitExceeded(
                f"it built more than {budget.limits.max_work_chars} characters of intermediate strings"
            )

    def append(self, text: Any) -> None:
        self._account(text)
        super().append(text)

    def extend(self, texts: Iterable[Any]) -> None:
        for text in texts:
            self.append(text)


class _GuardedCodeGenerator(CodeGenerator):
    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.stopdoctor_buffer()")

    def visit_Call(self, node: jinja2.nodes.Call, frame: Frame, forward_caller: bool = False) -> None:
        # Our own guards and the generation tag are trusted code: called directly, not through the
        # sandbox's (metered) environment.call. Their arguments are still compiled by the sandbox.
        target = node.node
        if isinstance(target, jinja2.nodes.ExtensionAttribute) and target.identifier in _DIRECT_EXTENSIONS:
            self.visit(target, frame)
            self.write("(")
            if forward_caller:
                self.write("caller")
            else:
                self.visit(node.args[0], frame)
            self.write(")")
            return
        super().visit_Call(node, frame, forward_caller=forward_caller)


# Filters whose parameters are widths or counts: `'x'|center(10**9)` allocates before it returns.
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "batch", "slice", "tojson", "truncate"})


def _guard_filter(name: str, func: Any) -> Any:
    offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)  # keeps `jinja_pass_arg`, so jinja still injects context/env
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        if name in _WIDTH_FILTERS:
            for value in (*args[offset + 1:], *kwargs.values()):
                budget.check_int(value, f"{name} parameter")
        _predict_filter(name, args[offset:], kwargs, budget)
        return budget.produced(func(*args, **kwargs))

    return guarded


def _finalize(value: Any) -> Any:
    """Every `{{ value }}` passes here before str(): a list of long strings must not be printed whole."""
    _check_text(value, _budget(), "an output value's text")
    return value


class _SandboxEnvironment(ImmutableSandboxedEnvironment):
    """transformers' ImmutableSandboxedEnvironment, with every operation metered."""

    code_generator_class = _GuardedCodeGenerator
    # Intercepting the arithmetic operators routes them through call_binop (and stops jinja from
    # constant-folding `10**10**10` at compile time, which would hang before any limit applies).
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationExtension, jinja2.ext.loopcontrols, _LimitsExtension],
            finalize=_finalize,
        )
        self.filters["tojson"] = _tojson
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.globals["lipsum"] = _lipsum
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace
        self._limits_ext = self.extensions[_LimitsExtension.identifier]

    @staticmethod
    def stopdoctor_buffer() -> _GuardedBuffer:
        return _GuardedBuffer()

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Instrument(self._limits_ext).visit(tree)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.tick()
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, sized inline
            size = len(left) + len(right)
            budget.check_int(size, "a joined value of size")
            budget.work_left -= size
            if budget.work_left < 0:
                raise _LimitExceeded(
                    f"it built more than {budget.limits.max_work_chars} characters of intermediate strings")
            return left + right
        _predict_binop(operator, left, right, budget)
        return budget.produced(super().call_binop(context, operator, left, right))

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        budget = _budget()
        budget.tick()
        target = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
        if isinstance(getattr(target, "__self__", None), (str, list, tuple, dict)):
            # Built-in methods such as ljust/center/zfill/expandtabs take widths.
            for value in (*args, *kwargs.values()):
                budget.check_int(value, "method argument")
            name = getattr(target, "__name__", "")
            if name in ("format", "format_map"):
                _check_format_string(target.__self__, budget, brace=True)
            _predict_call(name, target, args, kwargs, budget)
        return budget.produced(super().call(context, obj, *args, **kwargs))

    def getitem(self, obj: Any, argument: Any) -> Any:
        if type(obj) is dict and type(argument) is str:  # message['content']: no work to meter
            try:
                return obj[argument]
            except KeyError:
                pass
        budget = _budget()
        budget.tick()
        value = super().getitem(obj, argument)
        if isinstance(argument, slice):
            budget.produced(value)
        return value

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and not hasattr(dict, attribute):  # message.content: an item, as jinja finds it
            try:
                return obj[attribute]
            except KeyError:
                pass
        _budget().tick()
        return super().getattr(obj, attribute)


_ENVIRONMENT: _SandboxEnvironment | None = None


def _environment() -> _SandboxEnvironment:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = _SandboxEnvironment()
    return _ENVIRONMENT


# --------------------------------------------------------------------------------------------
# Errors: jinja/Python exceptions → one-line TemplateError with the template line
# --------------------------------------------------------------------------------------------


def _template_line(exc: BaseException) -> int | None:
    lineno = getattr(exc, "lineno", None)
    if isinstance(exc, jinja2.exceptions.TemplateSyntaxError) and lineno:
        return lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:  # jinja rewrites frames of template code to the template's lines
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) if "\n" in str(text) or "\r" in str(text) else str(text)


def _with_line(message: str, line: int | None) -> str:
    return f"{message} (template line {line})" if line else message


def _convert(exc: BaseException) -> TemplateError:
    line = _template_line(exc)
    if isinstance(exc, _TemplateRaised):
        message = exc.args[0] if exc.args else ""
        return TemplateRaisedError(
            _with_line(f"chat template raised: {_one_line(message)}", line),
            "the template rejects this conversation (its own raise_exception); "
            "check the roles and order of the messages",
            line,
        )
    if isinstance(exc, jinja2.exceptions.TemplateSyntaxError):
        return TemplateError(
            _with_line(f"chat template syntax error: {_one_line(exc.message or exc)}", line),
            "fix the Jinja syntax of the chat template",
            line,
        )
    if isinstance(exc, SyntaxError):
        # Python's, compiling the code jinja generated (blocks nested past Python's limit): its
        # line number is the generated code's, which means nothing in the template.
        return TemplateLimitError(
            f"chat template nests its blocks too deeply to compile: {_one_line(exc.msg)}",
            "no real chat template nests so deeply; do not use it",
            None,
        )
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return TemplateLimitError(
            _with_line(f"chat template broke the sandbox: {_one_line(exc)}", line),
            "the template touches Python internals; do not use it",
            line,
        )
    if isinstance(exc, _LimitExceeded):
        return TemplateLimitError(
            _with_line(f"chat template stopped: {_one_line(exc)}", line),
            "the template loops or builds text without bound; raise RenderLimits only if you trust it",
            line,
        )
    if isinstance(exc, (RecursionError, MemoryError, OverflowError)):
        return TemplateLimitError(
            _with_line(f"chat template stopped: {type(exc).__name__}: {_one_line(exc)}", line),
            "the template recursed or grew without bound",
            line,
        )
    if isinstance(exc, jinja2.exceptions.UndefinedError):
        return TemplateError(
            _with_line(f"chat template used an undefined value: {_one_line(exc)}", line),
            "the template expects a variable or message field this conversation lacks",
            line,
        )
    return TemplateError(
        _with_line(f"chat template failed: {type(exc).__name__}: {_one_line(exc)}", line),
        "the template cannot render this conversation",
        line,
    )


# --------------------------------------------------------------------------------------------
# Compile and render
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledTemplate:
    """A parsed, instrumented chat template. Render it with `render_chat` (or `.render`)."""

    source: str
    _template: jinja2.Template = field(repr=False, compare=False)

    def render(self, variables: Mapping[str, Any], limits: RenderLimits = RenderLimits(),
               generation_spans: list[tuple[int, int]] | None = None) -> str:
        """Render with exactly these template variables, within `limits`. When
        `generation_spans` is a list, the (start, end) character span of every
        `{% generation %}` block is appended to it."""
        budget = _render_budget(limits)
        if time.monotonic() > budget.deadline:  # the shared deadline is past already
            raise _convert(_LimitExceeded(budget.overdue))
        token = _ACTIVE.set(budget)
        recorder = _GenerationRecorder() if generation_spans is not None else None
        recorder_token = _RECORDER.set(recorder)
        chunks: list[str] = []
        total = 0
        generator = self._template.generate(**variables)
        try:
            for chunk in generator:
                total += len(chunk)
                if total > limits.max_output_chars:
                    raise TemplateLimitError(
                        f"chat template stopped: output over {limits.max_output_chars} characters",
                        "the template writes without bound; raise RenderLimits only if you trust it",
                    )
                budget.tick()
                chunks.append(chunk)
                if recorder is not None:
                    recorder.offset = total
        except _LimitExceeded as exc:  # from the tick() above, outside the template
            raise _convert(exc) from exc
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything the untrusted template does is its error
            raise _convert(exc) from exc
        finally:
            generator.close()
            _RECORDER.reset(recorder_token)
            _ACTIVE.reset(token)
        if recorder is not None:
            generation_spans.extend(recorder.spans)
        return "".join(chunks)


@functools.lru_cache(maxsize=64)
def _compile_cached(source: str) -> CompiledTemplate:
    try:
        template = _environment().from_string(source)
    except Exception as exc:  # noqa: BLE001 - syntax errors, nesting too deep for the parser
        raise _convert(exc) from exc
    # A ChainMap over the environment's globals, copied into every render's context: flattened
    # once (the environment's globals never change after it is built).
    template.globals = dict(template.globals)
    return CompiledTemplate(source, template)


def compile_template(source: str, limits: RenderLimits = RenderLimits()) -> CompiledTemplate:
    """Parse a chat template into the sandbox. Cached by source text."""
    if not isinstance(source, str):
        raise TemplateError(
            f"chat template must be a string, got {type(source).__name__}",
            "a tokenizer_config.json chat_template list of named templates must be resolved to one first",
        )
    if len(source) > limits.max_template_chars:
        raise TemplateLimitError(
            f"chat template is {len(source)} characters, over the {limits.max_template_chars} limit",
            "this is not a plausible chat template; raise RenderLimits.max_template_chars if you trust it",
        )
    tags = _tag_count(source)
    if tags > limits.max_template_tags:
        raise TemplateLimitError(
            f"chat template has {tags} Jinja tags, over the {limits.max_template_tags} limit",
            "this is not a plausible chat template; raise RenderLimits.max_template_tags if you trust it",
        )
    return _compile_cached(source)


_TAG_RE = re.compile(r"\{[{%]")


@functools.lru_cache(maxsize=64)
def _tag_count(source: str) -> int:
    return len(_TAG_RE.findall(source))


# Names a message's reasoning is passed under (transformers `_REASONING_FIELDS`).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' `continue_final_message_tag`
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


class _LoneSurrogate(Exception):
    """A lone surrogate found while copying inputs; the caller says which input held it."""


def _plain(value: Any) -> Any:
    """transformers' `_plain_template_data`: rebuild inputs out of plain JSON types, and replace
    any other object by an inert `<TypeName>` placeholder, so the template sees no methods.
    Raises _LoneSurrogate on a string (or key) holding a lone surrogate: no tokenizer encodes it."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and (found := _SURROGATE.search(value)):  # isascii: a C-speed scan
            raise _LoneSurrogate(found.group())
        return value
    if value is None or kind in (int, float, bool):
        return value
    if kind is dict:
        return {_plain(key): _plain(item) for key, item in value.items()}
    if kind is list:
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return _plain(str.__str__(value))
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if (type(value).__module__ == "numpy" and type(value).__name__ != "ndarray"
            and getattr(value, "shape", None) == () and callable(getattr(value, "item", None))):
        # numpy scalars (np.generic): `np.bool_(False)` must not become a truthy placeholder
        return _plain(value.item())
    return f"<{type(value).__name__}>"


def _plain_input(what: str, value: Any) -> Any:
    try:
        return _plain(value)
    except _LoneSurrogate as exc:
        raise InputError(f"{what} holds a lone surrogate (\\u{ord(exc.args[0]):04x}), which is not Unicode text",
                         "undecodable bytes (not UTF-8) or a bad \\u escape; no tokenizer can encode it") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be template data",
                         "chat messages, tools and documents are a few levels of lists and objects") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain_chat(messages: Any) -> list[dict]:
    """apply_chat_template's message preparation in one pass: drop keys whose value is None, copy
    into plain data (`_plain`), alias the reasoning fields (`_alias_reasoning_fields`)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError("cannot render an empty conversation", "give at least one message")
    chat = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise InputError(f"chat messages must be dicts, got {type(message).__name__}", None)
        chat.append({k: v for k, v in message.items() if v is not None})
    chat = _plain_input("a message", chat)
    for number, message in enumerate(chat):
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            chat[number] = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return chat


class ChatRenderer:
    """`render_chat` for many conversations: the template, special tokens and extra variables
    are checked and prepared once; `render` does the per-conversation part."""

    def __init__(self, source: str, *, special_tokens: Mapping[str, str] | None = None,
                 extra: Mapping | None = None, limits: RenderLimits = RenderLimits()) -> None:
        self.source = source
        self.limits = limits
        self.compiled = compile_template(source, limits)
        clash = _RESERVED & set(extra or {})
        if clash:
            raise InputError(f"extra template variables clash with {sorted(clash)}", None)
        # apply_chat_template: `{**special_tokens_map, **kwargs}`
        variables = _plain_input("a special token", {
            k: str(v) for k, v in (special_tokens or {}).items() if v is not None})
        variables.update(_plain_input("a template variable", dict(extra or {})))
        self.variables = variables

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tools: list[dict] | None = None,
        documents: Any = None,
        generation_spans: list[tuple[int, int]] | None = None,
    ) -> str:
        """See `render_chat`."""
        if continue_final_message and add_generation_prompt:
            raise InputError(
                "continue_final_message and add_generation_prompt cannot both be set",
                "continue the final message, or start a new assistant turn, not both",
            )
        if tools is not None and not all(isinstance(tool, dict) for tool in tools):
            raise InputError("tools must be JSON-schema dicts", "convert functions to schemas first")
        if documents is not None and not all(isinstance(doc, dict) for doc in documents):
            raise InputError("documents must be dicts with 'title' and 'text' keys", None)
        if continue_final_message and generation_spans is not None:
            raise InputError("continue_final_message cannot be combined with generation spans",
                             "transformers refuses it with return_assistant_tokens_mask too")
        chat = _plain_chat(messages)
        tools = _plain_input("a tool", tools)
        documents = _plain_input("a document", documents)
        source = self.source

        final_text = None
        if continue_final_message:
            key = continue_final_message if isinstance(continue_final_message, str) else "content"
            final_text = chat[-1].get(key)
            if final_text is None:
                raise InputError(f'continue_final_message is set but the final message has no "{key}"', None)
            fields = [key]
            if key in _REASONING_FIELDS:
                fields = [f for f in _REASONING_FIELDS if chat[-1].get(f) == final_text]
            if not any(f in source for f in fields):
                raise TemplateError(
                    f'continue_final_message is set to "{key}" but the chat template never reads that field',
                    "continue a field the template renders",
                )
            if isinstance(final_text, (list, tuple)):
                for block in reversed(final_text):
                    if "text" in block:
                        final_text = block["text"]
                        block["text"] = block["text"] + _CONTINUE_TAG
                        break
                else:
                    raise InputError("continue_final_message is set but the final message has no text block", None)
            else:
                for f in fields:
                    chat[-1][f] = chat[-1][f] + _CONTINUE_TAG

        rendered = self.compiled.render(
            {
                **self.variables,
                "messages": chat,
                "tools": tools,
                "documents": documents,
                "add_generation_prompt": add_generation_prompt,
            },
            self.limits,
            generation_spans,
        )

        if not rendered.isascii() and (found := _SURROGATE.search(rendered)):
            raise TemplateLimitError(
                f"chat template wrote a lone surrogate (\\u{ord(found.group()):04x}), which is not Unicode text",
                "a \\ud800-style escape in the template; no tokenizer can encode its output",
            )
        if continue_final_message:
            tag = _CONTINUE_TAG.strip()
            if str(final_text).strip() not in rendered or tag not in rendered:
                raise TemplateError(
                    "continue_final_message is set but the final message does not appear in the rendered chat",
                    "the template deletes part of the final message; it cannot be continued",
                )
            at = rendered.rindex(tag)
            if rendered[at: at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
                rendered = rendered[:at]  # the template keeps spacing
            else:
                rendered = rendered[:at].rstrip()  # trailing spacing was trimmed; be cautious
        return rendered


def render_chat(
    source: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = False,
    continue_final_message: bool | str = False,
    tools: list[dict] | None = None,
    documents: Any = None,
    special_tokens: Mapping[str, str] | None = None,
    extra: Mapping | None = None,
    limits: RenderLimits = RenderLimits(),
    generation_spans: list[tuple[int, int]] | None = None,
) -> str:
    """Render `messages` as `tokenizer.apply_chat_template(messages, tokenize=False, ...)` would.

    `special_tokens` maps bos_token/eos_token/pad_token/unk_token/... to their texts; they become
    template variables, and `extra` entries override them (as apply_chat_template's kwargs do).
    `continue_final_message` (True, or the name of the field to continue) leaves the final message
    open: whatever the template writes after its content is cut off.
    `generation_spans`, when a list, receives the character span of every `{% generation %}`
    block (transformers' `return_assistant_tokens_mask` spans; not with continue_final_message).
    Rendering many conversations with one template: `ChatRenderer`.
    """
    return ChatRenderer(source, special_tokens=special_tokens, extra=extra, limits=limits).render(
        messages, add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
        tools=tools, documents=documents, generation_spans=generation_spans)
