//! The answers, encoded once at start where they never change (metadata, config, health,
//! TorchServe's list) and as pre-encoded pieces where they do (an inference answer's shape holds
//! the batch, and its `id` echoes the request's): per request only the batch's varint, the id
//! and the zeros are written, straight into the transport's buffer.

use std::io::Write;

use bytes::{BufMut, Bytes};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;
use serde_json::json;

use super::config::{element_bytes, Config, TensorConfig};
use crate::proto;

/// The `platform` the model metadata and config name.
pub const PLATFORM: &str = "inferload-reference";
/// The one version served.
pub const VERSION: &str = "1";
/// Triton's response parameter that marks a streamed request's last response.
pub const FINAL_PARAMETER: &str = "triton_final_response";

// -- the static gRPC messages that tritonclient's stubs decode (field numbers as in Triton's protos)

#[derive(Clone, PartialEq, Message)]
struct ModelInput {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(int64, repeated, tag = "4")]
    dims: Vec<i64>,
    #[prost(bool, tag = "8")]
    optional: bool,
}

#[derive(Clone, PartialEq, Message)]
struct ModelOutput {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dims: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ModelTransactionPolicy {
    #[prost(bool, tag = "1")]
    decoupled: bool,
}

#[derive(Clone, PartialEq, Message)]
struct ModelConfig {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    platform: String,
    #[prost(int32, tag = "4")]
    max_batch_size: i32,
    #[prost(message, repeated, tag = "5")]
    input: Vec<ModelInput>,
    #[prost(message, repeated, tag = "6")]
    output: Vec<ModelOutput>,
    #[prost(message, optional, tag = "19")]
    model_transaction_policy: Option<ModelTransactionPolicy>,
}

#[derive(Clone, PartialEq, Message)]
struct ModelConfigResponse {
    #[prost(message, optional, tag = "1")]
    config: Option<ModelConfig>,
}

#[derive(Clone, PartialEq, Message)]
struct ServerMetadataResponse {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    version: String,
    #[prost(string, repeated, tag = "3")]
    extensions: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ModelIndex {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    version: String,
    #[prost(string, tag = "3")]
    state: String,
}

#[derive(Clone, PartialEq, Message)]
struct RepositoryIndexResponse {
    #[prost(message, repeated, tag = "1")]
    models: Vec<ModelIndex>,
}

/// Triton's `DataType` enum number of a KServe datatype (BYTES is TYPE_STRING).
fn triton_data_type(datatype: &str) -> (i32, &'static str) {
    match datatype {
        "BOOL" => (1, "TYPE_BOOL"),
        "UINT8" => (2, "TYPE_UINT8"),
        "UINT16" => (3, "TYPE_UINT16"),
        "UINT32" => (4, "TYPE_UINT32"),
        "UINT64" => (5, "TYPE_UINT64"),
        "INT8" => (6, "TYPE_INT8"),
        "INT16" => (7, "TYPE_INT16"),
        "INT32" => (8, "TYPE_INT32"),
        "INT64" => (9, "TYPE_INT64"),
        "FP16" => (10, "TYPE_FP16"),
        "FP32" => (11, "TYPE_FP32"),
        "FP64" => (12, "TYPE_FP64"),
        "BYTES" => (13, "TYPE_STRING"),
        "BF16" => (14, "TYPE_BF16"),
        _ => (0, "TYPE_INVALID"),
    }
}

/// One output's pieces.
pub struct CannedOutput {
    pub name: String,
    /// gRPC `InferOutputTensor` fields 1 (name) and 2 (datatype), encoded.
    grpc_name_type: Bytes,
    /// The dims as varints (the packed shape after the batch).
    grpc_dims: Bytes,
    /// Bytes of one item's zeros (BYTES: one empty string each, its 4-byte length).
    pub item_bytes: u64,
    item_elements: u64,
    /// `{"name":..,"datatype":..,"shape":[`
    json_head: String,
    /// the dims after the batch, `16]` (`,16]` when a batch comes first)
    json_dims: String,
    json_zero: &'static str,
}

/// Which outputs an answer carries (bit j: output j), and for HTTP which of those are binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    pub outputs: u64,
    pub binary: u64,
}

pub struct Canned {
    pub model: String,
    pub batches: bool,
    pub outputs: Vec<CannedOutput>,
    model_fields: Bytes,
    final_true: Bytes,
    final_false: Bytes,
    /// Zeros enough for the biggest answer (calloc'd: pages of zeros cost nothing until written).
    zeros: Bytes,
    pub grpc_metadata: Bytes,
    pub grpc_config: Bytes,
    pub grpc_server_metadata: Bytes,
    pub grpc_index: Bytes,
    pub grpc_true: Bytes,
    pub grpc_false: Bytes,
    pub json_metadata: Bytes,
    pub json_config: Bytes,
    pub json_server_metadata: Bytes,
    pub json_index: Bytes,
    /// TorchServe's answer: a JSON list of `rest_items` items.
    pub rest_answer: Bytes,
    /// One item of a TorchServe or KServe v1 answer (the first output's zeros, as a list).
    pub list_item: String,
}

fn encoded<M: Message>(message: &M) -> Bytes {
    Bytes::from(message.encode_to_vec())
}

fn string_field(tag: u32, value: &str, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(value.len() as u64, buf);
    buf.extend_from_slice(value.as_bytes());
}

fn final_entry(value: bool) -> Bytes {
    // parameters (field 4): a map entry {key: FINAL_PARAMETER, value: InferParameter{bool_param}}
    let parameter = proto::InferParameter {
        parameter_choice: Some(proto::ParameterChoice::BoolParam(value)),
    }
    .encode_to_vec();
    let mut entry = Vec::new();
    string_field(1, FINAL_PARAMETER, &mut entry);
    encode_key(2, WireType::LengthDelimited, &mut entry);
    encode_varint(parameter.len() as u64, &mut entry);
    entry.extend_from_slice(&parameter);
    let mut field = Vec::new();
    encode_key(4, WireType::LengthDelimited, &mut field);
    encode_varint(entry.len() as u64, &mut field);
    field.extend_from_slice(&entry);
    Bytes::from(field)
}

fn metadata_shape(config: &Config, tensor: &TensorConfig) -> Vec<i64> {
    if config.batches() {
        std::iter::once(-1)
            .chain(tensor.dims.iter().copied())
            .collect()
    } else {
        tensor.dims.clone()
    }
}

fn canned_output(config: &Config, tensor: &TensorConfig) -> CannedOutput {
    let mut name_type = Vec::new();
    string_field(1, &tensor.name, &mut name_type);
    string_field(2, &tensor.datatype, &mut name_type);
    let mut dims = Vec::new();
    for &dim in &tensor.dims {
        encode_varint(dim as u64, &mut dims);
    }
    let item_elements: u64 = tensor.dims.iter().map(|&d| d as u64).product();
    let json_dims = tensor
        .dims
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let json_dims = match (config.batches(), tensor.dims.is_empty()) {
        (true, false) => format!(",{json_dims}]"),
        _ => format!("{json_dims}]"),
    };
    CannedOutput {
        name: tensor.name.clone(),
        grpc_name_type: Bytes::from(name_type),
        grpc_dims: Bytes::from(dims),
        item_bytes: item_elements * element_bytes(&tensor.datatype).unwrap_or(4),
        item_elements,
        json_head: format!(
            "{{\"name\":{},\"datatype\":{},\"shape\":[",
            serde_json::Value::from(tensor.name.as_str()),
            serde_json::Value::from(tensor.datatype.as_str())
        ),
        json_dims,
        json_zero: match tensor.datatype.as_str() {
            "BOOL" => "false",
            "BYTES" => "\"\"",
            _ => "0",
        },
    }
}

impl Canned {
    pub fn new(config: &Config) -> Canned {
        let outputs: Vec<CannedOutput> = config
            .outputs
            .iter()
            .map(|t| canned_output(config, t))
            .collect();
        let mut model_fields = Vec::new();
        string_field(1, &config.model, &mut model_fields);
        string_field(2, VERSION, &mut model_fields);
        let answer_bytes: u64 = outputs.iter().map(|o| o.item_bytes).sum::<u64>()
            * u64::from(config.max_batch_size.max(1));
        // validated: at most 1 GiB; vec![0; n] is calloc: untouched pages are the kernel's zero page
        let zeros = Bytes::from(vec![0u8; answer_bytes as usize]);

        let tensors = |list: &[TensorConfig]| -> Vec<proto::TensorMetadata> {
            list.iter()
                .map(|t| proto::TensorMetadata {
                    name: t.name.clone(),
                    datatype: t.datatype.clone(),
                    shape: metadata_shape(config, t),
                })
                .collect()
        };
        let grpc_metadata = encoded(&proto::ModelMetadataResponse {
            name: config.model.clone(),
            versions: vec![VERSION.into()],
            platform: PLATFORM.into(),
            inputs: tensors(&config.inputs),
            outputs: tensors(&config.outputs),
        });
        let grpc_config = encoded(&ModelConfigResponse {
            config: Some(ModelConfig {
                name: config.model.clone(),
                platform: PLATFORM.into(),
                max_batch_size: config.max_batch_size as i32,
                input: config
                    .inputs
                    .iter()
                    .map(|t| ModelInput {
                        name: t.name.clone(),
                        data_type: triton_data_type(&t.datatype).0,
                        dims: t.dims.clone(),
                        optional: false,
                    })
                    .collect(),
                output: config
                    .outputs
                    .iter()
                    .map(|t| ModelOutput {
                        name: t.name.clone(),
                        data_type: triton_data_type(&t.datatype).0,
                        dims: t.dims.clone(),
                    })
                    .collect(),
                model_transaction_policy: Some(ModelTransactionPolicy {
                    decoupled: config.decoupled,
                }),
            }),
        });
        let grpc_server_metadata = encoded(&ServerMetadataResponse {
            name: PLATFORM.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: Vec::new(),
        });
        let grpc_index = encoded(&RepositoryIndexResponse {
            models: vec![ModelIndex {
                name: config.model.clone(),
                version: VERSION.into(),
                state: "READY".into(),
            }],
        });

        let json_tensors = |list: &[TensorConfig]| -> Vec<serde_json::Value> {
            list.iter()
                .map(|t| json!({"name": t.name, "datatype": t.datatype, "shape": metadata_shape(config, t)}))
                .collect()
        };
        let json_metadata = json!({
            "name": config.model,
            "versions": [VERSION],
            "platform": PLATFORM,
            "inputs": json_tensors(&config.inputs),
            "outputs": json_tensors(&config.outputs),
        });
        let json_config = json!({
            "name": config.model,
            "platform": PLATFORM,
            "backend": "",
            "max_batch_size": config.max_batch_size,
            "input": config.inputs.iter().map(|t| json!({
                "name": t.name, "data_type": triton_data_type(&t.datatype).1, "format": "FORMAT_NONE",
                "dims": t.dims, "optional": false,
            })).collect::<Vec<_>>(),
            "output": config.outputs.iter().map(|t| json!({
                "name": t.name, "data_type": triton_data_type(&t.datatype).1, "dims": t.dims,
            })).collect::<Vec<_>>(),
            "model_transaction_policy": {"decoupled": config.decoupled},
        });
        let json_server_metadata =
            json!({"name": PLATFORM, "version": env!("CARGO_PKG_VERSION"), "extensions": []});
        let json_index = json!([{"name": config.model, "version": VERSION, "state": "READY"}]);

        let first = &outputs[0];
        let list_item = format!(
            "[{}]",
            vec![first.json_zero; first.item_elements as usize].join(",")
        );
        let rest_answer = format!(
            "[{}]",
            vec![list_item.as_str(); config.rest_items as usize].join(",")
        );
        Canned {
            model: config.model.clone(),
            batches: config.batches(),
            outputs,
            model_fields: Bytes::from(model_fields),
            final_true: final_entry(true),
            final_false: final_entry(false),
            zeros,
            grpc_metadata,
            grpc_config,
            grpc_server_metadata,
            grpc_index,
            grpc_true: encoded(&proto::Flag { value: true }),
            grpc_false: encoded(&proto::Flag { value: false }),
            json_metadata: Bytes::from(json_metadata.to_string()),
            json_config: Bytes::from(json_config.to_string()),
            json_server_metadata: Bytes::from(json_server_metadata.to_string()),
            json_index: Bytes::from(json_index.to_string()),
            rest_answer: Bytes::from(rest_answer),
            list_item,
        }
    }

