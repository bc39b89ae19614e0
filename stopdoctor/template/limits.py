"""Limits on what a chat template may do while it renders: time, size, total string work.

The sandbox's hooks (`template.environment`) call in here on every call, attribute/item access,
arithmetic operator, loop iteration and output append (a plain dict lookup such as
`message['content']` does no work and skips the clock), so no thread or signal is needed to stop
a hostile template.

Time is the render's own CPU time (the thread's clock, read every few hooks), never the wall
clock: a busy machine, or a command that imports torch or loads a model before it renders, makes a
render slower, never a template "too slow". Only the time spent inside renders is charged. Results that can outgrow their inputs (indent, replace, join, format,
expandtabs, tojson(indent), str() of a container) are sized here *before* they are built
(`predict_*`, `check_text`): one Python call the clock cannot interrupt must not build gigabytes.

- `RenderLimits`: the limits; `TemplateLimitError`: a template stopped by them.
- `Budget`: one render's clock and work budget, active through `metering` and reached by the
  hooks with `current_budget()`.
- `render_deadline`: one allowance of render CPU time shared by every render inside it (a command
  renders a template many times; `RenderLimits.max_total_seconds`).

Imports: the standard library, `stopdoctor.core.errors`; never jinja2 itself (every command enters
`render_deadline`, most never render: jinja2's Namespace is sized only once a render imported it).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from stopdoctor.core.errors import TemplateError
from stopdoctor.core.records import record


@record
class RenderLimits:
    """How much a chat template may do before it is refused."""

    max_output_chars: int = 2_000_000
    # CPU seconds of one render (the rendering thread's own time).
    max_seconds: float = 5.0
    max_template_chars: int = 1_000_000
    # Total characters of strings (and items of lists) the template may create while rendering,
    # including intermediate values it throws away. Bounds memory churn that never reaches output.
    max_work_chars: int = 40_000_000
    # Jinja's parser and Python's compile() take ~0.5 ms per tag and cannot be interrupted, so the
    # time limit cannot cover compilation; this bounds it instead (real templates use < 500 tags).
    max_template_tags: int = 2_500
    # CPU seconds of all renders inside one `render_deadline()` together (inspect renders a
    # template ~15 times): a template just under max_seconds per render must not hold a command
    # for minutes. Time the command spends outside renders is never charged.
    max_total_seconds: float = 10.0


class TemplateLimitError(TemplateError):
    """The template was stopped: it broke the sandbox rules or exceeded a time or size limit."""


class LimitExceeded(Exception):
    """A limit hit from inside rendering; the renderer turns it into a TemplateLimitError with the
    template line."""


# No chat template needs integers this big; multiplying bigger ones takes seconds per operation.
_MAX_INT_DIGITS = 20_000


# The thread's CPU clock costs ~0.5 us a read (the wall clock ~0.06 us): read it every few hooks.
# Between two reads a hook does bounded work (sizes are predicted before anything is built).
_CLOCK_EVERY = 16


class Budget:
    """One render's limits in force: the CPU time it may use, the largest value it may build, and
    the string work it has left. `spent()` is the CPU time it has used so far."""

    __slots__ = ("started", "cpu_limit", "max_value", "work_left", "limits", "overdue", "ticks")

    def __init__(self, limits: RenderLimits, seconds: float, work: int, overdue: str | None = None) -> None:
        self.limits = limits
        self.started = time.thread_time()
        self.cpu_limit = self.started + seconds
        self.max_value = limits.max_output_chars
        self.work_left = work
        self.ticks = 0
        self.overdue = overdue or f"it ran longer than {limits.max_seconds:g} s (its own CPU time)"

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % _CLOCK_EVERY == 0 and time.thread_time() > self.cpu_limit:
            raise LimitExceeded(self.overdue)

    def out_of_time(self) -> bool:
        return time.thread_time() > self.cpu_limit

    def spent(self) -> float:
        return max(time.thread_time() - self.started, 0.0)

    def check_digits(self, digits: int) -> None:
        if digits > _MAX_INT_DIGITS:
            raise LimitExceeded(f"it built an integer of about {digits} digits, over {_MAX_INT_DIGITS}")

    def check_int(self, value: Any, what: str) -> None:
        # A width/count parameter larger than the output cap can only build something too big.
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.max_value:
            raise LimitExceeded(
                f"{what} {value} is over the {self.max_value}-character output limit"
            )

    def produced(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            self.check_digits(value.bit_length() // 3)
            return value
        size = _size(value)
        if size:
            if size > self.max_value:
                raise LimitExceeded(
                    f"it built a value of {size} characters/items, over the "
                    f"{self.max_value} limit"
                )
            self.work_left -= size
            if self.work_left < 0:
                raise LimitExceeded(
                    f"it built more than {self.limits.max_work_chars} characters of "
                    "intermediate strings"
                )
        return value


# Used when no render is active: constant folding at compile time calls filters and getitem.
# Only the size checks apply then (a folded filter that fails is simply computed at render time).
_COMPILE_BUDGET = Budget(RenderLimits(), float("inf"), 1 << 62)
_ACTIVE: ContextVar[Budget | None] = ContextVar("stopdoctor_template_budget", default=None)


class RenderAllowance:
    """CPU seconds that every render inside one `render_deadline` shares; a nested allowance (not
    `own`) also spends its parent's."""

    __slots__ = ("seconds", "spent", "parent")

    def __init__(self, seconds: float, parent: RenderAllowance | None) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self.parent = parent

    def left(self) -> float:
        own = self.seconds - self.spent
        return own if self.parent is None else min(own, self.parent.left())

    def charge(self, seconds: float) -> None:
        allowance: RenderAllowance | None = self
        while allowance is not None:
            allowance.spent += seconds
            allowance = allowance.parent

    def limit_seconds(self) -> float:
        """The total of the allowance that runs out first (for the message)."""
        allowance: RenderAllowance | None = self
        seconds, best = self.seconds, self.seconds - self.spent
        while allowance is not None:
            if allowance.seconds - allowance.spent < best:
                seconds, best = allowance.seconds, allowance.seconds - allowance.spent
            allowance = allowance.parent
        return seconds


