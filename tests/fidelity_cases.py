"""A corpus of small JSON Lines and CSV records, written from their specifications (RFC 8259
and JSON Lines; RFC 4180), each with what bronze must make of it: a bronze row with its exact
values and rescued data, a quarantined record with its exact text, or no record at all (a
blank line).

Cases are grouped by category, one landing file per category (a few for line ends and
headers), so that the whole corpus is read by one bronze run per feed
(``tests/test_fidelity.py``).

The JSON feed's schema is :data:`JSON_SCHEMA`. A valid line is a JSON object; its values are
typed by Spark's JSON rules (a JSON string for a STRING column, a JSON integer for INT and
BIGINT, any JSON number for DOUBLE, ``true``/``false`` for BOOLEAN). A value of another JSON
type, or an integer out of its column's range, leaves the column null and goes to the rescued
column with its JSON type as written, beside the keys outside the schema. Left out on purpose
(no case asserts them): duplicate keys, a key differing from a column only in case, a
non-string value for a STRING column, the strings "NaN"/"Infinity" for a DOUBLE column,
integers written with an exponent or a fraction of zero (``1e2``, ``1.0``) for an integer
column, numbers beyond a double's range, and lone surrogates.

The CSV feed's schema is :data:`CSV_SCHEMA`, read with a header (matched to the schema by name,
case-insensitively) or, for the positional feed, without one. Left out on purpose: blank lines,
a quote inside an unquoted field, a lone CR, spaces around a number, an empty field of a column
outside the schema, and a value that does not fit under a header spelled in another case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

JSON_SCHEMA = "id BIGINT, name STRING, amount INT, price DOUBLE, ok BOOLEAN, big BIGINT"
JSON_COLUMNS = ("id", "name", "amount", "price", "ok", "big")
CSV_SCHEMA = "id STRING, name STRING, amount INT"
CSV_COLUMNS = ("id", "name", "amount")
CSV_HEADER = "id,name,amount"
ID = "@ID@"  # where a JSON case's text takes its record's id


class Outcome(Enum):
    """What bronze makes of a line or row."""

    BRONZE = "bronze"  # a row of the bronze table
    QUARANTINE = "quarantine"  # a row of the quarantine table, its text whole in ``_raw``
    NOT_A_RECORD = "not a record"  # a blank JSON line


@dataclass(frozen=True)
class Case:
    """One JSON line or CSV row (its exact text, without the line end) and its outcome."""

    text: str
    outcome: Outcome
    row: tuple[Any, ...] = ()  # BRONZE: the schema's columns, in order
    rescued: dict[str, Any] | None = None  # BRONZE: the rescued column, parsed

    @property
    def key(self) -> Any:
        """The record's id (the first column), or None."""
        return self.row[0] if self.row else None


@dataclass(frozen=True)
class FeedFile:
    """One landing file: its cases, one per line (a CSV row may span lines), after a header."""

    name: str
    category: str
    cases: tuple[Case, ...]
    header: str | None = None
    line_end: str = "\n"
    final_line_end: bool = True

    def text(self) -> str:
        lines = [*([self.header] if self.header is not None else []),
                 *(c.text for c in self.cases)]
        return self.line_end.join(lines) + (self.line_end if self.final_line_end else "")

    def records(self) -> list[Case]:
        return [c for c in self.cases if c.outcome is not Outcome.NOT_A_RECORD]

    def expected(self, outcome: Outcome) -> list[Case]:
        return [c for c in self.cases if c.outcome is outcome]


@dataclass(frozen=True)
class Feed:
    """The files of one bronze table and how the table reads them."""

    format: str
    schema: str
    columns: tuple[str, ...]
    files: tuple[FeedFile, ...]
    options: tuple[tuple[str, str], ...] = ()

    def categories(self) -> list[str]:
        return list(dict.fromkeys(f.category for f in self.files))

    def in_category(self, category: str) -> list[FeedFile]:
        return [f for f in self.files if f.category == category]

    def cases(self, outcome: Outcome) -> list[Case]:
        return [c for f in self.files for c in f.expected(outcome)]

    def records(self) -> int:
        return sum(len(f.records()) for f in self.files)