    /// Every output.
    pub fn all_outputs(&self) -> u64 {
        if self.outputs.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.outputs.len()) - 1
        }
    }

    /// The index of the output named `name`.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|o| o.name == name)
    }

    fn items(&self, batch: u32) -> u64 {
        if self.batches {
            u64::from(batch)
        } else {
            1
        }
    }

    fn selected(&self, mask: u64) -> impl Iterator<Item = (usize, &CannedOutput)> {
        self.outputs
            .iter()
            .enumerate()
            .filter(move |(j, _)| mask & (1 << j) != 0)
    }

    /// Zeros for a binary answer's tensors.
    pub fn zeros(&self, length: usize) -> Bytes {
        if length <= self.zeros.len() {
            self.zeros.slice(..length)
        } else {
            Bytes::from(vec![0u8; length]) // never for a validated batch; kept safe anyway
        }
    }
}

/// A `ModelInferResponse`, written from the canned pieces.
pub struct InferAnswer {
    pub batch: u32,
    pub outputs: u64,
    pub id: String,
    /// Triton's `triton_final_response` parameter (streamed answers only).
    pub final_flag: Option<bool>,
}

fn length_delimited_len(payload: usize) -> usize {
    1 + encoded_len_varint(payload as u64) + payload
}

impl InferAnswer {
    fn shape_payload(&self, canned: &Canned, output: &CannedOutput) -> usize {
        let batch = if canned.batches {
            encoded_len_varint(u64::from(self.batch))
        } else {
            0
        };
        batch + output.grpc_dims.len()
    }

