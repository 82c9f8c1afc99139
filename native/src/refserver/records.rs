//! What the server really did, one record per inference request, in a bounded buffer.
//!
//! Columns are kept apart (one vector each, their capacity reserved up front: untouched pages
//! cost no memory, and no push ever moves a column while requests wait on the lock), so a fetch
//! copies each column's range once into the answer:
//!
//! ```text
//! b"IFLREC01"  u64 LE header length  header JSON  zero padding to 8  columns, each 8-aligned
//! ```
//!
//! The header JSON says `count`, `after`, `next` (the index to ask from next time), `total`
//! (records in the buffer), `dropped` (not kept: the buffer was full), the code names of
//! `protocols` and `statuses`, and each column's `name`, numpy `dtype`, `offset` and `count`.
//! Request ids travel as `id_offsets` (`count + 1` u32 offsets) into `id_bytes` (UTF-8).

use std::sync::Mutex;

use serde_json::json;

/// The longest request id kept (longer ones are cut at a character boundary).
pub const MAX_ID_BYTES: usize = 128;
pub const MAGIC: &[u8; 8] = b"IFLREC01";

/// How a request came (the `protocol` column's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Protocol {
    Grpc = 0,
    GrpcStream = 1,
    Http = 2,
    Rest = 3,
    V1 = 4,
    /// an OpenAI-compatible completion (streamed as server-sent events or answered whole)
    Generate = 5,
}

pub const PROTOCOL_NAMES: [&str; 6] = ["grpc", "grpc-stream", "http", "rest", "v1", "generate"];

/// How it ended (the `status` column's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    Ok = 0,
    /// A scripted failure.
    Failed = 1,
    /// The client went away before the answer (a cancelled call or stream).
    Cancelled = 2,
}

pub const OUTCOME_NAMES: [&str; 3] = ["ok", "failed", "cancelled"];

/// One request's truth. Times are CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    /// k: the request's draw index (the k-th request received since the start or the last reset).
    pub seq: u64,
    /// The request fully read.
    pub received_ns: u64,
    /// Its slot taken (the service starts).
    pub start_ns: u64,
    /// The hold over, as the timer saw it.
    pub end_ns: u64,
    /// The answer handed to the transport.
    pub answered_ns: u64,
    /// A streamed generation's first and last content events handed to the transport (0: none).
    pub first_event_ns: u64,
    pub last_event_ns: u64,
    /// The scripted hold (all of a streamed request's holds together).
    pub hold_ns: u64,
    pub batch: u32,
    pub protocol: Protocol,
    pub outcome: Outcome,
    /// The request's `id` ("" when it had none).
    pub id: &'a str,
}

#[derive(Default)]
struct Columns {
    seq: Vec<u64>,
    received_ns: Vec<u64>,
    start_ns: Vec<u64>,
    end_ns: Vec<u64>,
    answered_ns: Vec<u64>,
    first_event_ns: Vec<u64>,
    last_event_ns: Vec<u64>,
    hold_ns: Vec<u64>,
    batch: Vec<u32>,
    protocol: Vec<u8>,
    status: Vec<u8>,
    /// The end of each record's id in `id_bytes`.
    id_end: Vec<u32>,
    id_bytes: Vec<u8>,
    dropped: u64,
}

impl Columns {
    fn with_capacity(capacity: usize) -> Columns {
        Columns {
            seq: Vec::with_capacity(capacity),
            received_ns: Vec::with_capacity(capacity),
            start_ns: Vec::with_capacity(capacity),
            end_ns: Vec::with_capacity(capacity),
            answered_ns: Vec::with_capacity(capacity),
            first_event_ns: Vec::with_capacity(capacity),
            last_event_ns: Vec::with_capacity(capacity),
            hold_ns: Vec::with_capacity(capacity),
            batch: Vec::with_capacity(capacity),
            protocol: Vec::with_capacity(capacity),
            status: Vec::with_capacity(capacity),
            id_end: Vec::with_capacity(capacity),
            // ids are short or absent; this grows if they are not
            id_bytes: Vec::with_capacity(capacity.min(1 << 20) * 16),
            dropped: 0,
        }
    }

    fn clear(&mut self) {
        self.seq.clear();
        self.received_ns.clear();
        self.start_ns.clear();
        self.end_ns.clear();
        self.answered_ns.clear();
        self.first_event_ns.clear();
        self.last_event_ns.clear();
        self.hold_ns.clear();
        self.batch.clear();
        self.protocol.clear();
        self.status.clear();
        self.id_end.clear();
        self.id_bytes.clear();
        self.dropped = 0;
    }
}

/// The bounded record buffer (safe to share between the runtime's threads).
pub struct Records {
    capacity: usize,
    columns: Mutex<Columns>,
}

fn cut_id(id: &str) -> &str {
    if id.len() <= MAX_ID_BYTES {
        return id;
    }
    let mut end = MAX_ID_BYTES;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    &id[..end]
}