_OVERALL: ContextVar[RenderAllowance | None] = ContextVar("stopdoctor_render_deadline", default=None)


@contextmanager
def render_deadline(limits: RenderLimits = RenderLimits(), own: bool = False) -> Iterator[None]:
    """Give every template render inside one shared allowance of `limits.max_total_seconds` of
    render CPU time (an enclosing allowance is spent too, unless `own`: work that grows with the
    input, such as one dataset example, gets an allowance of its own). Each render still has its
    own `max_seconds`. Time outside renders (imports, model loads, a busy machine) is never charged."""
    outer = None if own else _OVERALL.get()
    token = _OVERALL.set(RenderAllowance(limits.max_total_seconds, outer))
    try:
        yield
    finally:
        _OVERALL.reset(token)


def overall_deadline_passed() -> bool:
    """Whether the enclosing `render_deadline`'s allowance is spent: every later render would fail too."""
    overall = _OVERALL.get()
    return overall is not None and overall.left() <= 0


def render_budget(limits: RenderLimits) -> Budget:
    """A budget for one render: `limits.max_seconds` of its own CPU time, or what is left of an
    enclosing `render_deadline`'s allowance when that is less."""
    overall = _OVERALL.get()
    if overall is not None and overall.left() < limits.max_seconds:
        return Budget(limits, overall.left(), limits.max_work_chars,
                      f"rendering the template took more than {overall.limit_seconds():g} s of CPU time in all")
    return Budget(limits, limits.max_seconds, limits.max_work_chars)


@contextmanager
def charged(budget: Budget) -> Iterator[Budget]:
    """Charge the CPU time `budget`'s render uses to the enclosing allowance when the block ends."""
    try:
        yield budget
    finally:
        overall = _OVERALL.get()
        if overall is not None:
            overall.charge(budget.spent())


@contextmanager
def metering(budget: Budget) -> Iterator[Budget]:
    """Make `budget` the one the sandbox's hooks charge while the block runs."""
    token = _ACTIVE.set(budget)
    try:
        yield budget
    finally:
        _ACTIVE.reset(token)


def current_budget() -> Budget:
    """The budget of the render in progress; outside one (constant folding at compile time), a
    budget with size checks only."""
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
    # a Namespace exists only once a render has imported jinja2
    namespace = getattr(sys.modules.get("jinja2.utils"), "Namespace", None)
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
        elif namespace is not None and isinstance(item, namespace):
            total += 12
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        else:
            total += 24  # floats, undefined, placeholders: short reprs
    return total


def check_text(value: Any, budget: Budget, what: str) -> None:
    """Refuse `value` when its text (str() of it) would be over the largest value allowed."""
    if isinstance(value, str):
        size = len(value)
    elif isinstance(value, (int, float, bool)) or value is None:
        return
    else:
        size = _text_size(value, budget.max_value)
    if size > budget.max_value:
        raise LimitExceeded(f"{what} would be over {budget.max_value} characters")


def predict_call(name: str, target: Any, args: tuple, kwargs: dict, budget: Budget) -> None:
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
            check_text(list(items), budget, "a joined string")
    elif name in ("format", "format_map"):
        values = [*args, *kwargs.values()]
        if values:
            check_text(values, budget, "a formatted string")
            biggest = max(_text_size(v, budget.max_value) for v in values)
            budget.check_int(len(text) + text.count("{") * biggest, "a formatted string of size")
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            _predict_replace(text, old, new, args[2] if len(args) > 2 else -1, budget)
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.check_int(len(text) * longest, "a translated string of size")


