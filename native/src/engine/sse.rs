//! Server-sent events read as they arrive (the WHATWG `text/event-stream` rules an OpenAI-compatible
//! or Triton `generate_stream` answer follows), each event stamped with the arrival of its first byte.
//!
//! Bytes go in read by read ([`SseReader::feed`], with the time the read returned); complete events
//! come out in order. An event may be split across any number of reads, and one read may bring
//! several events: an event's stamp is the arrival of the read that brought the first byte of its
//! first field line, so a keep-alive comment (`: ping`) before it never moves its stamp, and an
//! event whose lines were split across reads keeps the time its first byte came.
//!
//! Lines end with CRLF, LF or CR (a CR at the end of a read waits for the next byte before it
//! decides). `data:` lines append to the event's data (joined by `\n`); `event:` names it; a blank
//! line dispatches it when it has data; comments and the other fields (`id`, `retry`) are read
//! over. A line longer than the reader's bound is an error (a hostile answer would otherwise grow the
//! buffer without end), as is data that is not UTF-8. Bytes after the last blank line at the end
//! of the stream are not an event (the rules drop an unfinished event); [`SseReader::unfinished`]
//! says whether there were some.

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// CLOCK_MONOTONIC ns of the read that brought the first byte of its first field line
    pub first_byte_ns: u64,
    /// `event:`'s value ("" when none: the default `message`)
    pub name: String,
    /// its `data:` lines joined by `\n`
    pub data: String,
}

/// Why a stream cannot be read as events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseError {
    /// a line (or one event's data) longer than the bound
    TooLong { bound: usize },
    /// an event's data is not UTF-8
    NotUtf8,
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::TooLong { bound } => {
                write!(f, "an event stream line or event longer than {bound} bytes")
            }
            SseError::NotUtf8 => write!(f, "an event stream's data is not UTF-8"),
        }
    }
}

/// The framing state between reads.
#[derive(Debug)]
pub struct SseReader {
    bound: usize,
    /// the unfinished line's bytes (a line is consumed whole)
    line: Vec<u8>,
    /// the arrival of the unfinished line's first byte
    line_ns: u64,
    /// the last read ended on a CR: a LF first in the next read belongs to it
    after_cr: bool,
    /// the event being read: its stamp, name and data
    event_ns: Option<u64>,
    name: String,
    data: Vec<u8>,
    has_data: bool,
}

impl SseReader {
    /// A reader whose lines and events may each be at most `bound` bytes.
    pub fn new(bound: usize) -> SseReader {
        SseReader {
            bound,
            line: Vec::new(),
            line_ns: 0,
            after_cr: false,
            event_ns: None,
            name: String::new(),
            data: Vec::new(),
            has_data: false,
        }
    }

