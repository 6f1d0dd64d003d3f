"""Tables that fit the terminal: numbers are never cut, long text folds, and when the columns still
do not fit, the least important ones are left out (and named under the table; `--wide` shows all).

Used by `trainstack status` and `trainstack compare`. The width is the terminal's (`COLUMNS` when
set, 80 in a pipe without it); `wide` lays the table out at its natural width instead. The dry run
and the post-run summary fold free text and shell commands with `fold` / `fold_shell` (whole lines
in a pipe without COLUMNS: `output_width`).
"""
from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from typing import Sequence

BORDER = 3  # rich's "│ " + " " per column (+1 for the closing border)


@dataclass
class Column:
    name: str
    priority: int = 0  # 0: always shown; higher numbers are left out first when the table is too wide
    numeric: bool = False  # right-aligned, never cut (its width is its widest value)
    min_width: int = 8  # the narrowest a text column folds to
    max_lines: int | None = None  # a droppable column whose cells would fold to more lines is left out instead


def terminal_width() -> int:
    return shutil.get_terminal_size(fallback=(80, 24)).columns


def _natural(col: Column, cells: Sequence[str]) -> int:
    return max([len(col.name), *(max((len(p) for p in c.splitlines()), default=0) for c in cells)])


# A long word folds after one of these (`cluster.` / `num_nodes`, `run-` / `id`, `key=` / `value`),
# never inside a part, unless the part alone is wider than its column.
SOFT_CHARS = "/._=,:-"
SOFT_BREAK = re.compile(f"(?<=[{re.escape(SOFT_CHARS)}])")


def _parts(word: str) -> list[str]:
    return [p for p in SOFT_BREAK.split(word) if p]


def _longest_part(text: str) -> int:
    return max((len(p) for w in text.split() for p in _parts(w)), default=0)


def _header_min(name: str) -> int:
    return max(_longest_part(name), 1)


WORD_CAP = 20  # a longer word (a path) folds rather than widen its column


def _min(col: Column, cells: Sequence[str]) -> int:
    values = max((len(c) for c in cells), default=0)
    if col.numeric:
        return max(values, min(_header_min(col.name), 12), 1)
    word = max((_longest_part(c) for c in cells), default=0)
    return min(_natural(col, cells), max(col.min_width, min(_header_min(col.name), 12), min(word, WORD_CAP)))


