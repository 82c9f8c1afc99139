//! Triton sequence models natively (`users/sequence.py`): each slot keeps `concurrent` sequences
//! open and takes them in turn; a sequence is `length` calls, START on its first and END on its
//! last, and the next one on that place starts with a new correlation ID. IDs count up from a
//! random start in 1 .. 2^63 - 1 per slot (as strings for a model whose correlation ID control is
//! `TYPE_STRING`). A call that failed before its answer was judged (no answer, or the server's
//! error) abandons its sequence: the place starts a new one at its next call.
//!
//! On the wire, as the Python users send it: gRPC, the request's bytes with the step's
//! `parameters` map entries appended (a protobuf merge); HTTP, the step's members spliced into the
//! JSON header's `parameters` (`_header_with_sequence`), `Inference-Header-Content-Length` updated.
//!
//! TorchServe's stateful models (`headers`): the ID goes in the `ts_request_sequence_id` header
//! (`inferload-<id>`, so the server's log shows whose it is) and `ts_request_sequence_end: true`
//! on a sequence's last call (`torchserve_sequence_headers`). TorchServe refuses to open a sequence
//! (HTTP 503) while it holds as many as it may: that call is a `SequenceRefused`, the closed loop
//! backs off as from a refused connection, and the place opens the same sequence again.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use prost::Message;

use super::checks::{HTTP_STATUS_ERROR, SEQUENCE_REFUSED};
use super::outcome::Outcome;
use crate::proto::{InferParameter, ModelInferRequest, ParameterChoice};
use serde_json::{Map, Value};

/// Correlation IDs go in gRPC's `int64_param`: 1 to 2^63 - 1 (0 means "no sequence" to Triton).
pub const MAX_CORRELATION_ID: u64 = (1 << 63) - 1;

/// A target's sequence settings (resolved by Python from the scenario and the model's config; read
/// from `add_target`'s `sequence` dict).
#[derive(Clone, Copy, Debug, PartialEq, Eq, pyo3::FromPyObject)]
#[pyo3(from_item_all)]
pub struct SequenceSpec {
    pub length: u32,
    pub concurrent: u32,
    #[pyo3(default)]
    pub string_ids: bool,
    /// TorchServe: the ID and end flag go in its sequence headers, not in the request
    #[pyo3(default)]
    pub headers: bool,
}

/// TorchServe's sequence headers (`inferload/scenario/kinds.py`, `targets.py`) and the ID's prefix
/// (`users/sequence.py`).
pub const TS_SEQUENCE_ID_HEADER: &str = "ts_request_sequence_id";
pub const TS_SEQUENCE_END_HEADER: &str = "ts_request_sequence_end";
pub const TS_SEQUENCE_ID_PREFIX: &str = "inferload-";

/// What one call carries: its sequence's ID and flags, encoded for each protocol.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// `ModelInferRequest.parameters` map entries, serialized (appended to a serialized request)
    pub grpc: Bytes,
    /// the members of the HTTP JSON header's `parameters`, without braces (`json.dumps` spacing)
    pub http: Bytes,
    /// TorchServe: the call's sequence headers (empty for Triton)
    pub headers: HeaderMap,
}

fn torchserve_step(correlation_id: u64, end: bool) -> Step {
    let mut headers = HeaderMap::new();
    let id = format!("{TS_SEQUENCE_ID_PREFIX}{correlation_id}");
    headers.insert(
        TS_SEQUENCE_ID_HEADER,
        HeaderValue::from_str(&id).expect("ASCII digits"),
    );
    if end {
        headers.insert(TS_SEQUENCE_END_HEADER, HeaderValue::from_static("true"));
    }
    Step {
        grpc: Bytes::new(),
        http: Bytes::new(),
        headers,
    }
}

