//! JSON read as the Python path reads it, so that failure messages built from an answer are
//! byte-identical to the Python users' ones.
//!
//! - [`parse_stdlib`]: Python's `json.loads(bytes)` (the encoding detected as `json.detect_encoding`
//!   does, `NaN`/`Infinity` accepted, control characters refused, duplicate keys: the last value at
//!   the first key's place); any failure is "not JSON" (the callers catch `ValueError`).
//! - [`parse_rapidjson`]: python-rapidjson's `loads` (what tritonclient.http uses): the body decoded
//!   as strict UTF-8 first (a `UnicodeDecodeError` message as CPython words it), then RapidJSON's
//!   reader with its error kinds and byte offsets (`Parse error at offset N: ...`), a NUL byte
//!   ending the document, `NaN`/`Inf`/`Infinity` accepted, RapidJSON's exponent bound.
//! - [`Value`] with Python's `str()`, `repr()`, truthiness and type names, and the `str` methods
//!   the messages use (`strip`, the first line of `splitlines`, a cut in code points).
//!
//! A lone UTF-16 surrogate from a `\u` escape (Python keeps it in a `str`) is held as U+FFFD.
//!
//! Both readers refuse a document nested deeper than [`MAX_DEPTH`] arrays and objects: the readers
//! recurse, and a hostile answer (`[[[[…` 20,000 deep) would overflow a runtime thread's stack.
//! Such an answer is "not JSON" to `parse_stdlib` and a parse error naming the bound to
//! `parse_rapidjson`.

use std::fmt::Write;

/// The deepest nesting of arrays and objects either reader takes (serde_json's default bound);
/// real answers nest a few levels (a tensor's dimensions in a JSON list of lists).
pub const MAX_DEPTH: usize = 128;

/// A decoded JSON value, as Python holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// an integer literal, as Python's `int` prints it (digits, a leading `-`; `-0` is `0`)
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    /// members in insertion order (a repeated key keeps its first place and its last value)
    Object(Vec<(String, Value)>),
}

impl Value {
    /// Python's type name (`type(v).__name__`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Object(_) => "dict",
        }
    }

    /// Python's `bool(v)`.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(digits) => digits != "0",
            Value::Float(x) => *x != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(items) => !items.is_empty(),
            Value::Object(members) => !members.is_empty(),
        }
    }

    /// `dict.get(key)` on an object; None on a missing key (and on any other value).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Python's `str(v)`.
    pub fn py_str(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            other => other.py_repr(),
        }
    }

    /// Python's `repr(v)`.
    pub fn py_repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out);
        out
    }

    fn write_repr(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("None"),
            Value::Bool(true) => out.push_str("True"),
            Value::Bool(false) => out.push_str("False"),
            Value::Int(digits) => out.push_str(digits),
            Value::Float(x) => out.push_str(&float_repr(*x)),
            Value::Str(s) => out.push_str(&str_repr(s)),
            Value::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_repr(out);
                }
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&str_repr(key));
                    out.push_str(": ");
                    value.write_repr(out);
                }
                out.push('}');
            }
        }
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, fixed notation for decimal
/// exponents -4 .. 15, else `d.ddde+XX`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let scientific = format!("{:e}", x.abs()); // shortest round-trip digits: "1.2345e-5", "1e16"
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let mantissa = if digits.len() == 1 {
            digits.clone()
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.abs())
    }
}