def wrap_cell(text: str, width: int) -> str:
    """A text cell folded to `width`: at spaces (a word that fits a line starts one), a longer word
    after its soft breaks (SOFT_BREAK), and only a part wider than the column is cut; so a column
    never splits `rollout_batch_size` or `finished`."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        cur = ""
        for word in line.split(" "):
            if len(cur) + bool(cur) + len(word) <= width:
                cur += (" " if cur else "") + word
                continue
            if cur:
                out.append(cur)
                cur = ""
            for piece in ([word] if len(word) <= width else _parts(word)):
                if len(cur) + len(piece) > width and cur:
                    out.append(cur)
                    cur = ""
                while len(piece) > width:
                    out.append(piece[:width])
                    piece = piece[width:]
                cur += piece
        out.append(cur)
    return "\n".join(out)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> dict[int, int]:
    """{column index: width} of the columns shown at `width`: every column at its natural width when
    that fits; else text columns shrink (folding) towards their minimum, and while even the minimums
    do not fit, the highest-priority-number column (the last among equals) is left out."""
    cells = [[r[i] for r in rows] for i in range(len(columns))]
    natural = [_natural(c, cells[i]) for i, c in enumerate(columns)]
    least = [min(_min(c, cells[i]), natural[i]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    def overhead(idx: list[int]) -> int:
        return BORDER * len(idx) + 1

    while sum(least[i] for i in shown) + overhead(shown) > width:
        droppable = [i for i in shown if columns[i].priority > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: (columns[i].priority, i)))
    while True:
        widths = _shrink(columns, natural, least, shown, width - overhead(shown))
        tall = [i for i in shown if columns[i].max_lines and columns[i].priority > 0 and any(
            len(wrap_cell(c, widths[i]).splitlines()) > (columns[i].max_lines or 0) for c in cells[i])]
        if not tall:
            return widths
        # rows stay short: the least important column goes (the tall one's room grows), as when too wide
        shown.remove(max((i for i in shown if columns[i].priority > 0), key=lambda i: (columns[i].priority, i)))


def _shrink(columns: Sequence[Column], natural: list[int], least: list[int], shown: list[int],
            room: int) -> dict[int, int]:
    widths = {i: natural[i] for i in shown}
    excess = sum(widths.values()) - room
    shrinkable = [i for i in shown if natural[i] > least[i]]
    while excess > 0 and shrinkable:  # fold numeric headers first, then the widest text, a character at a time
        i = max(shrinkable, key=lambda j: (columns[j].numeric, widths[j] - least[j], widths[j]))
        widths[i] -= 1
        excess -= 1
        if widths[i] <= least[i]:
            shrinkable.remove(i)
    return widths


def wrap_header(name: str, width: int) -> str:
    """A header over several lines, broken at spaces and after '/', '.', '_', '-', each line at most `width`."""
    tokens = [t for t in re.split(r"(?<=[/._-])|(?= )", name) if t]
    lines: list[str] = []
    for tok in tokens:
        if lines and len(lines[-1] + tok) <= width:
            lines[-1] += tok
        else:
            lines.append(tok.lstrip())
    return "\n".join(ln.rstrip() for ln in lines)


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None = None, file=None,
                wide: bool = False, width: int | None = None) -> list[str]:
    """Print; return the names of the columns left out (empty with `wide` or when all fit)."""
    from rich.console import Console
    from rich.table import Table

    out = file or sys.stdout
    cells = [[r[i] for r in rows] for i in range(len(columns))]
    if wide:
        widths = {i: _natural(c, cells[i]) for i, c in enumerate(columns)}
        width = max(sum(widths.values()) + BORDER * len(widths) + 1, len(title or ""))
    else:
        width = width or terminal_width()
        widths = fit(columns, rows, width)
    hidden = [columns[i].name for i in range(len(columns)) if i not in widths]
    table = Table(title=title, title_justify="left", expand=False)
    for i, w in widths.items():
        col = columns[i]
        table.add_column(wrap_header(col.name, w), justify="right" if col.numeric else "left", width=w,
                         min_width=w, max_width=w, overflow="fold")
    for r in rows:
        table.add_row(*(r[i] if columns[i].numeric else wrap_cell(r[i], w) for i, w in widths.items()))
    console = Console(file=out, width=width, highlight=False, soft_wrap=False, emoji=False, markup=False,
                      force_terminal=False if not getattr(out, "isatty", lambda: False)() else None)
    console.print(table)
    if hidden:
        import textwrap

        note = (f"({len(hidden)} column{'s' if len(hidden) != 1 else ''} left out to fit {width} columns: "
                f"{', '.join(hidden)}; --wide shows all)")
        print(textwrap.fill(note, width=max(width, 20), break_on_hyphens=False), file=out)
    return hidden


def output_width(stream=None) -> int | None:
    """The width to fold free text to: `COLUMNS` when set, else the terminal's when `stream` is one;
    None in a pipe or a log without COLUMNS (lines are kept whole there, for grep and for tools)."""
    import os

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    stream = stream or sys.stdout
    if getattr(stream, "isatty", lambda: False)():
        try:
            return os.get_terminal_size(stream.fileno()).columns or None  # a pty that reports 0 columns
        except (OSError, ValueError):
            return None
    return None


def _soft_wrapper(**kw):
    import textwrap

    class SoftWrapper(textwrap.TextWrapper):
        """textwrap, except that a word longer than a line (a path, a dotted name) breaks after one of
        SOFT_CHARS (`runs/` + `tiny-grpo-arithmetic-8349293f/`), never inside a part; only a part longer
        than a whole line (a hash, a token) is cut."""

        def _split_chunks(self, text):
            line = self.width - max(len(self.initial_indent), len(self.subsequent_indent))
            return [p for chunk in super()._split_chunks(text)
                    for p in (_parts(chunk) if len(chunk) > line and chunk.strip() else [chunk])]

    return SoftWrapper(**kw)


def fold(text: str, width: int | None, indent: str = "", subsequent: str | None = None) -> list[str]:
    """`indent + text` folded to `width` (continuation lines start with `subsequent`, default the indent
    plus two spaces); a word longer than a line (a path) folds after a `/`, `.`, `-`, `_`, ... Unfolded
    when `width` is None."""
    if width is None:
        return [indent + text]
    rest = indent + "  " if subsequent is None else subsequent
    if len(rest) > width // 2:
        rest = rest[: width // 2]
    return _soft_wrapper(width=width, initial_indent=indent, subsequent_indent=rest, break_long_words=True,
                         break_on_hyphens=False, drop_whitespace=True, replace_whitespace=False).wrap(text) or [indent]


def shell_words(line: str) -> list[str]:
    """A shell line split at the spaces outside quotes (each word exactly as written: `&&` stays `&&`)."""
    words, cur, quote = [], "", ""
    for ch in line:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            cur += ch
            quote = ch
        elif ch == " ":
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        words.append(cur)
    return words


def _cut_word(word: str, first: int, width: int) -> list[str]:
    """A word over several lines with backslash-newline continuations the shell removes; inside single
    quotes the quote is closed before the break and reopened after it ('ab'\\ + 'cd' is 'abcd')."""
    pieces, cur, quote, room = [], "", "", first
    for i, ch in enumerate(word):
        cur += ch
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        limit = room - (3 if quote == "'" else 2)
        if len(cur) >= limit and i < len(word) - 1 and ch != "\\":
            if quote == "'":
                pieces.append(cur + "'\\")
                cur = "'"
            else:
                pieces.append(cur + "\\")
                cur = ""
            room = width
    pieces.append(cur)
    return pieces


def fold_shell(line: str, width: int | None) -> list[str]:
    """A shell command folded to `width` with backslash-newline continuations: pasted, it runs as the
    one-line form does. Unfolded when `width` is None or it fits."""
    if width is None or len(line) <= width:
        return [line]
    width = max(width, 20)
    out: list[str] = []
    cur = ""
    for word in shell_words(line):
        lead = "" if not out and not cur else "  " if not cur else cur + " "
        if len(lead) + len(word) + 2 <= width:  # room for " \"
            cur = lead + word
            continue
        if cur and cur.strip():
            out.append(cur + " \\")
            cur = ""
        start = "" if not out else "  "
        if len(start) + len(word) + 2 <= width:
            cur = start + word
            continue
        pieces = _cut_word(word, width - len(start), width)
        out.append(start + pieces[0])
        out += pieces[1:-1]
        cur = pieces[-1]
    if cur:
        out.append(cur)
    return out
