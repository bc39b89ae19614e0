"""The `weights` section of `inspect --weights`: the rows that matter for stopping, as text and as
JSON (inside the `stopdoctor.inspect/1` document). Pure functions: report in, text or dict out.

Imports: analysis.weights (data classes only), reporters.console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stopdoctor.analysis.weights import RowStats, WeightsReport


def _stats(row: RowStats | None) -> dict[str, float] | None:
    if row is None:
        return None
    return {"norm": round(row.norm, 6), "max": round(row.max, 6), "min": round(row.min, 6), "mean_abs": round(row.mean_abs, 6)}


def weights_document(report: WeightsReport) -> dict[str, Any]:
    rows = report.rows

    def matrix(m) -> dict[str, Any] | None:
        return None if m is None else {"file": m.file, "tensor": m.tensor, "dtype": m.dtype, "shape": [m.rows, m.columns]}

    return {
        "format": rows.format,
        "tied": rows.tied,
        "embedding": matrix(rows.embedding),
        "output": matrix(rows.output),
        "seconds": round(rows.seconds, 4),
        "http": None if rows.http is None else {"host": rows.http.host, "requests": rows.http.requests,
                                                "bytes": rows.http.bytes, "file_bytes": rows.http.file_bytes},
        "targets": list(report.targets),
        "rows": [
            {"id": w.id, "text": w.text, "roles": list(w.roles), "untrained": w.untrained, "reasons": list(w.reasons),
             "unsloth_untrained": w.unsloth_untrained, "copy_of": w.copy_of,
             "embedding": _stats(w.embedding), "output": _stats(w.output)}
            for w in report.watched
        ],
        "baseline": {name: {"rows": b.rows, "median_norm": round(b.median_norm, 6), "mad_norm": round(b.mad_norm, 6),
                            "min_norm": round(b.min_norm, 6), "max_norm": round(b.max_norm, 6)}
                     for name, b in report.baseline.items()},
        "special_rows_read": report.candidates,
        "untrained_special_rows": list(report.untrained_candidates),
    }


def print_weights(out, report: WeightsReport, texts: dict[int, str | None] | None = None) -> None:
    """The human section: the matrices, each watched row with its norm against the baseline."""
    from rich.markup import escape  # the JSON document needs no rich

    rows = report.rows
    shape = f"{rows.embedding.rows}×{rows.embedding.columns} {rows.embedding.dtype}"
    output = "tied (lm_head is the embedding)" if rows.output is None else f"{rows.output.tensor} ({rows.output.dtype})"
    out.print(f"  weights   {escape(rows.embedding.file)}: {escape(rows.embedding.tensor)} {shape}; output {escape(output)}  "
              f"[dim]({len(report.watched) + report.candidates} rows + baseline read in {rows.seconds:.2f} s)[/]")
    if rows.http is not None:
        http = rows.http
        out.print(f"    [dim]read over HTTP from {escape(http.host)}: {http.bytes:,} of {http.file_bytes:,} bytes "
                  f"in {http.requests} range requests[/]")
    base = report.baseline.get("embedding")
    if base is not None:
        out.print(f"    baseline  {base.rows} ordinary rows: norm median {base.median_norm:.3g} "
                  f"(min {base.min_norm:.3g}, max {base.max_norm:.3g})")
    for w in report.watched:
        norm = f"norm {w.embedding.norm:.3g}" if w.embedding is not None else ""
        if w.output is not None:
            norm += f", output norm {w.output.norm:.3g}"
        verdict = f"[bold red]untrained[/]: {escape('; '.join(w.reasons))}" if w.untrained else "[green]trained[/]"
        out.print(f"    {w.id:>7} {escape(w.text or '?'):<16} [dim]{escape(', '.join(w.roles))}[/]  {norm}  {verdict}")
    if report.untrained_candidates:
        shown = ", ".join(str(i) for i in report.untrained_candidates[:12])
        more = f" … ({len(report.untrained_candidates)} in all)" if len(report.untrained_candidates) > 12 else ""
        out.print(f"    [dim]untrained-looking special rows (not tokens this model stops on): {shown}{more}[/]")