# ============================================================================ JSON Lines
class _JsonFile:
    """The cases of one JSON Lines file; valid records take ids from ``first_id`` up."""

    def __init__(self, name: str, category: str, first_id: int) -> None:
        self.name, self.category, self.next_id = name, category, first_id
        self.cases: list[Case] = []

    def good(self, text: str, rescued: dict[str, Any] | None = None, **values: Any) -> None:
        """A valid record: ``text`` with :data:`ID` replaced by a new id (without it, a
        record with a null id); ``values`` are its non-null columns other than ``id``."""
        ident = None
        if ID in text:
            ident, self.next_id = self.next_id, self.next_id + 1
            text = text.replace(ID, str(ident))
        row = tuple(ident if c == "id" else values.pop(c, None) for c in JSON_COLUMNS)
        assert not values, f"not columns of {JSON_SCHEMA}: {values}"
        assert ident is not None or rescued is None, "a rescued record needs an id"
        self._add(Case(text, Outcome.BRONZE, row, rescued))

    def value(self, body: str, rescued: dict[str, Any] | None = None, **values: Any) -> None:
        """A valid record ``{"id": <id>, <body>}``."""
        self.good(f'{{"id": {ID}, {body}}}', rescued, **values)

    def bad(self, *texts: str) -> None:
        for text in texts:
            self._add(Case(text, Outcome.QUARANTINE))

    def blank(self, *texts: str) -> None:
        for text in texts:
            assert text.strip(" \t") == "", repr(text)
            self._add(Case(text, Outcome.NOT_A_RECORD))

    def _add(self, case: Case) -> None:
        assert "\n" not in case.text and "\r" not in case.text, repr(case.text)
        self.cases.append(case)

    def file(self, line_end: str = "\n", final_line_end: bool = True) -> FeedFile:
        return FeedFile(self.name, self.category, tuple(self.cases), None, line_end,
                        final_line_end)


def _json_types() -> list[FeedFile]:
    """Valid objects holding every JSON type the schema's columns take."""
    f = _JsonFile("types.json", "types", 1000)
    f.value('"name": "all", "amount": 1, "price": 1.5, "ok": true, "big": 2',
            name="all", amount=1, price=1.5, ok=True, big=2)
    f.good(f'{{"big": 20, "ok": false, "price": 0.25, "amount": 3, "name": "reversed", '
           f'"id": {ID}}}', name="reversed", amount=3, price=0.25, ok=False, big=20)
    f.good(f'{{"id": {ID}}}')
    f.value('"name": null, "amount": null, "price": null, "ok": null, "big": null')
    f.value('"ok": true', ok=True)
    f.value('"ok": false', ok=False)
    f.value('"ok": null')
    f.value('"name": "only a name"', name="only a name")
    f.value('"amount": 42', amount=42)
    f.value('"amount": -42', amount=-42)
    f.value('"price": 7', price=7.0)  # a JSON integer is a number for a DOUBLE column
    f.value('"price": -7', price=-7.0)
    f.value('"big": 5', big=5)
    f.good(f'{{"n\\u0061me": "escaped key", "id": {ID}}}', name="escaped key")
    f.good(f'{{"\\u0069\\u0064": {ID}, "name": "escaped id key"}}', name="escaped id key")
    f.good("{}")  # an empty object is a record: every column null
    f.good('{"name": "no id"}', name="no id")
    f.good('{"ok": false}', ok=False)
    # Every combination of values, written by a JSON encoder (keys in varying order).
    for i, (ok, amount, price) in enumerate(
            (ok, amount, price) for ok in (True, False, None) for amount in (0, 1, -1)
            for price in (0.5, -2.0, 10.0)):
        record = {"name": f"combo {i}", "amount": amount, "price": price, "ok": ok,
                  "big": i * 1_000_000_007}
        keys = list(record)
        keys = keys[i % len(keys):] + keys[:i % len(keys)]
        body = ", ".join(f"{json.dumps(k)}: {json.dumps(record[k])}" for k in keys)
        f.value(body, **{k: v for k, v in record.items() if v is not None})
    return [f.file()]


STRINGS: list[tuple[str, str]] = [  # a JSON string as written, and the text it stands for
    ('"plain"', "plain"),
    ('""', ""),
    ('" "', " "),
    ('"  padded  "', "  padded  "),
    ('"café"', "café"),
    (r'"caf\u00e9"', "café"),
    (r'"caf\u00E9"', "café"),
    ('"日本語"', "日本語"),
    (r'"\u65e5\u672c\u8a9e"', "日本語"),
    ('"שלום"', "שלום"),
    ('"😀"', "😀"),
    (r'"\ud83d\ude00"', "😀"),  # a surrogate pair is one character
    (r'"\uD83D\uDE00"', "😀"),
    ('"𝄞"', "𝄞"),
    (r'"\ud834\udd1e"', "𝄞"),
    ('"e\u0301"', "e\u0301"),  # a combining accent, not normalized to "é"
    (r'"e\u0301"', "e\u0301"),
    ('"👩\u200d👩\u200d👧"', "👩\u200d👩\u200d👧"),
    (r'"a\nb"', "a\nb"),
    (r'"a\r\nb"', "a\r\nb"),
    (r'"a\tb"', "a\tb"),
    (r'"a\bb"', "a\bb"),
    (r'"a\fb"', "a\fb"),
    (r'"\"quoted\""', '"quoted"'),
    (r'"back\\slash"', "back\\slash"),
    (r'"C:\\dir\\file.txt"', "C:\\dir\\file.txt"),
    (r'"\\u00e9"', "\\u00e9"),  # an escaped backslash, then text: no escape
    (r'"\\\""', '\\"'),
    (r'"\/"', "/"),
    ('"a/b"', "a/b"),
    (r'"\u0041\u0042"', "AB"),
    (r'"\u0000"', "\x00"),
    (r'"nul\u0000inside"', "nul\x00inside"),
    (r'"\u001f"', "\x1f"),
    ('"del\x7f"', "del\x7f"),  # U+007F needs no escape (RFC 8259: only U+0000-U+001F)
    ('"ls\u2028ps\u2029"', "ls\u2028ps\u2029"),  # no line end in JSON Lines
    (r'"\u2028"', "\u2028"),
    ('"\ufeffbom inside"', "\ufeffbom inside"),
    (r'"\ufeff"', "\ufeff"),
    ('"\u00a0nbsp"', "\u00a0nbsp"),
    (r'"{\"id\": 1}"', '{"id": 1}'),
    ('"[1, 2]"', "[1, 2]"),
    ('"12"', "12"),
    ('"true"', "true"),
    ('"null"', "null"),
    ('"NaN"', "NaN"),
    ('"\'single\'"', "'single'"),
    ('"// not a comment"', "// not a comment"),
    ('"/* nor this */"', "/* nor this */"),
    ('"' + "long " * 400 + '"', "long " * 400),
]