fn step(correlation_id: u64, string_ids: bool, start: bool, end: bool) -> Step {
    let mut request = ModelInferRequest::default();
    let id = if string_ids {
        ParameterChoice::StringParam(correlation_id.to_string())
    } else {
        ParameterChoice::Int64Param(correlation_id as i64)
    };
    request.parameters.insert(
        "sequence_id".into(),
        InferParameter {
            parameter_choice: Some(id),
        },
    );
    for (name, flag) in [("sequence_start", start), ("sequence_end", end)] {
        if flag {
            request.parameters.insert(
                name.into(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(true)),
                },
            );
        }
    }
    let id_json = if string_ids {
        format!("\"{correlation_id}\"")
    } else {
        correlation_id.to_string()
    };
    let http =
        format!("\"sequence_id\": {id_json}, \"sequence_start\": {start}, \"sequence_end\": {end}");
    Step {
        grpc: request.encode_to_vec().into(),
        http: http.into(),
        headers: HeaderMap::new(),
    }
}

#[derive(Default)]
struct Place {
    position: u32,
    steps: Option<[Step; 3]>,
    /// the next call opens the same sequence again (its opening was refused)
    reopen: bool,
}

/// One slot's open sequences.
pub struct Sequences {
    spec: SequenceSpec,
    next_id: u64,
    places: Vec<Place>,
    turn: usize,
    last: Option<usize>,
}

impl Sequences {
    /// A slot's sequences, its IDs counting from `first_id` (a random one when None).
    pub fn new(spec: SequenceSpec, first_id: Option<u64>) -> Sequences {
        let first = first_id.unwrap_or_else(|| rand::random::<u64>() % MAX_CORRELATION_ID + 1);
        let places = (0..spec.concurrent.max(1))
            .map(|_| Place::default())
            .collect();
        Sequences {
            spec,
            next_id: first.clamp(1, MAX_CORRELATION_ID),
            places,
            turn: 0,
            last: None,
        }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = if id < MAX_CORRELATION_ID { id + 1 } else { 1 };
        id
    }

    /// The next call's step (`UserSequences.next_step`).
    pub fn next_step(&mut self) -> &Step {
        let index = self.turn;
        self.turn = (self.turn + 1) % self.places.len();
        let length = self.spec.length.max(1);
        let place = &mut self.places[index];
        if place.reopen && place.steps.is_some() {
            place.reopen = false;
        } else if place.position == 0 || place.steps.is_none() {
            let id = self.take_id();
            let (string_ids, headers) = (self.spec.string_ids, self.spec.headers);
            let make = |start: bool, end: bool| {
                if headers {
                    torchserve_step(id, end)
                } else {
                    step(id, string_ids, start, end)
                }
            };
            let steps = if length == 1 {
                let only = make(true, true);
                [only.clone(), only.clone(), only]
            } else {
                [make(true, false), make(false, false), make(false, true)]
            };
            let place = &mut self.places[index];
            place.steps = Some(steps);
            place.position = 0;
        }
        let place = &mut self.places[index];
        let position = place.position;
        place.position = (position + 1) % length;
        self.last = Some(index);
        let steps = place.steps.as_ref().expect("set above");
        if position == 0 {
            &steps[0]
        } else if position == length - 1 {
            &steps[2]
        } else {
            &steps[1]
        }
    }

    /// The last call failed before its answer was judged: its place starts a new sequence.
    pub fn abandon(&mut self) {
        if let Some(index) = self.last {
            self.places[index].position = 0;
        }
    }

    /// Whether the last step given opened its sequence (its first call).
    pub fn opened(&self) -> bool {
        let length = self.spec.length.max(1);
        self.last
            .is_some_and(|index| self.places[index].position == 1 % length)
    }

    /// The server refused the last call, which opened its sequence: the place's next call opens
    /// the same sequence again (no new ID while the server still holds its old ones).
    pub fn open_again(&mut self) {
        if let Some(index) = self.last {
            let place = &mut self.places[index];
            if place.steps.is_some() {
                place.position = 0;
                place.reopen = true;
            }
        }
    }

    /// After a call: a refused opening of a TorchServe sequence (HTTP 503) is a `SequenceRefused`
    /// and opens it again later; any other failure before the answer was judged abandons it.
    pub fn after_call(&mut self, outcome: &mut Outcome) {
        let Some(failure) = outcome.failure.as_mut() else {
            return;
        };
        if self.spec.headers
            && outcome.status == 503
            && failure.class == HTTP_STATUS_ERROR
            && self.opened()
        {
            failure.class = SEQUENCE_REFUSED;
            self.open_again();
        } else if !outcome.answered {
            self.abandon();
        }
    }
}