/// The counts a fetch or the stats report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordCounts {
    pub kept: usize,
    pub dropped: u64,
}

#[cfg(not(target_endian = "little"))]
compile_error!("the packed records are little-endian: copied from memory as they lie");

/// The integers a column holds: their bytes in memory are their little-endian encoding.
trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for u32 {}
impl Plain for u64 {}

fn put_column<T: Plain>(out: &mut Vec<u8>, values: &[T]) {
    // SAFETY: T is u8, u32 or u64 (Plain): no padding, every byte initialised
    let bytes = unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    };
    out.extend_from_slice(bytes);
    out.resize(out.len().div_ceil(8) * 8, 0);
}

impl Records {
    pub fn new(capacity: usize) -> Records {
        Records {
            capacity,
            columns: Mutex::new(Columns::with_capacity(capacity)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keep a record, or count it as dropped when the buffer is full.
    pub fn push(&self, record: &Record<'_>) {
        let mut columns = self.columns.lock().unwrap_or_else(|e| e.into_inner());
        if columns.seq.len() >= self.capacity {
            columns.dropped += 1;
            return;
        }
        columns.seq.push(record.seq);
        columns.received_ns.push(record.received_ns);
        columns.start_ns.push(record.start_ns);
        columns.end_ns.push(record.end_ns);
        columns.answered_ns.push(record.answered_ns);
        columns.first_event_ns.push(record.first_event_ns);
        columns.last_event_ns.push(record.last_event_ns);
        columns.hold_ns.push(record.hold_ns);
        columns.batch.push(record.batch);
        columns.protocol.push(record.protocol as u8);
        columns.status.push(record.outcome as u8);
        columns
            .id_bytes
            .extend_from_slice(cut_id(record.id).as_bytes());
        let end = columns.id_bytes.len() as u32;
        columns.id_end.push(end);
    }

    pub fn counts(&self) -> RecordCounts {
        let columns = self.columns.lock().unwrap_or_else(|e| e.into_inner());
        RecordCounts {
            kept: columns.seq.len(),
            dropped: columns.dropped,
        }
    }

    /// Forget every record and the dropped count.
    pub fn clear(&self) {
        self.columns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Records `after..after + limit` (as many as there are) in the packed form above.
    pub fn packed(&self, after: usize, limit: usize) -> Vec<u8> {
        let columns = self.columns.lock().unwrap_or_else(|e| e.into_inner());
        let total = columns.seq.len();
        let from = after.min(total);
        let to = from.saturating_add(limit).min(total);
        let count = to - from;
        let id_from = if from == 0 {
            0
        } else {
            columns.id_end[from - 1] as usize
        };
        let id_to = if to == 0 {
            0
        } else {
            columns.id_end[to - 1] as usize
        };

        let widths: [(&str, &str, usize); 13] = [
            ("seq", "<u8", 8 * count),
            ("received_ns", "<u8", 8 * count),
            ("start_ns", "<u8", 8 * count),
            ("end_ns", "<u8", 8 * count),
            ("answered_ns", "<u8", 8 * count),
            ("first_event_ns", "<u8", 8 * count),
            ("last_event_ns", "<u8", 8 * count),
            ("hold_ns", "<u8", 8 * count),
            ("batch", "<u4", 4 * count),
            ("protocol", "|u1", count),
            ("status", "|u1", count),
            ("id_offsets", "<u4", 4 * (count + 1)),
            ("id_bytes", "|u1", id_to - id_from),
        ];
        let mut offset = 0usize;
        let mut described = Vec::with_capacity(widths.len());
        for (name, dtype, bytes) in widths {
            let items = match name {
                "id_offsets" => count + 1,
                "id_bytes" => id_to - id_from,
                _ => count,
            };
            described.push(json!({"name": name, "dtype": dtype, "offset": offset, "count": items}));
            offset += bytes.div_ceil(8) * 8;
        }
        let header = json!({
            "count": count,
            "after": from,
            "next": to,
            "total": total,
            "dropped": columns.dropped,
            "protocols": PROTOCOL_NAMES,
            "statuses": OUTCOME_NAMES,
            "columns": described,
        })
        .to_string();
        let header_padded = header.len().div_ceil(8) * 8;
        let data_start = 16 + header_padded;
        let mut out = Vec::with_capacity(data_start + offset);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header_padded as u64).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.resize(data_start, b' ');

        put_column(&mut out, &columns.seq[from..to]);
        put_column(&mut out, &columns.received_ns[from..to]);
        put_column(&mut out, &columns.start_ns[from..to]);
        put_column(&mut out, &columns.end_ns[from..to]);
        put_column(&mut out, &columns.answered_ns[from..to]);
        put_column(&mut out, &columns.first_event_ns[from..to]);
        put_column(&mut out, &columns.last_event_ns[from..to]);
        put_column(&mut out, &columns.hold_ns[from..to]);
        put_column(&mut out, &columns.batch[from..to]);
        put_column(&mut out, &columns.protocol[from..to]);
        put_column(&mut out, &columns.status[from..to]);
        let base = id_from as u32;
        out.extend_from_slice(&0u32.to_le_bytes());
        for &end in &columns.id_end[from..to] {
            out.extend_from_slice(&(end - base).to_le_bytes());
        }
        out.resize(out.len().div_ceil(8) * 8, 0);
        put_column(&mut out, &columns.id_bytes[id_from..id_to]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, id: &str) -> Record<'_> {
        Record {
            seq,
            received_ns: 10 + seq,
            start_ns: 20 + seq,
            end_ns: 30 + seq,
            answered_ns: 40 + seq,
            first_event_ns: 32 + seq,
            last_event_ns: 36 + seq,
            hold_ns: 5,
            batch: 2,
            protocol: Protocol::Http,
            outcome: Outcome::Ok,
            id,
        }
    }

    /// (header, body after the header) of a packed answer.
    fn unpack(packed: &[u8]) -> (serde_json::Value, &[u8]) {
        assert_eq!(&packed[..8], MAGIC);
        let length = u64::from_le_bytes(packed[8..16].try_into().unwrap()) as usize;
        let header: serde_json::Value =
            serde_json::from_slice(packed[16..16 + length].trim_ascii_end()).unwrap();
        (header, &packed[16 + length..])
    }

    fn column<'a>(
        header: &serde_json::Value,
        body: &'a [u8],
        name: &str,
        width: usize,
    ) -> &'a [u8] {
        let described = header["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        let offset = described["offset"].as_u64().unwrap() as usize;
        let count = described["count"].as_u64().unwrap() as usize;
        &body[offset..offset + count * width]
    }

    #[test]
    fn the_buffer_keeps_its_capacity_and_counts_the_rest_as_dropped() {
        let records = Records::new(3);
        for seq in 0..5 {
            records.push(&record(seq, "x"));
        }
        assert_eq!(
            records.counts(),
            RecordCounts {
                kept: 3,
                dropped: 2
            }
        );
        let (header, _) = unpack(&records.packed(0, usize::MAX));
        assert_eq!(header["count"], 3);
        assert_eq!(header["dropped"], 2);
        records.clear();
        assert_eq!(
            records.counts(),
            RecordCounts {
                kept: 0,
                dropped: 0
            }
        );
        let (header, _) = unpack(&records.packed(0, usize::MAX));
        assert_eq!(header["count"], 0);
    }

    #[test]
    fn a_fetch_after_k_has_the_records_from_k_with_their_ids() {
        let records = Records::new(10);
        let long_id = "é".repeat(100); // 200 bytes: cut to 128 at a character boundary
        let ids = ["a", "", "bcd", long_id.as_str()];
        for (seq, id) in ids.iter().enumerate() {
            records.push(&record(seq as u64, id));
        }
        let packed = records.packed(1, 2);
        let (header, body) = unpack(&packed);
        assert_eq!(
            (header["count"].as_u64(), header["next"].as_u64()),
            (Some(2), Some(3))
        );
        let seqs: Vec<u64> = column(&header, body, "seq", 8)
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(seqs, vec![1, 2]);
        let answered: Vec<u64> = column(&header, body, "answered_ns", 8)
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(answered, vec![41, 42]);
        let last_events: Vec<u64> = column(&header, body, "last_event_ns", 8)
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(last_events, vec![37, 38]);
        let offsets: Vec<u32> = column(&header, body, "id_offsets", 4)
            .chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(offsets, vec![0, 0, 3]);
        assert_eq!(column(&header, body, "id_bytes", 1), b"bcd");

        let packed = records.packed(3, 100);
        let (header, body) = unpack(&packed);
        let kept = std::str::from_utf8(column(&header, body, "id_bytes", 1)).unwrap();
        assert_eq!(kept.len(), 128);
        assert!(long_id.starts_with(kept));
        let (header, _) = unpack(&records.packed(50, 100));
        assert_eq!(
            (header["count"].as_u64(), header["after"].as_u64()),
            (Some(0), Some(4))
        );
    }

    #[test]
    fn every_column_starts_8_aligned() {
        let records = Records::new(10);
        for seq in 0..3 {
            records.push(&record(seq, "odd"));
        }
        let packed = records.packed(0, 10);
        let (header, body) = unpack(&packed);
        assert_eq!((packed.len() - body.len()) % 8, 0);
        for described in header["columns"].as_array().unwrap() {
            assert_eq!(described["offset"].as_u64().unwrap() % 8, 0, "{described}");
        }
        let last = header["columns"].as_array().unwrap().last().unwrap();
        assert!(
            body.len() as u64 >= last["offset"].as_u64().unwrap() + last["count"].as_u64().unwrap()
        );
    }
}