def _json_strings() -> list[FeedFile]:
    """Strings with unicode, escapes and look-alikes of other JSON, for the STRING column."""
    f = _JsonFile("strings.json", "strings", 2000)
    for text, value in STRINGS:
        f.value(f'"name": {text}', name=value)
    return [f.file()]


INT_FITS = ["0", "-0", "1", "-1", "123", "2147483647", "-2147483648"]
INT_RESCUED = ["2147483648", "-2147483649", "4294967296", "99999999999999999999", "12.5",
               "-0.5"]
DOUBLES = ["0", "-0", "0.0", "-0.0", "-0.0e0", "1", "-1", "1.5", "-1.5", "0.1",
           "0.30000000000000004", "3.141592653589793", "3.14159265358979323846264338327950288",
           "1e2", "1E2", "1e+2", "1e-2", "1.5E-3", "-2.5e10", "0e0", "1e0", "1e22", "1e23",
           "12345.6789e-2", "100", "1.7976931348623157e308", "-1.7976931348623157e308",
           "2.2250738585072014e-308", "2.225073858507201e-308", "5e-324", "4.9e-324",
           "123456789012345678901234567890", "9007199254740993"]
LONG_FITS = ["0", "-0", "1", "2147483648", "-2147483649", "4294967296",
             "9223372036854775807", "-9223372036854775808"]
LONG_RESCUED = ["9223372036854775808", "-9223372036854775809", "18446744073709551616",
                "1.5", "-0.25"]


def _json_numbers() -> list[FeedFile]:
    """Integers at and past their column's range, doubles small, big, with exponents and
    negative zero. A value out of range is rescued with the number as written."""
    f = _JsonFile("numbers.json", "numbers", 3000)
    for text in INT_FITS:
        f.value(f'"amount": {text}', amount=int(text))
    for text in INT_RESCUED:
        f.value(f'"name": "int {text}", "amount": {text}', {"amount": json.loads(text)},
                name=f"int {text}")
    for text in DOUBLES:
        # "-0" is the integer zero; "-0.0" is the double negative zero (its sign is checked)
        f.value(f'"price": {text}', price=float(json.loads(text)))
    for text in LONG_FITS:
        f.value(f'"big": {text}', big=int(text))
    for text in LONG_RESCUED:
        f.value(f'"name": "long {text}", "big": {text}', {"big": json.loads(text)},
                name=f"long {text}")
    f.value('"amount": 2147483647, "big": 9223372036854775807, "price": 5e-324',
            amount=2147483647, big=9223372036854775807, price=5e-324)
    f.value('"amount": 2147483648, "big": 9223372036854775808, "price": 1',
            {"amount": 2147483648, "big": 9223372036854775808}, price=1.0)
    return [f.file()]


EXTRA_VALUES = [  # the text of a key outside the schema and its value, as JSON
    '"text"', '""', "0", "-17", "1.25", "-0.5e-3", "1E3", "0.1", "-0.0",
    "123456789012345678901234567890", "true", "false", "{}", "[]",
    '{"a": 1, "b": [true, null, "x"]}', '[1, "two", 3.5, false, null, {"k": "v"}, [[]]]',
    '{"a": ' * 20 + "1" + "}" * 20, r'"caf\u00e9 \ud83d\ude00"', r'"quote \" backslash \\"',
    r'"line\nbreak"', '"日本"', '{"nested": {"deeper": [{"deepest": false}]}}',
]
EXTRA_KEYS = [r'"caf\u00e9"', '"日本"', '""', '"with space"', '"a.b"', '"_rescued_data"',
              '"$weird-key!"', r'"tab\tkey"', '"1"', '"nul\\u0000key"']