/// The JSON header with the step's members in its `parameters` (spliced in where the header ends
/// as Triton's clients write it; else the header read and written again).
pub fn header_with_step(header: &[u8], step: &Step) -> Bytes {
    if header.ends_with(b"}}") && !header.ends_with(b"{}}") {
        return [&header[..header.len() - 2], b",", &step.http, b"}}"]
            .concat()
            .into();
    }
    if header.ends_with(b"]}") {
        return [
            &header[..header.len() - 1],
            b",\"parameters\":{",
            &step.http,
            b"}}",
        ]
        .concat()
        .into();
    }
    let members = [b"{".as_slice(), &step.http, b"}"].concat();
    let parsed = (
        serde_json::from_slice::<Value>(header),
        serde_json::from_slice::<Map<String, Value>>(&members),
    );
    match parsed {
        (Ok(Value::Object(mut fields)), Ok(added)) => {
            match fields.get_mut("parameters") {
                Some(Value::Object(parameters)) => parameters.extend(added),
                _ => {
                    fields.insert("parameters".into(), Value::Object(added));
                }
            }
            serde_json::to_vec(&fields).map_or_else(|_| Bytes::copy_from_slice(header), Bytes::from)
        }
        _ => Bytes::copy_from_slice(header), // not a JSON object: sent as it is (the server will say why)
    }
}

