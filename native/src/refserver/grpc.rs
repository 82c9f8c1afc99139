//! KServe v2 over gRPC (`inference.GRPCInferenceService`): tonic's server with hand-written
//! service glue. Why not generated code: tonic-build needs a build script and a codec that
//! encodes prost structs per call; here each method's codec writes the canned pieces
//! (`canned.rs`) into tonic's buffer, and requests are decoded into heads that keep only what
//! the server reads (model, version, id, parameters, the first shapes, the outputs asked for):
//! the tensors' raw contents are skipped, never copied.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::{BufMut, Bytes};
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::{Grpc, NamedService};
use tonic::{Code, Request, Response, Status, Streaming};

use super::canned::{Canned, InferAnswer, StreamAnswer};
use super::config::grpc_code;
use super::hold::monotonic_ns;
use super::records::{Outcome, Protocol};
use super::shared::{Refusal, Shared};
use crate::proto;

/// The largest request accepted (tensors included).
const MAX_REQUEST_BYTES: usize = 256 << 20;
/// The request parameter that asks for the final flag in a response of its own (Triton's).
const EMPTY_FINAL_PARAMETER: &str = "triton_enable_empty_final_response";

// -- what is decoded of each request

#[derive(Clone, PartialEq, prost::Message)]
pub struct InputHead {
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OutputHead {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// A `ModelInferRequest` without its tensors' contents.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferHead {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, proto::InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InputHead>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<OutputHead>,
}

/// `ModelMetadataRequest`, `ModelReadyRequest`, `ModelConfigRequest`: name and version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NameVersion {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

// -- the codecs

/// What a method answers, written into tonic's buffer.
pub trait WireAnswer: Send + 'static {
    fn encoded_len(&self, canned: &Canned) -> usize;
    fn encode(&self, canned: &Canned, buf: &mut EncodeBuf<'_>);
}

impl WireAnswer for Bytes {
    fn encoded_len(&self, _: &Canned) -> usize {
        self.len()
    }

    fn encode(&self, _: &Canned, buf: &mut EncodeBuf<'_>) {
        buf.put_slice(self);
    }
}

impl WireAnswer for InferAnswer {
    fn encoded_len(&self, canned: &Canned) -> usize {
        InferAnswer::encoded_len(self, canned)
    }

    fn encode(&self, canned: &Canned, buf: &mut EncodeBuf<'_>) {
        InferAnswer::encode(self, canned, buf);
    }
}

impl WireAnswer for StreamAnswer {
    fn encoded_len(&self, canned: &Canned) -> usize {
        StreamAnswer::encoded_len(self, canned)
    }

    fn encode(&self, canned: &Canned, buf: &mut EncodeBuf<'_>) {
        StreamAnswer::encode(self, canned, buf);
    }
}

/// Answers of type `A`, requests decoded as `R`.
pub struct WireCodec<A, R> {
    shared: Arc<Shared>,
    _types: PhantomData<fn() -> (A, R)>,
}

impl<A, R> WireCodec<A, R> {
    fn new(shared: &Arc<Shared>) -> Self {
        WireCodec {
            shared: Arc::clone(shared),
            _types: PhantomData,
        }
    }
}

pub struct WireEncoder<A> {
    shared: Arc<Shared>,
    _type: PhantomData<fn() -> A>,
}

pub struct HeadDecoder<R>(PhantomData<fn() -> R>);

impl<A: WireAnswer> Encoder for WireEncoder<A> {
    type Item = A;
    type Error = Status;

    fn encode(&mut self, item: A, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        let canned = &self.shared.canned;
        dst.reserve(item.encoded_len(canned));
        item.encode(canned, dst);
        Ok(())
    }
}

impl<R: prost::Message + Default + Send + 'static> Decoder for HeadDecoder<R> {
    type Item = R;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        R::decode(src).map(Some).map_err(|error| {
            Status::invalid_argument(format!("cannot decode the request: {error}"))
        })
    }
}

impl<A: WireAnswer, R: prost::Message + Default + Send + 'static> Codec for WireCodec<A, R> {
    type Encode = A;
    type Decode = R;
    type Encoder = WireEncoder<A>;
    type Decoder = HeadDecoder<R>;

    fn encoder(&mut self) -> WireEncoder<A> {
        WireEncoder {
            shared: Arc::clone(&self.shared),
            _type: PhantomData,
        }
    }

    fn decoder(&mut self) -> HeadDecoder<R> {
        HeadDecoder(PhantomData)
    }
}

// -- the methods