MISFITS = [  # a schema column with a value of another JSON type
    ("amount", '"12.5"'), ("amount", '"12"'), ("amount", "true"), ("amount", "[1]"),
    ("amount", '{"v": 1}'), ("amount", '""'), ("price", '"1.5"'), ("price", "false"),
    ("price", "[1.5]"), ("price", "{}"), ("ok", '"true"'), ("ok", "1"), ("ok", "0"),
    ("ok", '"yes"'), ("ok", "{}"), ("ok", "[]"), ("big", '"123"'), ("big", "true"),
    ("big", "[]"), ("name", "null"),
]


def _json_rescued() -> list[FeedFile]:
    """Keys outside the schema, of every JSON type, and values that do not fit their column:
    kept in the rescued column with their JSON types, the rest of the record in bronze."""
    f = _JsonFile("rescued.json", "rescued", 4000)
    for value in EXTRA_VALUES:
        f.value(f'"name": "extra", "extra": {value}', {"extra": json.loads(value)},
                name="extra")
    for key in EXTRA_KEYS:
        f.value(f"{key}: 1", {json.loads(key): 1})
    for column, value in MISFITS:
        if value == "null":  # null fits any column: nothing to rescue
            f.value(f'"{column}": null')
        else:
            f.value(f'"{column}": {value}', {column: json.loads(value)})
    f.value('"extra_1": 1, "extra_2": "two", "extra_3": [3], "name": "three extras"',
            {"extra_1": 1, "extra_2": "two", "extra_3": [3]}, name="three extras")
    f.value('"amount": "x", "extra": 0, "name": "kept", "ok": false, "flag": false',
            {"amount": "x", "extra": 0, "flag": False}, name="kept", ok=False)
    f.value('"price": "1.5", "amount": 12.5, "ok": "no", "big": "9", "price2": 1.5',
            {"price": "1.5", "amount": 12.5, "ok": "no", "big": "9", "price2": 1.5})
    f.good('{"extra": {"id": 1}, "id": ' + ID + "}", {"extra": {"id": 1}})
    return [f.file()]


def _json_null_extras() -> list[FeedFile]:
    """A key outside the schema whose value is null is rescued as null: null is one of
    JSON's types, and the key's presence is data (a record saying "coupon": null is not one
    without a coupon). In a category of its own: the specification leaves it open."""
    f = _JsonFile("null_extras.json", "null_extras", 4500)
    f.value('"name": "extra", "extra": null', {"extra": None}, name="extra")
    f.value('"name": null, "extra": null', {"extra": None})
    f.value('"extra": null, "other": 1', {"extra": None, "other": 1})
    f.value('"extra": {"inner": null}', {"extra": {"inner": None}})
    return [f.file()]


def _json_whitespace() -> list[FeedFile]:
    """Insignificant whitespace (space and tab within a line) around every token, and
    blank lines, which are not records."""
    f = _JsonFile("whitespace.json", "whitespace", 5000)
    f.good(f'  {{"id": {ID}}}')
    f.blank("")
    f.good(f'{{"id": {ID}}}   ')
    f.good(f'\t{{"id": {ID}}}\t')
    f.blank("   ")
    f.good(f'{{ "id" : {ID} }}')
    f.good(f'{{\t"id"\t:\t{ID}\t,\t"name"\t:\t"tabs"\t}}', name="tabs")
    f.blank("\t")
    f.good(f'{{"id":{ID},"name":"compact","amount":1,"ok":true}}', name="compact", amount=1,
           ok=True)
    f.good(f'{{  "id"  :  {ID}  ,  "name"  :  "  spaced value  "  }}', name="  spaced value  ")
    f.good(f' \t {{"id": {ID}, "tags": [ 1 , 2 ] , "obj" : {{ "a" : [ ] }} }} \t ',
           {"tags": [1, 2], "obj": {"a": []}})
    f.good(f'{{"id": {ID}, "price" :-1.5e-3 , "ok" :false}}', price=-1.5e-3, ok=False)
    f.blank(" \t \t ")
    f.good("{ }")
    f.good("{\t}")
    f.good("   {}   ")
    f.good(f'{{"id": {ID},"name":"a",  "amount":\t7}}', name="a", amount=7)
    f.blank("\t\t", "")
    return [f.file()]


