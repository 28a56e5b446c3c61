//! One request to the receiver, over gRPC (HTTP/2, unary `Export`) or HTTP/1.1 with a protobuf
//! body, on a connection kept between requests. Every attempt is bounded by the push's timeout
//! (connect, TLS and answer alike) and every answer by [`ANSWER_MAX`]; what the receiver says
//! becomes an [`Outcome`]: sent, try again (down, or asked to wait), or refused for good.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::{http1, http2};
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, RETRY_AFTER, USER_AGENT};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::settings::{Protocol, Push, percent_decode};

/// The largest answer read (a receiver's answer is a few bytes, or a short message).
const ANSWER_MAX: usize = 64 * 1024;
/// The longest wait a receiver may ask for (`Retry-After`).
const RETRY_AFTER_MAX: Duration = Duration::from_secs(300);
/// A server message kept for the log, at most.
const MESSAGE_MAX: usize = 200;

/// What became of a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The receiver took it; it may have rejected some profiles, saying why.
    Sent { rejected: u64, message: String },
    /// Not taken, and worth sending again: after `after` if the receiver said so.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Refused: the same request would be refused again.
    Refused(String),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection's sending half; its driving half runs as a task of its own, which ends with it.
enum Conn {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Conn::H1(s) => s.is_closed(),
            Conn::H2(s) => s.is_closed(),
        }
    }
}

pub(crate) struct Client {
    push: Arc<Push>,
    conn: Option<Conn>,
}

impl Client {
    pub(crate) fn new(push: Arc<Push>) -> Self {
        Self { push, conn: None }
    }

    /// Sends `body` (an encoded `ExportProfilesServiceRequest`) once.
    pub(crate) async fn send(&mut self, body: Bytes) -> Outcome {
        let timeout = self.push.timeout;
        let outcome = match tokio::time::timeout(timeout, self.attempt(body)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Retry {
                after: None,
                why: format!("no answer within {timeout:?}"),
            },
        };
        if !matches!(outcome, Outcome::Sent { .. }) {
            // A connection that failed once is not trusted with the next request.
            self.conn = None;
        }
        outcome
    }

    async fn attempt(&mut self, body: Bytes) -> Outcome {
        let conn = match self.conn.take().filter(|c| !c.is_closed()) {
            Some(conn) => conn,
            None => match self.connect().await {
                Ok(conn) => conn,
                Err(why) => return Outcome::Retry { after: None, why },
            },
        };
        let request = self.request(body);
        let sent = match conn {
            Conn::H1(mut s) => match s.ready().await {
                Ok(()) => s.send_request(request).await.map(|r| (r, Conn::H1(s))),
                Err(e) => Err(e),
            },
            Conn::H2(mut s) => s.send_request(request).await.map(|r| (r, Conn::H2(s))),
        };
        let (response, conn) = match sent {
            Ok(sent) => sent,
            Err(e) => {
                return Outcome::Retry {
                    after: None,
                    why: format!("the request failed: {e}"),
                };
            }
        };
        let outcome = match self.push.protocol {
            Protocol::Grpc => grpc_outcome(response).await,
            Protocol::HttpProtobuf => http_outcome(response).await,
        };
        self.conn = Some(conn);
        outcome
    }

    async fn connect(&self) -> Result<Conn, String> {
        let uri = &self.push.uri;
        let host = uri.host().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &self.push.tls {
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|_| "not a TLS server name".to_string())?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                Box::new(tls)
            }
            None => Box::new(tcp),
        };
        let io = TokioIo::new(io);
        match self.push.protocol {
            Protocol::Grpc => {
                let (send, conn) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("HTTP/2: {e}"))?;
                tokio::spawn(conn);
                Ok(Conn::H2(send))
            }
            Protocol::HttpProtobuf => {
                let (send, conn) = http1::handshake(io)
                    .await
                    .map_err(|e| format!("HTTP/1.1: {e}"))?;
                tokio::spawn(conn);
                Ok(Conn::H1(send))
            }
        }
    }

    fn request(&self, body: Bytes) -> Request<Full<Bytes>> {
        let push = &self.push;
        // HTTP/2 takes the whole URI (its :authority and :path); HTTP/1.1 the path, and Host.
        let mut builder = match push.protocol {
            Protocol::Grpc => Request::post(push.uri.clone()),
            Protocol::HttpProtobuf => {
                let path = push.uri.path_and_query().map_or("/", |p| p.as_str());
                let host = push.uri.authority().map_or("", |a| a.as_str());
                Request::post(path).header(HOST, host)
            }
        }
        .header(USER_AGENT, concat!("fdprof/", env!("CARGO_PKG_VERSION")));
        let body = match push.protocol {
            Protocol::Grpc => {
                builder = builder
                    .header(CONTENT_TYPE, "application/grpc")
                    .header("te", "trailers")
                    .header(
                        "grpc-timeout",
                        format!("{}m", push.timeout.as_millis().min(99_999_999)),
                    );
                // A message: uncompressed, its length, then its bytes.
                let mut framed = Vec::with_capacity(body.len() + 5);
                framed.push(0);
                framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
                framed.extend_from_slice(&body);
                Bytes::from(framed)
            }
            Protocol::HttpProtobuf => {
                builder = builder.header(CONTENT_TYPE, "application/x-protobuf");
                body
            }
        };
        let mut request = builder
            .body(Full::new(body))
            .expect("a POST of a checked URI and headers");
        for (name, value) in &push.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        request
    }
}