/// Python's `repr(str)`: single quotes unless the text holds `'` and no `"`; backslash escapes
/// for the quote, `\\`, `\t`, `\n`, `\r` and characters that are not printable.
pub fn str_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_printable(c) => {
                let code = c as u32;
                if code < 0x100 {
                    let _ = write!(out, "\\x{code:02x}");
                } else if code < 0x10000 {
                    let _ = write!(out, "\\u{code:04x}");
                } else {
                    let _ = write!(out, "\\U{code:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable()` for one character: control, format, separator (but the space),
/// surrogate and private-use characters are not (the common ones; unassigned code points are
/// taken as printable).
fn is_printable(c: char) -> bool {
    let code = c as u32;
    !matches!(code,
        0x00..=0x1f | 0x7f..=0xa0 | 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000 | 0xd800..=0xf8ff
        | 0xfeff | 0xfff9..=0xfffb | 0xf0000..=0x10ffff | 0xe0001 | 0xe0020..=0xe007f)
}

/// Python's `str.isspace()` for one character (what `str.strip()` removes).
fn is_py_space(c: char) -> bool {
    matches!(c as u32,
        0x09..=0x0d | 0x1c..=0x20 | 0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000)
}

/// Whether a character ends a line for Python's `str.splitlines()`.
fn is_line_break(c: char) -> bool {
    matches!(c as u32, 0x0a..=0x0d | 0x1c..=0x1e | 0x85 | 0x2028 | 0x2029)
}

/// Python's `text.strip()`.
pub fn py_strip(text: &str) -> &str {
    text.trim_matches(is_py_space)
}

/// Python's `text.splitlines()[0]` (the text itself when it has no line break; "" for "").
pub fn first_line(text: &str) -> &str {
    match text.find(is_line_break) {
        Some(end) => &text[..end],
        None => text,
    }
}

/// Python's `text[:n]` (code points).
pub fn cut_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Python's `bytes.decode("utf-8", "replace")`.
pub fn decode_replace(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Python's `str(UnicodeDecodeError)` for a strict UTF-8 decode of `bytes`; None when it decodes.
pub fn utf8_error_message(bytes: &[u8]) -> Option<String> {
    let error = std::str::from_utf8(bytes).err()?;
    let start = error.valid_up_to();
    let (end, reason) = match error.error_len() {
        None => (bytes.len(), "unexpected end of data"),
        Some(length) => {
            let lead = bytes[start];
            let reason = if (0x80..=0xc1).contains(&lead) || lead >= 0xf5 {
                "invalid start byte"
            } else {
                "invalid continuation byte"
            };
            (start + length, reason)
        }
    };
    Some(if end - start == 1 {
        format!(
            "'utf-8' codec can't decode byte 0x{:02x} in position {start}: {reason}",
            bytes[start]
        )
    } else {
        format!(
            "'utf-8' codec can't decode bytes in position {start}-{}: {reason}",
            end - 1
        )
    })
}

/// Python's `json.loads(body)` (a bytes body); None for anything `json.loads` raises on.
pub fn parse_stdlib(body: &[u8]) -> Option<Value> {
    let text = decode_like_json(body)?;
    let mut reader = StdlibReader {
        text: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    reader.skip_space();
    let value = reader.value()?;
    reader.skip_space();
    (reader.at == reader.text.len()).then_some(value)
}

/// `body.decode(json.detect_encoding(body), "surrogatepass")`.
fn decode_like_json(body: &[u8]) -> Option<String> {
    let utf16 = |bytes: &[u8], big: bool| -> Option<String> {
        if bytes.len() % 2 != 0 {
            return None;
        }
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|pair| {
                if big {
                    u16::from_be_bytes([pair[0], pair[1]])
                } else {
                    u16::from_le_bytes([pair[0], pair[1]])
                }
            })
            .collect();
        Some(
            char::decode_utf16(units)
                .map(|c| c.unwrap_or('\u{fffd}'))
                .collect(),
        )
    };
    let utf32 = |bytes: &[u8], big: bool| -> Option<String> {
        if bytes.len() % 4 != 0 {
            return None;
        }
        bytes
            .chunks_exact(4)
            .map(|quad| {
                let code = if big {
                    u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]])
                } else {
                    u32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]])
                };
                char::from_u32(code).or(if (0xd800..0xe000).contains(&code) {
                    Some('\u{fffd}')
                } else {
                    None
                })
            })
            .collect()
    };
    let utf8 = |bytes: &[u8]| std::str::from_utf8(bytes).ok().map(str::to_owned);
    if body.starts_with(&[0x00, 0x00, 0xfe, 0xff]) {
        return utf32(&body[4..], true);
    }
    if body.starts_with(&[0xff, 0xfe, 0x00, 0x00]) {
        return utf32(&body[4..], false);
    }
    if body.starts_with(&[0xfe, 0xff]) {
        return utf16(&body[2..], true);
    }
    if body.starts_with(&[0xff, 0xfe]) {
        return utf16(&body[2..], false);
    }
    if body.starts_with(&[0xef, 0xbb, 0xbf]) {
        return utf8(&body[3..]);
    }
    if body.len() >= 4 {
        if body[0] == 0 {
            return if body[1] != 0 {
                utf16(body, true)
            } else {
                utf32(body, true)
            };
        }
        if body[1] == 0 {
            return if body[2] != 0 || body[3] != 0 {
                utf16(body, false)
            } else {
                utf32(body, false)
            };
        }
    } else if body.len() == 2 {
        if body[0] == 0 {
            return utf16(body, true);
        }
        if body[1] == 0 {
            return utf16(body, false);
        }
    }
    utf8(body)
}