def _json_invalid() -> list[FeedFile]:
    """Text that is not JSON under RFC 8259: comments, single quotes, unquoted names,
    NaN/Infinity, leading zeros and other bad numbers, trailing commas, broken structure,
    misspelled literals, bad escapes and raw control characters in strings. Valid records
    between them show their neighbours untouched."""
    f = _JsonFile("invalid.json", "invalid", 6000)
    f.bad('{"id": 1} // comment', '// {"id": 1}', '/* c */ {"id": 1}', '{"id": /* c */ 1}',
          '{"id": 1 /* c */}', '# {"id": 1}', '{"id": 1} # comment')
    f.good(f'{{"id": {ID}, "name": "after comments"}}', name="after comments")
    f.bad("{'id': 1}", """{"id": 1, "name": 'single'}""", "{'id': 1, 'name': 'x'}",
          """{"id": 1, 'name': "x"}""")
    f.bad('{id: 1}', '{"id": 1, name: "x"}', '{$id: 1}', '{_id: 1}', '{id1: 1}')
    f.good(f'{{"id": {ID}, "name": "after names"}}', name="after names")
    f.bad('{"price": NaN}', '{"price": -NaN}', '{"price": Infinity}', '{"price": -Infinity}',
          '{"price": +Infinity}', '{"price": inf}', '{"price": nan}', '{"amount": INF}')
    f.bad('{"amount": 01}', '{"amount": -01}', '{"amount": 00}', '{"price": 01.5}',
          '{"price": 00.0}', '{"big": 0123}', '{"amount": +1}', '{"price": .5}',
          '{"price": -.5}', '{"price": 5.}', '{"price": 1.e5}', '{"price": 1e}',
          '{"price": 1e+}', '{"price": 1E-}', '{"amount": -}', '{"amount": 0x10}',
          '{"amount": 1_000}', '{"amount": --1}', '{"amount": 1.2.3}', '{"price": 1e5.5}',
          '{"amount": 1 2}', '{"amount": 1,000}')
    f.good(f'{{"id": {ID}, "amount": 10}}', amount=10)
    f.bad('{"id": 1,}', '{"id": 1, "name": "x",}', '{"tags": [1, 2,]}', '{"tags": [,1]}',
          '{,}', '{,"id": 1}', '{"id": 1,, "name": "x"}', '{"tags": [1,,2]}')
    f.bad('{"id" 1}', '{"id": 1 "name": "x"}', '{"id"=1}', '{"id": 1; "name": "x"}',
          '{"id":: 1}', '{"id"}', '{"id":}', '{:1}', '{1: 2}', '{null: 1}', '{true: 1}',
          '{["id"]: 1}', '{{"id": 1}}', '{"id": 1', '{"name": "open', '{', '}', '"',
          '{"tags": [1, 2}', '{"tags": [1, 2]]}', '{"tags": {"a": 1]}', '{"nested": {"a": 1}',
          ']', '[', '{]', '[}', '{"id": 1}}')
    f.good(f'{{"id": {ID}, "name": "after structure"}}', name="after structure")
    f.bad('{"ok": True}', '{"ok": FALSE}', '{"ok": Null}', '{"ok": tru}', '{"ok": nul}',
          '{"ok": truex}', '{"ok": undefined}', '{"ok": None}', '{"ok": yes}')
    f.bad(r'{"name": "\x41"}', r'{"name": "\a"}', r'{"name": "\u12"}', r'{"name": "\u12G4"}',
          r"""{"name": "\'"}""", r'{"name": "\U0001F600"}', r'{"name": "\0"}',
          r'{"name": "\ "}', r'{"name": "ends in a backslash\"}', '{"name": "a" "b"}')
    # Characters U+0000 to U+001F must be escaped inside a string (RFC 8259, section 7).
    f.bad('{"name": "tab\there"}', '{"name": "nul\x00"}', '{"name": "esc\x1b"}',
          '{"name": "bell\x07"}', '{"name": "\x1f"}', '{"name": "vt\x0bff\x0c"}')
    f.good(f'{{"id": {ID}, "name": "last"}}', name="last")
    return [f.file()]


def _json_not_objects() -> list[FeedFile]:
    """Lines holding a JSON value that is not an object, or more than one value."""
    f = _JsonFile("not_objects.json", "not_objects", 7000)
    f.bad("[]", "[1, 2, 3]", '[{"id": 1}]', '[{"id": 1}, {"id": 2}]', '"a string"', '""',
          "1", "0", "-1.5", "1e3", "null", "true", "false", r'"{\"id\": 1}"')
    f.good(f'{{"id": {ID}, "name": "between"}}', name="between")
    f.bad('{"id": 1}{"id": 2}', '{"id":1} , {"id":2}', '{"a": true} "x"', "{}}",
          '{"id": 1} {"id": 2}', '{"id": 1}\t{"id": 2}', '{"id": 1}[]', '{"id": 1} 1',
          '{"id": 1} null', '{"id": 1} true', '{"id": 1} x', '{"id": 1},', '{"id": 1};',
          '{"id": 1}]', '{"id": 1} {', "{} {}", "{}{}", '{"id": 1} ""', '"x" {"id": 1}',
          '1 {"id": 1}')
    f.good(f'{{"id": {ID}, "name": "last"}}', name="last")
    return [f.file()]