/// A method as a tower service (tonic's `UnaryService` / `StreamingService` follow from it).
struct Method<F>(F);

impl<M, S, F, Fut> Service<Request<M>> for Method<F>
where
    F: FnMut(Request<M>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>>,
{
    type Response = Response<S>;
    type Error = Status;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<M>) -> Fut {
        (self.0)(request)
    }
}

fn refused(refusal: Refusal) -> Status {
    let code = match refusal {
        Refusal::UnknownModel(_) => Code::NotFound,
        Refusal::Decoupled(_) => Code::Unimplemented,
        Refusal::BadRequest(_) => Code::InvalidArgument,
    };
    Status::new(code, refusal.message())
}

fn scripted_failure(shared: &Shared) -> Status {
    let failures = &shared.truth.config.failures;
    Status::new(
        grpc_code(&failures.grpc_code).unwrap_or(Code::Unavailable),
        failures.message.clone(),
    )
}

/// The outputs asked for (all when none are named), as a mask.
fn outputs_of(shared: &Shared, head: &InferHead) -> Result<u64, Refusal> {
    shared.output_mask(head.outputs.iter().map(|o| o.name.as_str()))
}

async fn model_infer(
    shared: Arc<Shared>,
    request: Request<InferHead>,
) -> Result<Response<InferAnswer>, Status> {
    let received = monotonic_ns();
    let head = request.into_inner();
    let checked = shared
        .check_infer(
            &head.model_name,
            &head.model_version,
            head.inputs.first().map(|i| i.shape.as_slice()),
            false,
        )
        .and_then(|batch| Ok((batch, outputs_of(&shared, &head)?)));
    let (batch, outputs) = match checked {
        Ok(checked) => checked,
        Err(refusal) => {
            shared.truth.reject();
            return Err(refused(refusal));
        }
    };
    let admitted = shared.truth.admit(received, Protocol::Grpc, batch);
    let mut flight = shared.truth.in_flight(admitted, head.id);
    if flight.admitted.fails {
        flight.finish(Outcome::Failed);
        return Err(scripted_failure(&shared));
    }
    shared.truth.serve(&mut flight, 1, |_| {}).await;
    let id = flight.finish(Outcome::Ok);
    Ok(Response::new(InferAnswer {
        batch,
        outputs,
        id,
        final_flag: None,
    }))
}

type AnswerSender = mpsc::UnboundedSender<Result<StreamAnswer, Status>>;

/// One request of a stream: its responses go into the stream's channel.
async fn streamed_request(
    shared: Arc<Shared>,
    head: InferHead,
    received: u64,
    answers: AnswerSender,
) {
    let checked = shared
        .check_infer(
            &head.model_name,
            &head.model_version,
            head.inputs.first().map(|i| i.shape.as_slice()),
            true,
        )
        .and_then(|batch| Ok((batch, outputs_of(&shared, &head)?)));
    let (batch, outputs) = match checked {
        Ok(checked) => checked,
        Err(refusal) => {
            shared.truth.reject();
            let _ = answers.send(Ok(StreamAnswer::Error(refusal.message())));
            return;
        }
    };
    let empty_final = matches!(
        head.parameters
            .get(EMPTY_FINAL_PARAMETER)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(proto::ParameterChoice::BoolParam(true))
    );
    let admitted = shared.truth.admit(received, Protocol::GrpcStream, batch);
    let mut flight = shared.truth.in_flight(admitted, head.id);
    if flight.admitted.fails {
        let _ = answers.send(Ok(StreamAnswer::Error(
            shared.truth.config.failures.message.clone(),
        )));
        flight.finish(Outcome::Failed);
        return;
    }
    let responses = shared.truth.config.stream_responses;
    let id = flight.id.clone();
    let mut delivered = true;
    let answer = |final_flag: bool, outputs: u64| {
        StreamAnswer::Infer(InferAnswer {
            batch,
            outputs,
            id: id.clone(),
            final_flag: Some(final_flag),
        })
    };
    shared
        .truth
        .serve(&mut flight, responses, |_| {
            delivered &= answers.send(Ok(answer(false, outputs))).is_ok();
        })
        .await;
    if empty_final {
        delivered &= answers.send(Ok(answer(false, outputs))).is_ok();
        delivered &= answers.send(Ok(answer(true, 0))).is_ok();
    } else {
        delivered &= answers.send(Ok(answer(true, outputs))).is_ok();
    }
    flight.finish(if delivered {
        Outcome::Ok
    } else {
        Outcome::Cancelled
    });
}