/// The answer's body (at most [`ANSWER_MAX`]) and trailers.
async fn read_answer(
    response: Response<Incoming>,
) -> Result<(HeaderMap, Bytes, HeaderMap), String> {
    let (parts, mut body) = response.into_parts();
    let mut data = Vec::new();
    let mut trailers = HeaderMap::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the answer broke off: {e}"))?;
        match frame.into_data() {
            Ok(chunk) => {
                if data.len() + chunk.len() > ANSWER_MAX {
                    return Err(format!("an answer of over {ANSWER_MAX} bytes"));
                }
                data.extend_from_slice(&chunk);
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers.extend(t);
                }
            }
        }
    }
    Ok((parts.headers, Bytes::from(data), trailers))
}

/// A receiver's message, bounded and with no byte that could reach a terminal raw.
fn message(text: &str) -> String {
    let text: String = text.chars().take(MESSAGE_MAX).collect();
    fdprof_recording::escape::name(&text).into_owned()
}

/// The `partial_success` of an `ExportProfilesServiceResponse`.
fn sent(body: &[u8]) -> Outcome {
    match fdprof_profiler::render::otlp::partial_success(body) {
        Ok((rejected, text)) => Outcome::Sent {
            rejected,
            message: message(&text),
        },
        // Taken all the same: the status said so.
        Err(_) => Outcome::Sent {
            rejected: 0,
            message: "an answer that is not an ExportProfilesServiceResponse".into(),
        },
    }
}

async fn http_outcome(response: Response<Incoming>) -> Outcome {
    let status = response.status();
    let after = retry_after(response.headers());
    let answer = read_answer(response).await;
    if status.is_success() {
        return match answer {
            Ok((_, body, _)) => sent(&body),
            Err(why) => Outcome::Retry { after: None, why },
        };
    }
    let why = format!("HTTP {status}");
    match status {
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Outcome::Retry { after, why },
        _ => Outcome::Refused(why),
    }
}

/// gRPC status codes worth trying again (the OTLP specification's list).
const GRPC_RETRYABLE: [u32; 7] = [1, 4, 8, 10, 11, 14, 15];

async fn grpc_outcome(response: Response<Incoming>) -> Outcome {
    let status = response.status();
    if status != StatusCode::OK {
        // Not a gRPC server's answer (a proxy's): gRPC's mapping of HTTP statuses.
        let why = format!("HTTP {status}");
        return match status {
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Outcome::Retry {
                after: retry_after(response.headers()),
                why,
            },
            _ => Outcome::Refused(why),
        };
    }
    let (headers, body, trailers) = match read_answer(response).await {
        Ok(answer) => answer,
        Err(why) => return Outcome::Retry { after: None, why },
    };
    // A trailers-only answer puts its status among the headers.
    let field = |name: &str| trailers.get(name).or_else(|| headers.get(name));
    let code = field("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok());
    let text = field("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|v| percent_decode(v).unwrap_or_else(|| v.to_string()))
        .unwrap_or_default();
    match code {
        Some(0) => match body.get(5..) {
            Some(message) if body[0] == 0 => sent(message),
            _ => sent(&[]),
        },
        Some(code) if GRPC_RETRYABLE.contains(&code) => Outcome::Retry {
            after: None,
            why: format!("gRPC status {code}: {}", message(&text)),
        },
        Some(code) => Outcome::Refused(format!("gRPC status {code}: {}", message(&text))),
        None => Outcome::Retry {
            after: None,
            why: "an answer without a gRPC status".into(),
        },
    }
}

/// `Retry-After` in seconds (an HTTP date is read as no advice).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(RETRY_AFTER_MAX))
}