def _json_control() -> list[FeedFile]:
    """Lines of a BOM or control characters only, and control characters around a value.

    Quarantined: RFC 8259 (section 2) allows only space, tab, line feed and carriage return
    as whitespace, so such a line is not blank, and it holds no JSON value. A BOM may be
    ignored at the start of a JSON text (section 8.1), as it is at the start of a file; one
    on a line of its own in the middle of a file is text that is not JSON, and dropping it
    would lose a line without a trace. Characters that Java's ``trim`` or Python's
    ``strip`` take for whitespace (U+0000-U+001F, U+0085, U+00A0, U+2028, U+3000) are not
    JSON whitespace either."""
    f = _JsonFile("control.json", "control", 8000)
    f.good(f'{{"id": {ID}, "name": "first"}}', name="first")
    f.bad("\ufeff")
    f.good(f'{{"id": {ID}, "name": "after a BOM"}}', name="after a BOM")
    f.bad("\x00", "\x00\x00\x00", "\x01", "\x1b", "\x7f", "\x0b", "\x0c", "\x1c\x1d\x1e\x1f",
          "\x85", "\u00a0", "\u2028", "\u3000", "\u200b", " \x0c ", "\t\x0b\t")
    f.good(f'{{"id": {ID}, "name": "between"}}', name="between")
    f.bad('{"id": 1}\x0c', '\x0c{"id": 1}', '{"id":\x0b1}', '{"id": 1}\x00', '\x00{"id": 1}',
          '{"id": 1}\u00a0', '\u00a0{"id": 1}', '{"id": 1}\ufeff')
    f.good(f'{{"id": {ID}, "name": "last"}}', name="last")
    return [f.file()]


def _json_line_ends() -> list[FeedFile]:
    """CRLF line ends (the CR is not part of the line) and a last line without a line end."""
    crlf = _JsonFile("crlf.json", "line_ends", 9000)
    crlf.good(f'{{"id": {ID}, "name": "crlf 1"}}', name="crlf 1")
    crlf.bad('{"id": 1,}')
    crlf.blank("")
    crlf.good(f'{{"id": {ID}, "name": "crlf 2", "amount": 2}}', name="crlf 2", amount=2)
    crlf.good(f'{{"id": {ID}, "name": "crlf 3"}}  ', name="crlf 3")
    last_good = _JsonFile("last_good.json", "line_ends", 9100)
    last_good.good(f'{{"id": {ID}, "name": "not last"}}', name="not last")
    last_good.good(f'{{"id": {ID}, "name": "last, no line end"}}', name="last, no line end")
    last_bad = _JsonFile("last_bad.json", "line_ends", 9200)
    last_bad.good(f'{{"id": {ID}, "name": "before a cut line"}}', name="before a cut line")
    last_bad.bad('{"id": 1, "name": "cut')
    return [crlf.file(line_end="\r\n"), last_good.file(final_line_end=False),
            last_bad.file(final_line_end=False)]


def json_feed() -> Feed:
    files = [*_json_types(), *_json_strings(), *_json_numbers(), *_json_rescued(),
             *_json_null_extras(), *_json_whitespace(), *_json_invalid(),
             *_json_not_objects(), *_json_control(), *_json_line_ends()]
    return Feed("json", JSON_SCHEMA, JSON_COLUMNS, tuple(files))


# ============================================================================ CSV
def _good(text: str, *row: Any, rescued: dict[str, Any] | None = None) -> Case:
    assert len(row) == len(CSV_COLUMNS)
    return Case(text, Outcome.BRONZE, row, rescued)


def _bad(text: str) -> Case:
    return Case(text, Outcome.QUARANTINE)


CSV_NAMES: list[tuple[str, str | None]] = [  # a name field as written, and its value
    ("plain", "plain"),
    ('"quoted"', "quoted"),
    ('""', ""),  # a quoted empty field is an empty string
    ("", None),  # an unquoted empty field is NULL
    ('"a,b"', "a,b"),
    ('","', ","),
    ('",,,"', ",,,"),
    ('"a""b"', 'a"b'),
    ('""""', '"'),
    ('""""""', '""'),
    ('"say ""hi"", twice"', 'say "hi", twice'),
    ("  spaced  ", "  spaced  "),
    ('"  quoted spaces  "', "  quoted spaces  "),
    ("\ttab\t", "\ttab\t"),
    (" ", " "),
    ("café 日本 😀", "café 日本 😀"),
    ('"é,😀"', "é,😀"),
    ("it's", "it's"),
    ("'single quoted'", "'single quoted'"),
    ("null", "null"),
    ("NULL", "NULL"),
    ("#hash", "#hash"),
    ('"\\"', "\\"),  # RFC 4180 escapes only quotes: a backslash is text
    ('"a\\""b"', 'a\\"b'),
]
CSV_AMOUNTS: list[tuple[str, int | None]] = [("1", 1), ("-20", -20), ('"300"', 300),
                                             ("", None), ("0", 0)]


