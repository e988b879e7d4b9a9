"""The code the run browser writes into a notebook quotes text as Python
would read it back: ``pyString`` (js/sidebar/pystring.ts, as built into
lib/ by scripts/setup) run in node over hostile texts, each literal read by
Python's own parser (``ast.literal_eval``) and compared with the text. A
plain query comes out as typed between quotes; one with backslashes as a raw
string."""

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "lib" / "sidebar" / "pystring.js"
NODE = shutil.which("node")
# the built module has no import: loaded from its text, whatever package.json says of modules
RUN = """
const fs = require('fs');
const src = fs.readFileSync(process.argv[1], 'utf8');
import('data:text/javascript;base64,' + Buffer.from(src).toString('base64')).then(m => {
  const texts = JSON.parse(fs.readFileSync(0, 'utf8'));
  process.stdout.write(JSON.stringify(texts.map(m.pyString)));
});
"""

TEXTS = [
    "", "config.lr < 1e-2", 'config.opt == "adam"', "config.opt == 'adam'", """config.note == "it's" """,
    'config.note == "say \\"hi\\" \\\\ it\'s" or config.lr < 0.01', "\\", "a\\", "\\\\", '\\"', "\\'", 'a"', "a'",
    '"', "'", '"""', "'''", '""" and \'\'\'', "ends with '", 'ends with "', "tab\there", "new\nline", "cr\rx",
    "nul\x00x", "del\x7fx", "\u2028sep\u2029", "rtl \u202etxet", "zero\u200bwidth", "bom\ufeff", "é ü 漢字 🙂",
    "lone \ud800 high", "lone \udc00 low", "\\N{BULLET}", "\\u0041", "{0}{x!r}%s", "r'x'", "b'x'", "f'{1+1}'",
    "\\\n", "x" * 5000, '\\"\\"\\"', "'\\''",
]


QUERY = 'config.note == "say \\"hi\\" \\\\ it\'s" or config.lr < 0.01'


def literals(texts):
    assert NODE, "no node: scripts/setup builds the sidebar with it"
    assert BUILT.is_file(), "the sidebar is not built: run scripts/setup (or jlpm build)"
    done = subprocess.run([NODE, "-e", RUN, str(BUILT)], input=json.dumps(texts), capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_every_text_reads_back_as_itself_in_python():
    assert len(TEXTS) >= 40
    for text, literal in zip(TEXTS, literals(TEXTS), strict=True):
        tree = ast.parse(f"where = {literal}")  # valid Python, one string
        assert isinstance(tree.body[0].value, ast.Constant) and ast.literal_eval(literal) == text, (text, literal)
        assert "\n" not in literal and not any(0x2028 <= ord(c) <= 0x202e for c in literal), literal  # one visible line


@pytest.mark.parametrize(("text", "literal"), [
    ("config.lr < 1e-2", '"config.lr < 1e-2"'),
    ('config.opt == "adam"', "'config.opt == \"adam\"'"),
    (QUERY, 'r"""' + QUERY + '"""'),  # quotes of both kinds and backslashes: as typed, raw
    ("experiments/store", '"experiments/store"'),
])
def test_a_query_reads_as_it_was_typed(text, literal):
    assert literals([text]) == [literal]