/// An HTTP body (JSON header, then tensors after `json_size` bytes; all JSON when None) with the
/// step in its header: (body, the new json_size).
pub fn http_body_with_step(
    body: &Bytes,
    json_size: Option<usize>,
    step: &Step,
) -> (Bytes, Option<usize>) {
    match json_size {
        None => (header_with_step(body, step), None),
        Some(size) => {
            let size = size.min(body.len());
            let header = header_with_step(&body[..size], step);
            let mut joined = BytesMut::with_capacity(header.len() + body.len() - size);
            joined.extend_from_slice(&header);
            joined.extend_from_slice(&body[size..]);
            let length = header.len();
            (joined.freeze(), Some(length))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::checks::Failure;

    const BAD_OUTPUT: &str = "RequestError";

    fn ids_and_flags(sequences: &mut Sequences, calls: usize) -> Vec<(String, bool, bool)> {
        (0..calls)
            .map(|_| {
                let step = sequences.next_step();
                let decoded = ModelInferRequest::decode(step.grpc.as_ref()).unwrap();
                let id = match decoded.parameters["sequence_id"]
                    .parameter_choice
                    .clone()
                    .unwrap()
                {
                    ParameterChoice::Int64Param(i) => i.to_string(),
                    ParameterChoice::StringParam(s) => format!("'{s}'"),
                    other => panic!("{other:?}"),
                };
                let flag = |name: &str| decoded.parameters.contains_key(name);
                (id, flag("sequence_start"), flag("sequence_end"))
            })
            .collect()
    }

    #[test]
    fn sequences_take_turns_and_start_and_end_on_their_flags() {
        let spec = SequenceSpec {
            length: 3,
            concurrent: 2,
            string_ids: false,
            headers: false,
        };
        let mut sequences = Sequences::new(spec, Some(10));
        let steps = ids_and_flags(&mut sequences, 8);
        let expected: Vec<(String, bool, bool)> = [
            ("10", true, false),
            ("11", true, false),
            ("10", false, false),
            ("11", false, false),
            ("10", false, true),
            ("11", false, true),
            ("12", true, false),
            ("13", true, false),
        ]
        .iter()
        .map(|(id, s, e)| (id.to_string(), *s, *e))
        .collect();
        assert_eq!(steps, expected);
    }

    #[test]
    fn an_abandoned_sequence_starts_anew_with_a_new_id_and_ids_can_be_strings() {
        let spec = SequenceSpec {
            length: 4,
            concurrent: 1,
            string_ids: true,
            headers: false,
        };
        let mut sequences = Sequences::new(spec, Some(MAX_CORRELATION_ID));
        sequences.next_step();
        sequences.abandon();
        let steps = ids_and_flags(&mut sequences, 1);
        assert_eq!(steps, vec![("'1'".to_string(), true, false)]); // the IDs wrap to 1
        let one = SequenceSpec {
            length: 1,
            concurrent: 1,
            string_ids: false,
            headers: false,
        };
        assert_eq!(
            ids_and_flags(&mut Sequences::new(one, Some(5)), 2),
            vec![("5".into(), true, true), ("6".into(), true, true)]
        );
    }

    fn torchserve_headers(sequences: &mut Sequences) -> (String, bool) {
        let step = sequences.next_step();
        let id = step.headers[TS_SEQUENCE_ID_HEADER]
            .to_str()
            .unwrap()
            .to_string();
        (id, step.headers.get(TS_SEQUENCE_END_HEADER).is_some())
    }

    fn failed(class: &'static str, status: i32, answered: bool) -> Outcome {
        Outcome {
            failure: Some(Failure::new(class, format!("HTTP {status}"))),
            status,
            answered,
            ..Outcome::default()
        }
    }

    #[test]
    fn torchserve_sequences_go_in_its_headers_and_a_refused_opening_opens_the_same_one_again() {
        let spec = SequenceSpec {
            length: 2,
            concurrent: 1,
            string_ids: true,
            headers: true,
        };
        let mut sequences = Sequences::new(spec, Some(40));
        assert_eq!(
            torchserve_headers(&mut sequences),
            ("inferload-40".into(), false)
        );
        let mut refused = failed(HTTP_STATUS_ERROR, 503, false);
        sequences.after_call(&mut refused); // TorchServe holds as many as it may: not opened
        assert_eq!(refused.failure.as_ref().unwrap().class, SEQUENCE_REFUSED);
        assert!(refused.failure.as_ref().unwrap().backs_off());
        assert!(!refused.failure.as_ref().unwrap().is_refused()); // no refused connection
        assert_eq!(
            torchserve_headers(&mut sequences),
            ("inferload-40".into(), false)
        );
        assert_eq!(
            torchserve_headers(&mut sequences),
            ("inferload-40".into(), true)
        );
        let mut late = failed(HTTP_STATUS_ERROR, 503, false); // a 503 inside a sequence abandons it
        sequences.after_call(&mut late);
        assert_eq!(late.failure.as_ref().unwrap().class, HTTP_STATUS_ERROR);
        assert_eq!(
            torchserve_headers(&mut sequences),
            ("inferload-41".into(), false)
        );
        let mut bad = failed(BAD_OUTPUT, 200, true); // an answer the check refused: the sequence goes on
        sequences.after_call(&mut bad);
        assert_eq!(
            torchserve_headers(&mut sequences),
            ("inferload-41".into(), true)
        );
        assert!(sequences.next_step().grpc.is_empty() && sequences.next_step().http.is_empty());
    }

    #[test]
    fn http_headers_get_the_steps_members_as_tritonclients_bodies_are_spliced() {
        let first = step(7, false, true, false);
        assert_eq!(
            &first.http[..],
            b"\"sequence_id\": 7, \"sequence_start\": true, \"sequence_end\": false"
        );
        assert_eq!(
            &header_with_step(br#"{"inputs":[{"name":"I"}],"parameters":{"binary_data_output":true}}"#, &first)[..],
            br#"{"inputs":[{"name":"I"}],"parameters":{"binary_data_output":true,"sequence_id": 7, "sequence_start": true, "sequence_end": false}}"#
        );
        assert_eq!(
            &header_with_step(br#"{"inputs":[{"name":"I"}]}"#, &first)[..],
            br#"{"inputs":[{"name":"I"}],"parameters":{"sequence_id": 7, "sequence_start": true, "sequence_end": false}}"#
        );
        let rewritten = header_with_step(
            br#"{"id": "x\u00e9", "parameters": {"priority": 1}}"#,
            &first,
        );
        let read: Value = serde_json::from_slice(&rewritten).expect("JSON");
        assert_eq!(
            read,
            serde_json::json!({"id": "x\u{e9}", "parameters": {
                "priority": 1, "sequence_id": 7, "sequence_start": true, "sequence_end": false}})
        );
        let body = Bytes::from_static(b"{\"inputs\":[]}TENSOR");
        let (joined, size) = http_body_with_step(&body, Some(13), &first);
        assert_eq!(size, Some(joined.len() - 6));
        assert!(joined.ends_with(b"}}TENSOR"));
    }
}