def _csv_fields() -> list[FeedFile]:
    """Every way of writing a name (quoted or not, empty, commas, quotes, spaces, unicode)
    with every way of writing an amount."""
    cases = [_good(f"f{n:03d},{name},{amount}", f"f{n:03d}", name_value, amount_value)
             for n, ((name, name_value), (amount, amount_value))
             in enumerate((a, b) for a in CSV_NAMES for b in CSV_AMOUNTS)]
    cases += [_good('"f,quoted id",x,1', "f,quoted id", "x", 1),
              _good(" f spaced id ,x,2", " f spaced id ", "x", 2),
              _good("#f comment-like id,x,3", "#f comment-like id", "x", 3),
              _good('"""f quoted""",x,4', '"f quoted"', "x", 4)]
    return [FeedFile("fields.csv", "fields", tuple(cases), CSV_HEADER)]


def _csv_line_breaks() -> list[FeedFile]:
    """Line breaks inside quoted fields, kept byte for byte, in files with LF and with CRLF
    line ends."""
    lf = (
        _good('n01,"line1\nline2",1', "n01", "line1\nline2", 1),
        _good('n02,"\n",2', "n02", "\n", 2),
        _good('n03,"a\n\nb",3', "n03", "a\n\nb", 3),  # a blank line inside quotes
        _good('n04,"ends with a break\n",4', "n04", "ends with a break\n", 4),
        _good('n05,"\nstarts with a break",5', "n05", "\nstarts with a break", 5),
        _good('n06,"crlf\r\ninside",6', "n06", "crlf\r\ninside", 6),
        _good('n07,"mixed\r\nand\nbreaks",7', "n07", "mixed\r\nand\nbreaks", 7),
        _good('n08,"quote ""and""\nbreak",8', "n08", 'quote "and"\nbreak', 8),
        _good('n09,"comma,\nbreak",9', "n09", "comma,\nbreak", 9),
        _good('"n10\nid",x,10', "n10\nid", "x", 10),
        _good('n11,"\r\n\r\n",11', "n11", "\r\n\r\n", 11),
        _good("n12,plain,12", "n12", "plain", 12),
    )
    crlf = (
        _good('r01,"lf\ninside",1', "r01", "lf\ninside", 1),
        _good('r02,"crlf\r\ninside",2', "r02", "crlf\r\ninside", 2),
        _good("r03,plain,3", "r03", "plain", 3),
        _good('r04,"\r\n",4', "r04", "\r\n", 4),
        _good('r05,"two\r\n\r\nbreaks",5', "r05", "two\r\n\r\nbreaks", 5),
        _good('r06,"mixed\nand\r\nbreaks",6', "r06", "mixed\nand\r\nbreaks", 6),
        _bad("r07,too few"),
        _good("r08,last,8", "r08", "last", 8),
    )
    return [FeedFile("line_breaks.csv", "line_breaks", lf, CSV_HEADER),
            FeedFile("line_breaks_crlf.csv", "line_breaks", crlf, CSV_HEADER, "\r\n")]


CSV_INT_FITS = [("42", 42), ("-42", -42), ("0", 0), ("-0", 0), ("2147483647", 2147483647),
                ("-2147483648", -2147483648), ('"7"', 7), ('"-8"', -8), ("", None)]
CSV_INT_RESCUED = [("12.5", "12.5"), ("abc", "abc"), ("2147483648", "2147483648"),
                   ("-2147483649", "-2147483649"), ('"1,000"', "1,000"), ("0x10", "0x10"),
                   ("1 000", "1 000"), ("12.", "12."), (".5", ".5"), ("seven", "seven"),
                   ("true", "true"), ('"twelve, quoted"', "twelve, quoted"),
                   ('"4""2"', '4"2')]


def _csv_types() -> list[FeedFile]:
    """Amounts that fit an INT, and text that does not (null, and rescued as a string)."""
    cases = [_good(f"t{n:02d},fits,{text}", f"t{n:02d}", "fits", value)
             for n, (text, value) in enumerate(CSV_INT_FITS)]
    cases += [_good(f"t{n:02d},rescued,{text}", f"t{n:02d}", "rescued", None,
                    rescued={"amount": value})
              for n, (text, value) in enumerate(CSV_INT_RESCUED, start=len(CSV_INT_FITS))]
    cases.append(_good('t99,"  padded  ",abc', "t99", "  padded  ", None,
                       rescued={"amount": "abc"}))
    return [FeedFile("types.csv", "types", tuple(cases), CSV_HEADER)]