async fn model_stream_infer(
    shared: Arc<Shared>,
    request: Request<Streaming<InferHead>>,
) -> Result<Response<UnboundedReceiverStream<Result<StreamAnswer, Status>>>, Status> {
    let mut incoming = request.into_inner();
    let (answers, stream) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match incoming.message().await {
                Ok(Some(head)) => {
                    let received = monotonic_ns();
                    // requests of one stream are served side by side, as Triton does
                    tokio::spawn(streamed_request(
                        Arc::clone(&shared),
                        head,
                        received,
                        answers.clone(),
                    ));
                }
                Ok(None) => break, // the client closed its side: the stream ends after the last answer
                Err(status) => {
                    let _ = answers.send(Err(status));
                    break;
                }
            }
        }
    });
    Ok(Response::new(UnboundedReceiverStream::new(stream)))
}

fn model_of(shared: &Shared, request: &NameVersion) -> Result<(), Status> {
    shared
        .check_model(&request.name, &request.version)
        .map_err(refused)
}

// -- the service

/// `inference.GRPCInferenceService`.
#[derive(Clone)]
pub struct InferenceService {
    shared: Arc<Shared>,
}

impl InferenceService {
    pub fn new(shared: Arc<Shared>) -> Self {
        InferenceService { shared }
    }
}

impl NamedService for InferenceService {
    const NAME: &'static str = "inference.GRPCInferenceService";
}

type HttpResponse = http::Response<tonic::body::Body>;

fn unary_canned<R: prost::Message + Default + Send + 'static>(
    shared: Arc<Shared>,
    request: http::Request<tonic::body::Body>,
    answer: impl FnMut(Arc<Shared>, R) -> Result<Bytes, Status> + Send + 'static,
) -> BoxFuture<HttpResponse, Infallible> {
    Box::pin(async move {
        let mut answer = answer;
        let codec = WireCodec::<Bytes, R>::new(&shared);
        let method = Method(move |request: Request<R>| {
            let result = answer(Arc::clone(&shared), request.into_inner()).map(Response::new);
            std::future::ready(result)
        });
        Ok(Grpc::new(codec)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .unary(method, request)
            .await)
    })
}

impl Service<http::Request<tonic::body::Body>> for InferenceService {
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = BoxFuture<HttpResponse, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        match request.uri().path() {
            proto::MODEL_INFER => Box::pin(async move {
                let codec = WireCodec::<InferAnswer, InferHead>::new(&shared);
                let method = Method(move |request| model_infer(Arc::clone(&shared), request));
                Ok(Grpc::new(codec)
                    .max_decoding_message_size(MAX_REQUEST_BYTES)
                    .unary(method, request)
                    .await)
            }),
            proto::MODEL_STREAM_INFER => Box::pin(async move {
                let codec = WireCodec::<StreamAnswer, InferHead>::new(&shared);
                let method =
                    Method(move |request| model_stream_infer(Arc::clone(&shared), request));
                Ok(Grpc::new(codec)
                    .max_decoding_message_size(MAX_REQUEST_BYTES)
                    .streaming(method, request)
                    .await)
            }),
            proto::SERVER_LIVE | proto::SERVER_READY => {
                unary_canned(shared, request, |shared, _: proto::Empty| {
                    Ok(shared.canned.grpc_true.clone())
                })
            }
            proto::MODEL_READY => unary_canned(shared, request, |shared, asked: NameVersion| {
                Ok(match shared.check_model(&asked.name, &asked.version) {
                    Ok(()) => shared.canned.grpc_true.clone(),
                    Err(_) => shared.canned.grpc_false.clone(),
                })
            }),
            proto::MODEL_METADATA => unary_canned(shared, request, |shared, asked: NameVersion| {
                model_of(&shared, &asked)?;
                Ok(shared.canned.grpc_metadata.clone())
            }),
            "/inference.GRPCInferenceService/ModelConfig" => {
                unary_canned(shared, request, |shared, asked: NameVersion| {
                    model_of(&shared, &asked)?;
                    Ok(shared.canned.grpc_config.clone())
                })
            }
            "/inference.GRPCInferenceService/ServerMetadata" => {
                unary_canned(shared, request, |shared, _: proto::Empty| {
                    Ok(shared.canned.grpc_server_metadata.clone())
                })
            }
            "/inference.GRPCInferenceService/RepositoryIndex" => {
                unary_canned(shared, request, |shared, _: proto::Empty| {
                    Ok(shared.canned.grpc_index.clone())
                })
            }
            path => {
                let status =
                    Status::unimplemented(format!("the reference server does not serve {path}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}