    fn tensor_len(&self, canned: &Canned, output: &CannedOutput) -> usize {
        let shape = self.shape_payload(canned, output);
        output.grpc_name_type.len()
            + if shape > 0 {
                length_delimited_len(shape)
            } else {
                0
            }
    }

    pub fn encoded_len(&self, canned: &Canned) -> usize {
        let items = canned.items(self.batch);
        let mut length = canned.model_fields.len();
        if !self.id.is_empty() {
            length += length_delimited_len(self.id.len());
        }
        length += match self.final_flag {
            Some(true) => canned.final_true.len(),
            Some(false) => canned.final_false.len(),
            None => 0,
        };
        for (_, output) in canned.selected(self.outputs) {
            length += length_delimited_len(self.tensor_len(canned, output));
            length += length_delimited_len((items * output.item_bytes) as usize);
        }
        length
    }

    pub fn encode(&self, canned: &Canned, buf: &mut impl BufMut) {
        buf.put_slice(&canned.model_fields);
        if !self.id.is_empty() {
            encode_key(3, WireType::LengthDelimited, buf);
            encode_varint(self.id.len() as u64, buf);
            buf.put_slice(self.id.as_bytes());
        }
        match self.final_flag {
            Some(true) => buf.put_slice(&canned.final_true),
            Some(false) => buf.put_slice(&canned.final_false),
            None => {}
        }
        for (_, output) in canned.selected(self.outputs) {
            encode_key(5, WireType::LengthDelimited, buf);
            encode_varint(self.tensor_len(canned, output) as u64, buf);
            buf.put_slice(&output.grpc_name_type);
            let shape = self.shape_payload(canned, output);
            if shape > 0 {
                encode_key(3, WireType::LengthDelimited, buf);
                encode_varint(shape as u64, buf);
                if canned.batches {
                    encode_varint(u64::from(self.batch), buf);
                }
                buf.put_slice(&output.grpc_dims);
            }
        }
        let items = canned.items(self.batch);
        for (_, output) in canned.selected(self.outputs) {
            let length = (items * output.item_bytes) as usize;
            encode_key(6, WireType::LengthDelimited, buf);
            encode_varint(length as u64, buf);
            buf.put_bytes(0, length);
        }
    }
}

