/**
 * A Python string literal that means a text exactly, as easy to read as it
 * can be: the text as typed between quotes where that is valid Python (a
 * raw string, r'…', where it holds backslashes), else JSON's escapes (which
 * are Python's too). No import: tests/test_sidebar_code.py runs it in node
 * against Python's own reading of what it writes (ast.literal_eval).
 */

// what is never written as itself: control characters, line and paragraph
// separators, zero-width and bidirectional marks (a reader could not see them)
const UNSEEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/;
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/; // no UTF-8 for these

/**
 * Whether `text` between `quote` and `quote` (with an r before it when the
 * text holds a backslash) reads back as `text`: Python's tokenizer takes a
 * backslash and the character after it together, so a quote may stand only
 * right after a backslash, and the text may not end in a backslash (it
 * would take the closing quote) nor, for triple quotes, in the quote.
 */
function fits(text: string, quote: string): boolean {
  if (quote.length === 3 && text.endsWith(quote[0])) {
    return false;
  }
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '\\') {
      if (i + 1 >= text.length) {
        return false;
      }
      i++;
    } else if (text.startsWith(quote, i)) {
      return false;
    }
  }
  return true;
}

export function pyString(text: string): string {
  if (!UNSEEN.test(text) && !LONE.test(text)) {
    const raw = text.includes('\\') ? 'r' : ''; // with no backslash, r changes nothing: left out
    for (const quote of ['"', "'", '"""', "'''"]) {
      if (fits(text, quote)) {
        return `${raw}${quote}${text}${quote}`;
      }
    }
  }
  // JSON's escapes are Python's; what it leaves as itself but no one could see is escaped too
  return JSON.stringify(text).replace(
    new RegExp(UNSEEN.source, 'g'),
    c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
  );
}