    /// Read `bytes` (one read, returned at `arrived_ns`), appending the events it completes to `out`.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        arrived_ns: u64,
        out: &mut Vec<SseEvent>,
    ) -> Result<(), SseError> {
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some((b'\n', tail)) = rest.split_first() {
                rest = tail;
            }
        }
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.extend_line(rest, arrived_ns)?;
                    break;
                }
                Some(at) => {
                    self.extend_line(&rest[..at], arrived_ns)?;
                    if self.line.is_empty() && at == 0 {
                        self.line_ns = arrived_ns; // an empty line's "first byte" is its line end
                    }
                    let ending = rest[at];
                    rest = &rest[at + 1..];
                    if ending == b'\r' {
                        match rest.first() {
                            Some(b'\n') => rest = &rest[1..],
                            None => self.after_cr = true,
                            Some(_) => {}
                        }
                    }
                    let line = std::mem::take(&mut self.line);
                    self.take_line(&line, out)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the stream ended inside an event or a line (what the rules drop).
    pub fn unfinished(&self) -> bool {
        !self.line.is_empty() || self.event_ns.is_some()
    }

    fn extend_line(&mut self, part: &[u8], arrived_ns: u64) -> Result<(), SseError> {
        if part.is_empty() {
            return Ok(());
        }
        if self.line.is_empty() {
            self.line_ns = arrived_ns;
        }
        if self.line.len() + part.len() > self.bound {
            return Err(SseError::TooLong { bound: self.bound });
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                let data = std::mem::take(&mut self.data);
                out.push(SseEvent {
                    first_byte_ns: self.event_ns.unwrap_or(self.line_ns),
                    name: std::mem::take(&mut self.name),
                    data: String::from_utf8(data).map_err(|_| SseError::NotUtf8)?,
                });
            }
            self.event_ns = None;
            self.name.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment: a keep-alive, never an event's first byte
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.bound {
                    return Err(SseError::TooLong { bound: self.bound });
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.name = String::from_utf8_lossy(value).into_owned(),
            _ => {} // id, retry and unknown fields: read over
        }
        self.event_ns.get_or_insert(self.line_ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(reads: &[(&[u8], u64)]) -> Result<Vec<SseEvent>, SseError> {
        let mut reader = SseReader::new(1 << 16);
        let mut out = Vec::new();
        for (bytes, at) in reads {
            reader.feed(bytes, *at, &mut out)?;
        }
        Ok(out)
    }

    fn event(at: u64, data: &str) -> SseEvent {
        SseEvent {
            first_byte_ns: at,
            name: String::new(),
            data: data.into(),
        }
    }

    #[test]
    fn several_events_in_one_read_each_take_that_read_s_time() {
        let events = read(&[(b"data: a\n\ndata: b\n\n", 10)]).unwrap();
        assert_eq!(events, vec![event(10, "a"), event(10, "b")]);
    }

    #[test]
    fn an_event_split_across_reads_keeps_the_time_of_its_first_byte() {
        let events = read(&[(b"da", 10), (b"ta: hel", 20), (b"lo\n", 30), (b"\n", 40)]).unwrap();
        assert_eq!(events, vec![event(10, "hello")]);
        let events = read(&[(b"data: a\n\nd", 10), (b"ata: b\n\n", 20)]).unwrap();
        assert_eq!(events, vec![event(10, "a"), event(10, "b")]);
    }

    #[test]
    fn a_keep_alive_comment_before_an_event_does_not_stamp_it() {
        let events = read(&[(b": ping\n\n", 10), (b": ping\n", 20), (b"data: x\n\n", 30)]).unwrap();
        assert_eq!(events, vec![event(30, "x")]);
    }

    #[test]
    fn crlf_cr_and_lf_all_end_lines_and_a_cr_at_the_end_of_a_read_waits_for_its_lf() {
        let events = read(&[
            (b"data: a\r\n\r\ndata: b\r\r", 10),
            (b"data: c\r", 20),
            (b"\n\r\n", 30),
        ])
        .unwrap();
        assert_eq!(events, vec![event(10, "a"), event(10, "b"), event(20, "c")]);
    }

    #[test]
    fn data_lines_join_with_newlines_and_the_event_name_is_kept() {
        let events = read(&[(b"event: error\ndata: {\"a\":\ndata:1}\nid: 7\n\n", 5)]).unwrap();
        assert_eq!(
            events,
            vec![SseEvent {
                first_byte_ns: 5,
                name: "error".into(),
                data: "{\"a\":\n1}".into()
            }]
        );
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_an_unfinished_one_is_said() {
        let mut reader = SseReader::new(64);
        let mut out = Vec::new();
        reader.feed(b"event: x\n\ndata: cut", 1, &mut out).unwrap();
        assert!(out.is_empty());
        assert!(reader.unfinished());
    }

    #[test]
    fn a_utf8_character_split_across_reads_is_whole_in_its_event() {
        let text = "é".as_bytes();
        let events = read(&[
            (&[b"data: ".as_slice(), &text[..1]].concat(), 1),
            (&[&text[1..], b"\n\n".as_slice()].concat(), 2),
        ])
        .unwrap();
        assert_eq!(events, vec![event(1, "é")]);
        assert_eq!(read(&[(b"data: \xff\n\n", 1)]), Err(SseError::NotUtf8));
    }

    #[test]
    fn a_line_or_an_event_longer_than_the_bound_is_an_error() {
        let mut reader = SseReader::new(16);
        let mut out = Vec::new();
        assert_eq!(
            reader.feed(&[b'x'; 17], 1, &mut out),
            Err(SseError::TooLong { bound: 16 })
        );
        let mut reader = SseReader::new(16);
        let many = b"data: 0123456789\n".repeat(3);
        assert_eq!(
            reader.feed(&many, 1, &mut out),
            Err(SseError::TooLong { bound: 16 })
        );
    }
}