/// A `ModelStreamInferResponse`: an answer, or an error message.
pub enum StreamAnswer {
    Infer(InferAnswer),
    Error(String),
}

impl StreamAnswer {
    pub fn encoded_len(&self, canned: &Canned) -> usize {
        match self {
            StreamAnswer::Infer(answer) => length_delimited_len(answer.encoded_len(canned)),
            StreamAnswer::Error(message) => length_delimited_len(message.len()),
        }
    }

    pub fn encode(&self, canned: &Canned, buf: &mut impl BufMut) {
        match self {
            StreamAnswer::Infer(answer) => {
                encode_key(2, WireType::LengthDelimited, buf);
                encode_varint(answer.encoded_len(canned) as u64, buf);
                answer.encode(canned, buf);
            }
            StreamAnswer::Error(message) => {
                encode_key(1, WireType::LengthDelimited, buf);
                encode_varint(message.len() as u64, buf);
                buf.put_slice(message.as_bytes());
            }
        }
    }
}

/// An HTTP v2 answer: its JSON (the whole body, or the header before binary tensors) and how
/// many bytes of binary zeros follow.
pub fn http_answer(
    canned: &Canned,
    batch: u32,
    selection: Selection,
    id: Option<&str>,
) -> (Vec<u8>, usize) {
    let items = canned.items(batch);
    let mut json_elements = 0usize;
    for (j, output) in canned.selected(selection.outputs) {
        if selection.binary & (1 << j) == 0 {
            json_elements += (items * output.item_elements) as usize;
        }
    }
    let mut out = Vec::with_capacity(128 + 64 * canned.outputs.len() + json_elements * 2);
    out.extend_from_slice(b"{\"model_name\":");
    let _ = serde_json::to_writer(&mut out, &canned.model);
    out.extend_from_slice(b",\"model_version\":\"1\"");
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        let _ = serde_json::to_writer(&mut out, id);
    }
    out.extend_from_slice(b",\"outputs\":[");
    let mut binary_bytes = 0usize;
    for (position, (j, output)) in canned.selected(selection.outputs).enumerate() {
        if position > 0 {
            out.push(b',');
        }
        out.extend_from_slice(output.json_head.as_bytes());
        if canned.batches {
            let _ = write!(out, "{batch}");
        }
        out.extend_from_slice(output.json_dims.as_bytes());
        if selection.binary & (1 << j) != 0 {
            let size = (items * output.item_bytes) as usize;
            binary_bytes += size;
            out.extend_from_slice(b",\"parameters\":{\"binary_data_size\":");
            let _ = write!(out, "{size}");
            out.extend_from_slice(b"}}");
        } else {
            out.extend_from_slice(b",\"data\":[");
            let elements = (items * output.item_elements) as usize;
            for index in 0..elements {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(output.json_zero.as_bytes());
            }
            out.extend_from_slice(b"]}");
        }
    }
    out.extend_from_slice(b"]}");
    (out, binary_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_json(text).unwrap()
    }

    #[test]
    fn the_written_answer_is_what_prost_decodes() {
        let config = config(
            r#"{"max_batch_size": 8, "outputs": [{"name": "A", "dims": [2, 3]}, {"name": "B", "datatype": "INT64", "dims": [1]}]}"#,
        );
        let canned = Canned::new(&config);
        for final_flag in [None, Some(true), Some(false)] {
            let answer = InferAnswer {
                batch: 4,
                outputs: canned.all_outputs(),
                id: "req-7".into(),
                final_flag,
            };
            let mut buf = Vec::new();
            answer.encode(&canned, &mut buf);
            assert_eq!(buf.len(), answer.encoded_len(&canned));
            let decoded = proto::ModelInferResponse::decode(buf.as_slice()).unwrap();
            assert_eq!(decoded.model_name, "identity");
            assert_eq!(decoded.model_version, "1");
            assert_eq!(decoded.id, "req-7");
            assert_eq!(decoded.outputs.len(), 2);
            assert_eq!(decoded.outputs[0].shape, vec![4, 2, 3]);
            assert_eq!(decoded.outputs[1].datatype, "INT64");
            assert_eq!(decoded.outputs[1].shape, vec![4, 1]);
            assert_eq!(decoded.raw_output_contents[0].len(), 4 * 6 * 4);
            assert_eq!(decoded.raw_output_contents[1].len(), 4 * 8);
            let flag = decoded
                .parameters
                .get(FINAL_PARAMETER)
                .map(|p| p.parameter_choice.clone());
            assert_eq!(
                flag,
                final_flag.map(|f| Some(proto::ParameterChoice::BoolParam(f)))
            );
        }
    }

    #[test]
    fn a_model_without_batching_answers_its_dims() {
        let canned = Canned::new(&config(
            r#"{"max_batch_size": 0, "outputs": [{"name": "A", "dims": [5]}]}"#,
        ));
        let answer = InferAnswer {
            batch: 1,
            outputs: canned.all_outputs(),
            id: String::new(),
            final_flag: None,
        };
        let mut buf = Vec::new();
        answer.encode(&canned, &mut buf);
        let decoded = proto::ModelInferResponse::decode(buf.as_slice()).unwrap();
        assert_eq!(decoded.outputs[0].shape, vec![5]);
        assert_eq!(decoded.raw_output_contents[0].len(), 20);
    }

    #[test]
    fn a_stream_answer_wraps_the_answer() {
        let canned = Canned::new(&Config::default());
        let answer = StreamAnswer::Infer(InferAnswer {
            batch: 2,
            outputs: 1,
            id: "s".into(),
            final_flag: Some(true),
        });
        let mut buf = Vec::new();
        answer.encode(&canned, &mut buf);
        assert_eq!(buf.len(), answer.encoded_len(&canned));
        let decoded = proto::ModelStreamInferResponse::decode(buf.as_slice()).unwrap();
        assert_eq!(
            decoded.infer_response.unwrap().outputs[0].shape,
            vec![2, 16]
        );
    }

    #[test]
    fn the_http_answer_is_json_with_data_or_binary_sizes() {
        let config = config(
            r#"{"outputs": [{"name": "A", "dims": [2]}, {"name": "B", "datatype": "BOOL", "dims": [1]}]}"#,
        );
        let canned = Canned::new(&config);
        let (body, binary) = http_answer(
            &canned,
            3,
            Selection {
                outputs: 3,
                binary: 2,
            },
            Some("x\"y"),
        );
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["id"], "x\"y");
        assert_eq!(answer["outputs"][0]["shape"], json!([3, 2]));
        assert_eq!(answer["outputs"][0]["data"], json!([0, 0, 0, 0, 0, 0]));
        assert_eq!(answer["outputs"][1]["shape"], json!([3, 1]));
        assert_eq!(answer["outputs"][1]["parameters"]["binary_data_size"], 3);
        assert_eq!(binary, 3);
        let (body, _) = http_answer(
            &canned,
            1,
            Selection {
                outputs: 2,
                binary: 0,
            },
            None,
        );
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["outputs"][0]["data"], json!([false]));
        assert!(answer.get("id").is_none());
    }

    #[test]
    fn the_static_answers_decode() {
        let canned = Canned::new(&config(r#"{"decoupled": true}"#));
        let metadata = proto::ModelMetadataResponse::decode(canned.grpc_metadata.clone()).unwrap();
        assert_eq!(metadata.inputs[0].shape, vec![-1, 16]);
        let config = ModelConfigResponse::decode(canned.grpc_config.clone())
            .unwrap()
            .config
            .unwrap();
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.output[0].data_type, 11);
        assert!(config.model_transaction_policy.unwrap().decoupled);
        let json_config: serde_json::Value = serde_json::from_slice(&canned.json_config).unwrap();
        assert_eq!(json_config["input"][0]["data_type"], "TYPE_FP32");
        let rest: serde_json::Value = serde_json::from_slice(&canned.rest_answer).unwrap();
        assert_eq!(rest.as_array().unwrap().len(), 1);
    }
}