def _predict_replace(text: str, old: str, new: str, count: Any, budget: Budget) -> None:
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    budget.check_int(len(text) + found * (len(new) - len(old)), "a replaced string of size")


def predict_filter(name: str, args: tuple, kwargs: dict, budget: Budget) -> None:
    """Refuse a filter call whose result is bound to be too big, before it builds it."""
    if not args:
        return
    value, params = args[0], args[1:]
    if name in _STRINGIFYING_FILTERS:
        check_text(value, budget, f"the {name} filter's text")
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
        check_format_string(value, budget, brace=False)
        if "*" in value:
            for param in (*params, *kwargs.values()):
                budget.check_int(param, "format width")
        if params or kwargs:
            biggest = max(_text_size(v, budget.max_value) for v in (*params, *kwargs.values()))
            budget.check_int(len(value) + value.count("%") * biggest, "a formatted string of size")


# Filters that turn their input into text (str(), join, JSON, repr): the input's text size is checked first.
_STRINGIFYING_FILTERS = frozenset({
    "string", "join", "tojson", "pprint", "format", "replace", "indent", "wordwrap", "center", "truncate",
    "e", "escape", "forceescape", "urlencode", "urlize", "title", "upper", "lower", "capitalize", "trim",
    "striptags", "wordcount", "xmlattr", "safe",
})


# '%10000000d', '%(a).9999999f', '{:>10000000}': widths and precisions that allocate inside one C
# call, before the result could be measured. A %-directive may name a mapping key first.
_PERCENT_WIDTH_RE = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d+))?")
_BRACE_WIDTH_RE = re.compile(r"\{[^{}]*:[^{}\d]*(\d+)(?:\.(\d+))?[^{}]*\}")
_DIGITS_RE = re.compile(r"\d+")
# Longest text one strftime directive writes without a width (`%c`, a long weekday name).
_STRFTIME_DIRECTIVE_CHARS = 64
_STRFTIME_WIDTH_RE = re.compile(r"%[-_0^#]*(\d*)")


def _widths(groups: Iterator[str], budget: Budget) -> int:
    """The sum of the widths/precisions in `groups`; one over the output limit is refused at once
    (and never converted: `int()` of a 5000-digit width would be slow)."""
    total = 0
    for group in groups:
        if group:
            if len(group) > 9:
                raise LimitExceeded(f"a format width of {len(group)} digits is over the "
                                    f"{budget.max_value}-character output limit")
            total += int(group)
    return total


def check_format_string(fmt: Any, budget: Budget, brace: bool) -> None:
    """Refuse a %-style (or, with `brace`, str.format) format whose widths and precisions add up to
    more than the largest value allowed, before the one call that would build it."""
    if not isinstance(fmt, str):
        return
    pattern = _BRACE_WIDTH_RE if brace else _PERCENT_WIDTH_RE
    extra = _widths((group for match in pattern.finditer(fmt) for group in match.groups()), budget)
    if extra:
        budget.check_int(len(fmt) + extra, "a formatted string of size")


def check_format_spec(spec: Any, budget: Budget) -> None:
    """Refuse one str.format field's spec (`>1999999999`, `.1999999999f`; nested `{0:{1}}` specs
    arrive here resolved) whose width or precision is over the largest value allowed."""
    if isinstance(spec, str) and spec:
        budget.check_int(_widths(iter(_DIGITS_RE.findall(spec)), budget), "a format width")


def check_strftime(fmt: Any, budget: Budget) -> None:
    """Refuse a strftime format whose output (widths like `%1000Y` repeated) would be over the
    largest value allowed: the C library writes it in one call."""
    if not isinstance(fmt, str):
        return
    widths = [match.group(1) for match in _STRFTIME_WIDTH_RE.finditer(fmt)]
    size = len(fmt) + len(widths) * _STRFTIME_DIRECTIVE_CHARS + _widths(iter(widths), budget)
    budget.check_int(size, "a strftime result of size")


def predict_binop(op: str, left: Any, right: Any, budget: Budget) -> None:
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
        check_format_string(left, budget, brace=False)
        if "*" in left:
            for item in right if isinstance(right, tuple) else (right,):
                budget.check_int(item, "format width")
        values = list(right.values()) if isinstance(right, dict) else right if isinstance(right, tuple) else [right]
        if values and left.count("%"):
            biggest = max(_text_size(v, budget.max_value) for v in values)
            budget.check_int(len(left) + left.count("%") * biggest, "a formatted string of size")