/// Inserts as a Python dict does: a repeated key keeps its place and takes the new value.
fn insert_member(members: &mut Vec<(String, Value)>, key: String, value: Value) {
    match members.iter_mut().find(|(k, _)| *k == key) {
        Some(member) => member.1 = value,
        None => members.push((key, value)),
    }
}

/// Python's integer literal as `int` prints it.
fn int_literal(literal: &str) -> String {
    let digits = literal.trim_start_matches('-');
    if digits.bytes().all(|b| b == b'0') {
        "0".into()
    } else {
        literal.into()
    }
}

/// Python's `json` scanner (py_scanner with strict=True), on decoded text.
struct StdlibReader<'a> {
    text: &'a [u8],
    at: usize,
    /// arrays and objects open around the reader's position
    depth: usize,
}

/// Python 3.11's bound on the digits of an int read from text (`sys.get_int_max_str_digits()`).
const INT_MAX_STR_DIGITS: usize = 4300;

impl StdlibReader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string().map(Value::Str)
            }
            b'{' | b'[' if self.depth >= MAX_DEPTH => None,
            b'{' => {
                self.at += 1;
                self.depth += 1;
                let object = self.object();
                self.depth -= 1;
                object
            }
            b'[' => {
                self.at += 1;
                self.depth += 1;
                let array = self.array();
                self.depth -= 1;
                array
            }
            b'n' if self.literal("null") => Some(Value::Null),
            b't' if self.literal("true") => Some(Value::Bool(true)),
            b'f' if self.literal("false") => Some(Value::Bool(false)),
            b'N' if self.literal("NaN") => Some(Value::Float(f64::NAN)),
            b'I' if self.literal("Infinity") => Some(Value::Float(f64::INFINITY)),
            b'-' if self.text[self.at..].starts_with(b"-Infinity") => {
                self.at += "-Infinity".len();
                Some(Value::Float(f64::NEG_INFINITY))
            }
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.at += 1;
                }
            }
            _ => return None,
        }
        let int_end = self.at;
        let mut is_float = false;
        if self.peek() == Some(b'.') && matches!(self.text.get(self.at + 1), Some(b'0'..=b'9')) {
            is_float = true;
            self.at += 1;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.at += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let mut probe = self.at + 1;
            if matches!(self.text.get(probe), Some(b'+' | b'-')) {
                probe += 1;
            }
            if matches!(self.text.get(probe), Some(b'0'..=b'9')) {
                is_float = true;
                self.at = probe;
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.at += 1;
                }
            }
        }
        let literal = std::str::from_utf8(&self.text[start..self.at]).ok()?;
        if is_float {
            literal.parse::<f64>().ok().map(Value::Float)
        } else if int_end - start - usize::from(literal.starts_with('-')) > INT_MAX_STR_DIGITS {
            None // int() refuses it: a ValueError, so "not JSON"
        } else {
            Some(Value::Int(int_literal(literal)))
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.at..self.at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        u32::from_str_radix(text, 16).ok()
    }

    fn string(&mut self) -> Option<String> {
        let mut out = String::new();
        loop {
            let run_start = self.at;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.text[run_start..self.at]).ok()?);
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(out);
                }
                b'\\' => {
                    self.at += 1;
                    let escape = self.peek()?;
                    self.at += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let mut code = unit;
                            if (0xd800..0xdc00).contains(&unit)
                                && self.text[self.at..].starts_with(b"\\u")
                            {
                                let save = self.at;
                                self.at += 2;
                                match self.hex4() {
                                    Some(low) if (0xdc00..0xe000).contains(&low) => {
                                        code = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                                    }
                                    _ => self.at = save,
                                }
                            }
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character (strict)
            }
        }
    }

    fn object(&mut self) -> Option<Value> {
        let mut members = Vec::new();
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Value::Object(members));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.at += 1;
            let key = self.string()?;
            self.skip_space();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            self.skip_space();
            let value = self.value()?;
            insert_member(&mut members, key, value);
            self.skip_space();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.skip_space();
                }
                b'}' => {
                    self.at += 1;
                    return Some(Value::Object(members));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self) -> Option<Value> {
        let mut items = Vec::new();
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Value::List(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_space();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.skip_space();
                }
                b']' => {
                    self.at += 1;
                    return Some(Value::List(items));
                }
                _ => return None,
            }
        }
    }
}