def _csv_headers() -> list[FeedFile]:
    """Columns matched by name from the header: reordered, in another case, quoted, with
    columns outside the schema (rescued as strings) and without some of the schema's (null)."""
    def file(name: str, header: str, *cases: Case, line_end: str = "\n") -> FeedFile:
        return FeedFile(name, "headers", cases, header, line_end)

    return [
        file("reordered.csv", "amount,name,id",
             _good("1,Ann,h01", "h01", "Ann", 1),
             _good(',"x,y",h02', "h02", "x,y", None),
             _good('"3","",h03', "h03", "", 3),
             _good("4,,h04", "h04", None, 4),
             _good("abc,Bo,h05", "h05", "Bo", None, rescued={"amount": "abc"})),
        file("case.csv", "ID,Name,AMOUNT",
             _good("h10,Cy,10", "h10", "Cy", 10),
             _good('h11,"Di, Jr",11', "h11", "Di, Jr", 11),
             _good("h12,,", "h12", None, None)),
        file("mixed_case.csv", "Amount,nAmE,iD",
             _good("20,Ed,h20", "h20", "Ed", 20),
             _good('21,"""Fi""",h21', "h21", '"Fi"', 21)),
        file("quoted.csv", '"id","name","amount"',
             _good("h30,Gus,30", "h30", "Gus", 30),
             _good('"h31","Hal","31"', "h31", "Hal", 31)),
        file("extra.csv", "id,name,amount,note",
             _good("h40,Ivy,40,first note", "h40", "Ivy", 40, rescued={"note": "first note"}),
             _good('h41,Jo,41,"a, b"', "h41", "Jo", 41, rescued={"note": "a, b"}),
             _good("h42,Kit,abc,n", "h42", "Kit", None, rescued={"note": "n", "amount": "abc"}),
             _good("h43,Lu,43,42", "h43", "Lu", 43, rescued={"note": "42"}),
             _bad("h44,Mo,44"),
             _bad("h45,Ned,45,n,too many")),
        file("extra_between.csv", "note,id,other,name,amount",
             _good("n1,h50,o1,Oz,50", "h50", "Oz", 50, rescued={"note": "n1", "other": "o1"}),
             _good('"n 2",h51,"o,2",Pia,51', "h51", "Pia", 51,
                   rescued={"note": "n 2", "other": "o,2"})),
        file("missing.csv", "id,name",
             _good("h60,Quin", "h60", "Quin", None),
             _good('h61,"R, S"', "h61", "R, S", None),
             _bad("h62,Tam,62")),
        file("missing_reordered.csv", "name,id",
             _good("Uma,h70", "h70", "Uma", None),
             _good('"",h71', "h71", "", None)),
        file("id_only.csv", "other,id",
             _good("x,h80", "h80", None, None, rescued={"other": "x"})),
        file("crlf_reordered.csv", "name,amount,id",
             _good("Vi,90,h90", "h90", "Vi", 90),
             _good('"W\r\nX",91,h91', "h91", "W\r\nX", 91),
             line_end="\r\n"),
    ]


def _csv_malformed() -> list[FeedFile]:
    """Rows with more or fewer fields than the header: quarantined with their text."""
    cases = (
        _good("m00,first,0", "m00", "first", 0),
        _bad("m01,too few"),
        _bad("m02"),
        _bad("m03,too,many,fields"),
        _bad("m04,trailing comma,1,"),
        _bad('m05,"quoted, comma",1,extra'),
        _bad('m06,"two\nlines",1,extra'),
        _bad(",,,"),
        _good("m08,,", "m08", None, None),
        _good('m09,"",', "m09", "", None),
        _bad('"m10","x"'),
        _bad("m11,x,1,2,3,4,5"),
        _good("m12,between,12", "m12", "between", 12),
        _bad('m13,"a,b"'),
        _bad('m14,"x ""y""",1,""'),
        _good("m15,last,15", "m15", "last", 15),
    )
    return [FeedFile("malformed.csv", "malformed", cases, CSV_HEADER, final_line_end=False)]


def csv_feed() -> Feed:
    files = [*_csv_fields(), *_csv_line_breaks(), *_csv_types(), *_csv_headers(),
             *_csv_malformed()]
    return Feed("csv", CSV_SCHEMA, CSV_COLUMNS, tuple(files))


def positional_feed() -> Feed:
    """A CSV feed read without a header (``header: false``): the first line is data, and
    fields are matched to the schema by position."""
    cases = (
        _good("p1,first line is data,1", "p1", "first line is data", 1),
        _good('p2,"quoted, comma",2', "p2", "quoted, comma", 2),
        _good("p3,,3", "p3", None, 3),
        _good('p4,"",', "p4", "", None),
        _good('p5,"say ""hi""",5', "p5", 'say "hi"', 5),
    )
    return Feed("csv", CSV_SCHEMA, CSV_COLUMNS,
                (FeedFile("positional.csv", "positional", cases),), (("header", "false"),))
