//! Request ids for the trace join (`measure/trace_join.py`, docs/observability.md): every call of
//! a traced Triton target carries the id `<prefix>-<number>` (the prefix its process's
//! `ClientTraceRecords` drew, the numbers counting from 1 per target), and a call that succeeded
//! leaves (number, sent, received) for Python, which keeps those sent after the warm-up and joins
//! them with Triton's trace by id.
//!
//! On the wire, as `users/triton.py` puts it on a pre-encoded request: gRPC,
//! `ModelInferRequest.id` (field 3) appended to the serialized message (a protobuf merge: the
//! last value of a scalar field wins); HTTP, `"id"` first in the JSON header, the binary tensors
//! after it copied once and `Inference-Header-Content-Length` grown by as much.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};

/// `ModelInferRequest.id`: field 3, wire type 2 (length-delimited).
const ID_TAG: u8 = 0x1a;

/// A traced target's ids: its prefix and the number of its last call.
#[derive(Debug)]
pub struct TraceIds {
    prefix: String,
    last: AtomicU64,
}

impl TraceIds {
    pub fn new(prefix: String) -> TraceIds {
        TraceIds {
            prefix,
            last: AtomicU64::new(0),
        }
    }

    /// The next call's (number, id).
    pub fn next(&self) -> (u64, String) {
        let number = self.last.fetch_add(1, Ordering::Relaxed) + 1;
        (number, format!("{}-{number}", self.prefix))
    }
}

/// The serialized `id` field, to append to a serialized `ModelInferRequest`.
pub fn grpc_id_field(id: &str) -> Bytes {
    let mut field = BytesMut::with_capacity(id.len() + 11);
    field.put_u8(ID_TAG);
    prost::encoding::encode_varint(id.len() as u64, &mut field);
    field.put_slice(id.as_bytes());
    field.freeze()
}

/// An HTTP inference body (JSON header first, the tensors after `json_size` bytes; all JSON when
/// None) with `"id"` first in its header: (body, the new json_size). A body that is no JSON object
/// is sent as it is (the server says why).
pub fn http_body_with_id(
    body: &Bytes,
    json_size: Option<usize>,
    id: &str,
) -> (Bytes, Option<usize>) {
    if !body.starts_with(b"{") {
        return (body.clone(), json_size);
    }
    let member = format!("{{\"id\":{},", serde_json::to_string(id).expect("a string"));
    let mut tagged = BytesMut::with_capacity(member.len() + body.len());
    tagged.put_slice(member.as_bytes());
    tagged.put_slice(&body[1..]);
    (
        tagged.freeze(),
        json_size.map(|size| size + member.len() - 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ModelInferRequest;
    use prost::Message;

    #[test]
    fn ids_count_from_one_under_the_prefix_and_go_on_either_wire() {
        let ids = TraceIds::new("ab12cd34".into());
        assert_eq!(ids.next(), (1, "ab12cd34-1".to_string()));
        let (number, id) = ids.next();
        assert_eq!((number, id.as_str()), (2, "ab12cd34-2"));

        let request = ModelInferRequest {
            model_name: "m".into(),
            id: "old".into(),
            ..ModelInferRequest::default()
        };
        let mut sent = request.encode_to_vec();
        sent.extend_from_slice(&grpc_id_field(&id));
        let read = ModelInferRequest::decode(sent.as_slice()).expect("a request");
        assert_eq!(
            (read.model_name.as_str(), read.id.as_str()),
            ("m", "ab12cd34-2")
        );

        let body = Bytes::from_static(b"{\"inputs\":[]}TENSOR");
        let (tagged, size) = http_body_with_id(&body, Some(13), &id);
        assert_eq!(&tagged[..], b"{\"id\":\"ab12cd34-2\",\"inputs\":[]}TENSOR");
        assert_eq!(size, Some(tagged.len() - 6));
        let all_json = Bytes::from_static(b"{\"inputs\":[]}");
        assert_eq!(http_body_with_id(&all_json, None, "x").1, None);
        let odd = Bytes::from_static(b"[1]");
        assert_eq!(http_body_with_id(&odd, None, "x").0, odd);
    }
}