/// Why python-rapidjson's `loads` refused a body.
#[derive(Clone, Debug, PartialEq)]
pub enum RapidjsonError {
    /// the body is not UTF-8: `str(UnicodeDecodeError)`
    Unicode(String),
    /// `str(rapidjson.JSONDecodeError)`: `Parse error at offset N: ...`
    Parse(String),
}

/// python-rapidjson's `loads(body)`.
pub fn parse_rapidjson(body: &[u8]) -> Result<Value, RapidjsonError> {
    if let Some(message) = utf8_error_message(body) {
        return Err(RapidjsonError::Unicode(message));
    }
    // RapidJSON reads a NUL-terminated string: a NUL byte ends the document
    let end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
    let mut reader = RapidReader {
        text: &body[..end],
        at: 0,
        depth: 0,
    };
    reader.document().map_err(|(offset, what)| {
        RapidjsonError::Parse(format!("Parse error at offset {offset}: {what}"))
    })
}

type RapidResult<T> = Result<T, (usize, &'static str)>;

const EMPTY: &str = "The document is empty.";
const NOT_SINGULAR: &str = "The document root must not be followed by other values.";
const INVALID_VALUE: &str = "Invalid value.";
const MISS_NAME: &str = "Missing a name for object member.";
const MISS_COLON: &str = "Missing a colon after a name of object member.";
const MISS_COMMA_OR_CURLY: &str = "Missing a comma or '}' after an object member.";
const MISS_COMMA_OR_SQUARE: &str = "Missing a comma or ']' after an array element.";
const BAD_HEX: &str = "Incorrect hex digit after \\u escape in string.";
const BAD_SURROGATE: &str = "The surrogate pair in string is invalid.";
const BAD_ESCAPE: &str = "Invalid escape character in string.";
const MISS_QUOTE: &str = "Missing a closing quotation mark in string.";
const BAD_ENCODING: &str = "Invalid encoding in string.";
const TOO_BIG: &str = "Number too big to be stored in double.";
const MISS_FRACTION: &str = "Miss fraction part in number.";
const MISS_EXPONENT: &str = "Miss exponent in number.";
const TOO_DEEP: &str = "Nested deeper than 128 arrays and objects (inferload's bound).";

/// RapidJSON's `Reader` with `kParseNanAndInfFlag`, on valid UTF-8 without NUL bytes.
struct RapidReader<'a> {
    text: &'a [u8],
    at: usize,
    /// arrays and objects open around the reader's position
    depth: usize,
}

