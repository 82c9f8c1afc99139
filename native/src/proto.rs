//! The KServe v2 / Open Inference Protocol messages the engine and the reference server use
//! (`inference.GRPCInferenceService`), written as prost messages with the protocol's field
//! numbers (checked against tritonclient's `service_pb2` descriptors). Only what is read or
//! written here is declared: unknown fields are skipped by prost when decoding.

use std::collections::HashMap;

/// The gRPC service's path prefix.
pub const SERVICE: &str = "/inference.GRPCInferenceService";
pub const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
pub const MODEL_STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";
pub const MODEL_METADATA: &str = "/inference.GRPCInferenceService/ModelMetadata";
pub const MODEL_READY: &str = "/inference.GRPCInferenceService/ModelReady";
pub const SERVER_LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
pub const SERVER_READY: &str = "/inference.GRPCInferenceService/ServerReady";

#[derive(Clone, PartialEq, ::prost::Oneof)]
pub enum ParameterChoice {
    #[prost(bool, tag = "1")]
    BoolParam(bool),
    #[prost(int64, tag = "2")]
    Int64Param(i64),
    #[prost(string, tag = "3")]
    StringParam(String),
    #[prost(double, tag = "4")]
    DoubleParam(f64),
    #[prost(uint64, tag = "5")]
    Uint64Param(u64),
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InferParameter {
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3, 4, 5")]
    pub parameter_choice: Option<ParameterChoice>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InferInputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InferRequestedOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    #[prost(bytes = "bytes", repeated, tag = "7")]
    pub raw_input_contents: Vec<bytes::Bytes>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InferOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferOutputTensor>,
    #[prost(bytes = "bytes", repeated, tag = "6")]
    pub raw_output_contents: Vec<bytes::Bytes>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelStreamInferResponse {
    #[prost(string, tag = "1")]
    pub error_message: String,
    #[prost(message, optional, tag = "2")]
    pub infer_response: Option<ModelInferResponse>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelMetadataRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TensorMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    #[prost(string, tag = "3")]
    pub platform: String,
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}

/// ServerLiveRequest, ServerReadyRequest: no fields.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Empty {}

/// ServerLiveResponse (`live`), ServerReadyResponse and ModelReadyResponse (`ready`): one bool, tag 1.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Flag {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelReadyRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_response_round_trips_with_its_shapes() {
        let response = ModelInferResponse {
            model_name: "identity".into(),
            outputs: vec![InferOutputTensor {
                name: "OUTPUT0".into(),
                datatype: "FP32".into(),
                shape: vec![1, 4],
                ..Default::default()
            }],
            raw_output_contents: vec![bytes::Bytes::from_static(&[0u8; 16])],
            ..Default::default()
        };
        let decoded = ModelInferResponse::decode(response.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.outputs[0].shape, vec![1, 4]);
        assert_eq!(decoded.raw_output_contents[0].len(), 16);
    }
}