impl RapidReader<'_> {
    /// The next byte; 0 at the end (RapidJSON's `Peek` on a NUL-terminated stream).
    fn peek(&self) -> u8 {
        self.text.get(self.at).copied().unwrap_or(0)
    }

    fn consume(&mut self, byte: u8) -> bool {
        if self.peek() == byte && byte != 0 {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), b' ' | b'\n' | b'\r' | b'\t') {
            self.at += 1;
        }
    }

    fn document(&mut self) -> RapidResult<Value> {
        self.skip_space();
        if self.peek() == 0 {
            return Err((self.at, EMPTY));
        }
        let value = self.value()?;
        self.skip_space();
        if self.peek() != 0 {
            return Err((self.at, NOT_SINGULAR));
        }
        Ok(value)
    }

    fn value(&mut self) -> RapidResult<Value> {
        match self.peek() {
            b'n' => self.word(b"null", Value::Null),
            b't' => self.word(b"true", Value::Bool(true)),
            b'f' => self.word(b"false", Value::Bool(false)),
            b'"' => {
                self.at += 1;
                self.string().map(Value::Str)
            }
            b'{' | b'[' if self.depth >= MAX_DEPTH => Err((self.at, TOO_DEEP)),
            b'{' => {
                self.at += 1;
                self.depth += 1;
                let object = self.object();
                self.depth -= 1;
                object
            }
            b'[' => {
                self.at += 1;
                self.depth += 1;
                let array = self.array();
                self.depth -= 1;
                array
            }
            _ => self.number(),
        }
    }

    fn word(&mut self, word: &[u8], value: Value) -> RapidResult<Value> {
        self.at += 1;
        for byte in &word[1..] {
            if !self.consume(*byte) {
                return Err((self.at, INVALID_VALUE));
            }
        }
        Ok(value)
    }

    fn digit(&self) -> Option<u64> {
        let b = self.peek();
        b.is_ascii_digit().then(|| u64::from(b - b'0'))
    }

    fn number(&mut self) -> RapidResult<Value> {
        let start = self.at;
        let minus = self.consume(b'-');
        // the integer part, as RapidJSON accumulates it (32 bits, then 64, then a double)
        let mut i: u64 = 0;
        let mut use_64bit = false;
        let mut significand_digits = 0u32;
        if self.peek() == b'0' {
            self.at += 1;
        } else if let Some(first) = self.digit() {
            i = first;
            self.at += 1;
            let (limit, last) = if minus {
                (214_748_364, 8)
            } else {
                (429_496_729, 5)
            };
            while let Some(d) = self.digit() {
                if i >= limit && (i != limit || d > last) {
                    use_64bit = true;
                    break;
                }
                i = i * 10 + d;
                self.at += 1;
                significand_digits += 1;
            }
        } else if matches!(self.peek(), b'I' | b'N') {
            let value = self.nan_or_inf(minus)?;
            return Ok(value);
        } else {
            return Err((self.at, INVALID_VALUE));
        }
        let mut use_double = false;
        if use_64bit {
            let (limit, last) = if minus {
                (922_337_203_685_477_580u64, 8)
            } else {
                (1_844_674_407_370_955_161u64, 5)
            };
            while let Some(d) = self.digit() {
                if i >= limit && (i != limit || d > last) {
                    use_double = true;
                    break;
                }
                i = i * 10 + d;
                self.at += 1;
                significand_digits += 1;
            }
        }
        if use_double {
            while self.digit().is_some() {
                self.at += 1;
            }
        }
        let mut is_float = false;
        let mut exp_frac: i64 = 0;
        if self.consume(b'.') {
            is_float = true;
            if self.digit().is_none() {
                return Err((self.at, MISS_FRACTION));
            }
            let mut double_digits = significand_digits;
            if !use_double {
                let mut i64v = i;
                while let Some(d) = self.digit() {
                    if i64v > 0x1F_FFFF_FFFF_FFFF {
                        break;
                    }
                    i64v = i64v * 10 + d;
                    self.at += 1;
                    exp_frac -= 1;
                    if i64v != 0 {
                        double_digits += 1;
                    }
                }
                // RapidJSON's double loop counts digits from here on (its significandDigit)
                let mut d_value = i64v as f64;
                while let Some(d) = self.digit() {
                    if double_digits < 17 {
                        d_value = d_value * 10.0 + d as f64;
                        exp_frac -= 1;
                        if d_value > 0.0 {
                            double_digits += 1;
                        }
                    }
                    self.at += 1;
                }
            } else {
                while self.digit().is_some() {
                    if double_digits < 17 {
                        exp_frac -= 1;
                        double_digits += 1;
                    }
                    self.at += 1;
                }
            }
        }
        if self.consume(b'e') || self.consume(b'E') {
            is_float = true;
            let exp_minus = if self.consume(b'+') {
                false
            } else {
                self.consume(b'-')
            };
            let Some(first) = self.digit() else {
                return Err((self.at, MISS_EXPONENT));
            };
            self.at += 1;
            let mut exp = first as i64;
            if exp_minus {
                while self.digit().is_some() {
                    self.at += 1;
                }
            } else {
                let max_exp = 308 - exp_frac;
                while let Some(d) = self.digit() {
                    exp = exp * 10 + d as i64;
                    self.at += 1;
                    if exp > max_exp {
                        return Err((start, TOO_BIG));
                    }
                }
            }
        }
        let literal = std::str::from_utf8(&self.text[start..self.at]).expect("ASCII digits");
        if is_float {
            Ok(Value::Float(
                literal.parse::<f64>().unwrap_or(f64::INFINITY),
            ))
        } else {
            Ok(Value::Int(int_literal(literal)))
        }
    }

    fn nan_or_inf(&mut self, minus: bool) -> RapidResult<Value> {
        let mut value = None;
        if self.consume(b'N') {
            if self.consume(b'a') && self.consume(b'N') {
                value = Some(f64::NAN);
            }
        } else if self.consume(b'I') && self.consume(b'n') && self.consume(b'f') {
            value = Some(if minus {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
            if self.peek() == b'i'
                && !(self.consume(b'i')
                    && self.consume(b'n')
                    && self.consume(b'i')
                    && self.consume(b't')
                    && self.consume(b'y'))
            {
                return Err((self.at, INVALID_VALUE));
            }
        }
        value.map(Value::Float).ok_or((self.at, INVALID_VALUE))
    }

    fn hex4(&mut self, escape_at: usize) -> RapidResult<u32> {
        let mut code = 0u32;
        for _ in 0..4 {
            let b = self.peek();
            let digit = (b as char).to_digit(16).ok_or((escape_at, BAD_HEX))?;
            code = code * 16 + digit;
            self.at += 1;
        }
        Ok(code)
    }

    fn string(&mut self) -> RapidResult<String> {
        let mut out = String::new();
        loop {
            let run_start = self.at;
            loop {
                let b = self.peek();
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(
                std::str::from_utf8(&self.text[run_start..self.at]).expect("valid UTF-8 runs"),
            );
            let b = self.peek();
            if b == b'"' {
                self.at += 1;
                return Ok(out);
            }
            if b == 0 {
                return Err((self.at, MISS_QUOTE));
            }
            if b < 0x20 {
                return Err((self.at, BAD_ENCODING));
            }
            let escape_at = self.at;
            self.at += 1;
            let escape = self.peek();
            let simple = match escape {
                b'"' => Some('"'),
                b'\\' => Some('\\'),
                b'/' => Some('/'),
                b'b' => Some('\u{8}'),
                b'f' => Some('\u{c}'),
                b'n' => Some('\n'),
                b'r' => Some('\r'),
                b't' => Some('\t'),
                _ => None,
            };
            if let Some(c) = simple {
                self.at += 1;
                out.push(c);
                continue;
            }
            if escape != b'u' {
                return Err((escape_at, BAD_ESCAPE));
            }
            self.at += 1;
            let mut code = self.hex4(escape_at)?;
            if (0xd800..0xdc00).contains(&code) {
                if !(self.consume(b'\\') && self.consume(b'u')) {
                    return Err((escape_at, BAD_SURROGATE));
                }
                let low = self.hex4(escape_at)?;
                if !(0xdc00..0xe000).contains(&low) {
                    return Err((escape_at, BAD_SURROGATE));
                }
                code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            } else if (0xdc00..0xe000).contains(&code) {
                return Err((escape_at, BAD_SURROGATE));
            }
            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
        }
    }

    fn object(&mut self) -> RapidResult<Value> {
        let mut members = Vec::new();
        self.skip_space();
        if self.consume(b'}') {
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != b'"' {
                return Err((self.at, MISS_NAME));
            }
            self.at += 1;
            let key = self.string()?;
            self.skip_space();
            if !self.consume(b':') {
                return Err((self.at, MISS_COLON));
            }
            self.skip_space();
            let value = self.value()?;
            insert_member(&mut members, key, value);
            self.skip_space();
            match self.peek() {
                b',' => {
                    self.at += 1;
                    self.skip_space();
                }
                b'}' => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err((self.at, MISS_COMMA_OR_CURLY)),
            }
        }
    }

    fn array(&mut self) -> RapidResult<Value> {
        let mut items = Vec::new();
        self.skip_space();
        if self.consume(b']') {
            return Ok(Value::List(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_space();
            if self.consume(b',') {
                self.skip_space();
            } else if self.consume(b']') {
                return Ok(Value::List(items));
            } else {
                return Err((self.at, MISS_COMMA_OR_SQUARE));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rapid(text: &str) -> String {
        match parse_rapidjson(text.as_bytes()) {
            Ok(value) => value.py_repr(),
            Err(RapidjsonError::Parse(message) | RapidjsonError::Unicode(message)) => message,
        }
    }

    #[test]
    fn rapidjson_errors_name_the_offset_and_kind_as_python_rapidjson_does() {
        // each expectation was printed by python-rapidjson 1.25
        let cases = [
            ("", "Parse error at offset 0: The document is empty."),
            (" ", "Parse error at offset 1: The document is empty."),
            ("<html>", "Parse error at offset 0: Invalid value."),
            (
                "{",
                "Parse error at offset 1: Missing a name for object member.",
            ),
            (
                "{\"a\"",
                "Parse error at offset 4: Missing a colon after a name of object member.",
            ),
            (
                "{\"a\":1",
                "Parse error at offset 6: Missing a comma or '}' after an object member.",
            ),
            (
                "[1 2]",
                "Parse error at offset 3: Missing a comma or ']' after an array element.",
            ),
            (
                "\"abc",
                "Parse error at offset 4: Missing a closing quotation mark in string.",
            ),
            (
                "\"a\\q\"",
                "Parse error at offset 2: Invalid escape character in string.",
            ),
            (
                "1 2",
                "Parse error at offset 2: The document root must not be followed by other values.",
            ),
            ("-", "Parse error at offset 1: Invalid value."),
            (
                "1.",
                "Parse error at offset 2: Miss fraction part in number.",
            ),
            ("1e+x", "Parse error at offset 3: Miss exponent in number."),
            ("nul", "Parse error at offset 3: Invalid value."),
            ("Nan", "Parse error at offset 2: Invalid value."),
            (
                "\"\\u12\"",
                "Parse error at offset 1: Incorrect hex digit after \\u escape in string.",
            ),
            (
                "\"\\ud83dx\"",
                "Parse error at offset 1: The surrogate pair in string is invalid.",
            ),
            (
                "\"\\ude00\"",
                "Parse error at offset 1: The surrogate pair in string is invalid.",
            ),
            (
                "[01]",
                "Parse error at offset 2: Missing a comma or ']' after an array element.",
            ),
            (
                "[1e5000]",
                "Parse error at offset 1: Number too big to be stored in double.",
            ),
            (
                "1.5e310",
                "Parse error at offset 0: Number too big to be stored in double.",
            ),
            (
                "\"a\tb\"",
                "Parse error at offset 2: Invalid encoding in string.",
            ),
            (
                "\"a\u{0}b\"",
                "Parse error at offset 2: Missing a closing quotation mark in string.",
            ),
            (
                "\"\u{e9}",
                "Parse error at offset 3: Missing a closing quotation mark in string.",
            ),
            ("[1,]", "Parse error at offset 3: Invalid value."),
            (
                "{\"a\":1,}",
                "Parse error at offset 7: Missing a name for object member.",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(rapid(text), expected, "{text:?}");
        }
    }

    #[test]
    fn rapidjson_values_print_as_python_prints_them() {
        let cases = [
            ("1.5e309", "inf"),
            ("12345678901234567890.5e300", "inf"),
            ("0.00000000000000000001e309", "1e+289"),
            ("1E5", "100000.0"),
            ("-0", "0"),
            ("-0.0", "-0.0"),
            ("-Inf", "-inf"),
            ("NaN", "nan"),
            ("{\"a\":1}\u{0}zz", "{'a': 1}"),
            ("{\"a\":1, \"a\":2, \"b\":3}", "{'a': 2, 'b': 3}"),
            ("[true, null, \"it's\"]", "[True, None, \"it's\"]"),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567890",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(rapid(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_body_that_is_not_utf8_fails_as_cpython_words_it() {
        let cases: [(&[u8], &str); 5] = [
            (
                b"\xff",
                "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
            ),
            (
                b"{\"a\":\"\xff\"}",
                "'utf-8' codec can't decode byte 0xff in position 6: invalid start byte",
            ),
            (
                b"\xe2\x82\x28",
                "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte",
            ),
            (
                b"ab\xe2\x82",
                "'utf-8' codec can't decode bytes in position 2-3: unexpected end of data",
            ),
            (
                b"\xed\xa0\x80",
                "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte",
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(utf8_error_message(bytes).as_deref(), Some(expected));
        }
    }

    #[test]
    fn the_stdlib_reader_takes_what_python_json_takes() {
        let good = ["[1, 2]", " {\"a\": [1.5, \"x\"]} ", "NaN", "-Infinity"];
        assert_eq!(
            parse_stdlib(good[0].as_bytes()),
            Some(Value::List(vec![
                Value::Int("1".into()),
                Value::Int("2".into())
            ]))
        );
        assert!(parse_stdlib(good[1].as_bytes()).is_some());
        assert!(matches!(parse_stdlib(good[2].as_bytes()), Some(Value::Float(x)) if x.is_nan()));
        assert_eq!(
            parse_stdlib(good[3].as_bytes()),
            Some(Value::Float(f64::NEG_INFINITY))
        );
        assert_eq!(
            parse_stdlib(b"\xef\xbb\xbf[1]"),
            Some(Value::List(vec![Value::Int("1".into())]))
        );
        assert_eq!(
            parse_stdlib("[\"\\ud83d\\ude00\"]".as_bytes()),
            Some(Value::List(vec![Value::Str("\u{1f600}".into())]))
        );
        assert_eq!(parse_stdlib(b"\"x\x00\x00\x00"), None); // utf-32-le, not JSON once decoded
        assert_eq!(parse_stdlib("[\x001]".as_bytes()), None);
        for bad in [
            "",
            "1.",
            "01",
            "[1,]",
            "{\"a\":1,}",
            "Inf",
            "\"a\tb\"",
            "nul",
            "<html>",
            "1 2",
            "\u{feff}",
        ] {
            assert_eq!(parse_stdlib(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn python_str_methods_and_reprs() {
        assert_eq!(float_repr(1e16), "1e+16");
        assert_eq!(float_repr(1.5e-5), "1.5e-05");
        assert_eq!(float_repr(0.0001), "0.0001");
        assert_eq!(float_repr(123.0), "123.0");
        assert_eq!(float_repr(1e15), "1000000000000000.0");
        assert_eq!(float_repr(-2.5), "-2.5");
        assert_eq!(float_repr(1.2345678901234568e17), "1.2345678901234568e+17");
        assert_eq!(str_repr("a'b"), "\"a'b\"");
        assert_eq!(
            str_repr("a'\"b\n\u{7f}\u{e9}\u{a0}"),
            "'a\\'\"b\\n\\x7f\u{e9}\\xa0'"
        );
        assert_eq!(py_strip("\u{1c} x \u{3000}"), "x");
        assert_eq!(first_line("a\u{2028}b"), "a");
        assert_eq!(first_line("a\r\nb"), "a");
        assert_eq!(first_line(""), "");
        assert_eq!(cut_chars("\u{e9}\u{e9}\u{e9}", 2), "\u{e9}\u{e9}");
        assert_eq!(decode_replace(b"a\xe2\x82"), "a\u{fffd}");
    }

    /// Runs `check` on a thread with a small stack, as a runtime thread of the engine has.
    fn on_a_small_stack(check: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(check)
            .expect("thread")
            .join()
            .expect("the check ran to its end");
    }

    #[test]
    fn a_document_nested_past_the_bound_is_refused_without_recursing_into_it() {
        on_a_small_stack(|| {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let hostile = format!("{}{}", open.repeat(20_000), close.repeat(20_000));
                assert_eq!(parse_stdlib(hostile.as_bytes()), None);
                let Err(RapidjsonError::Parse(message)) = parse_rapidjson(hostile.as_bytes())
                else {
                    panic!("a 20,000-deep document was taken");
                };
                let offset = MAX_DEPTH * open.len();
                assert_eq!(
                    message,
                    format!("Parse error at offset {offset}: {TOO_DEEP}")
                );
            }
        });
        let at_the_bound = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let past_it = format!("[{at_the_bound}]");
        assert!(parse_stdlib(at_the_bound.as_bytes()).is_some());
        assert!(parse_rapidjson(at_the_bound.as_bytes()).is_ok());
        assert_eq!(parse_stdlib(past_it.as_bytes()), None);
        assert!(parse_rapidjson(past_it.as_bytes()).is_err());
        assert!(TOO_DEEP.contains(&MAX_DEPTH.to_string()));
    }
}
