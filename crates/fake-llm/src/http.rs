//! Just enough HTTP/1.1 for the adapters' HTTP clients: request heads, `Content-Length` and
//! chunked bodies, `Expect: 100-continue`, keep-alive, and responses with a length or delimited
//! by closing the connection (streams).
//!
//! Parsing of the head is pure ([`parse_head`]); only [`read_request`] touches the socket. Every
//! malformed input becomes an [`HttpError`] that carries the status code to answer with.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest request head accepted (request line plus headers).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body accepted. Long agent transcripts are a few MiB; this leaves room.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A request as the router needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `HEAD`, …
    pub method: String,
    /// The target without its query string.
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The decoded body (empty when there is none).
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (lowercase).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the client asked to close the connection after this request.
    #[must_use]
    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// What is wrong with a request, and the status that says so.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The request line or a header is not HTTP/1.x.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The head is larger than [`MAX_HEAD_BYTES`].
    #[error("request head larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    /// The body is larger than [`MAX_BODY_BYTES`].
    #[error("request body larger than {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    /// A body-carrying request without a length or chunked encoding.
    #[error("POST without Content-Length or chunked Transfer-Encoding")]
    LengthRequired,
    /// A transfer encoding other than `chunked`.
    #[error("unsupported Transfer-Encoding {0:?}")]
    UnsupportedEncoding(String),
    /// The connection ended in the middle of a request.
    #[error("connection closed in the middle of a request")]
    Truncated,
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status to answer with, or `None` when the connection is gone and nothing can be sent.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Malformed(_) => Some(400),
            Self::HeadTooLarge => Some(431),
            Self::BodyTooLarge => Some(413),
            Self::LengthRequired => Some(411),
            Self::UnsupportedEncoding(_) => Some(501),
            Self::Truncated | Self::Io(_) => None,
        }
    }
}

/// How the body of a request is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// The parsed head of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The method.
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// Lowercased header names with trimmed values.
    pub headers: Vec<(String, String)>,
    /// How the body follows.
    pub framing: BodyFraming,
}

/// Parses a request head (everything before the blank line, without it).
///
/// # Errors
///
/// [`HttpError::Malformed`], [`HttpError::LengthRequired`], [`HttpError::BodyTooLarge`] or
/// [`HttpError::UnsupportedEncoding`].
pub fn parse_head(text: &str) -> Result<Head, HttpError> {
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed(format!(
            "bad request line {request_line:?}"
        )));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::Malformed(format!("bad method {method:?}")));
    }
    if !target.starts_with('/') {
        return Err(HttpError::Malformed(format!("bad target {target:?}")));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpError::Malformed(format!(
            "unsupported version {version:?}"
        )));
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed(format!("bad header line {line:?}")));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(HttpError::Malformed(format!("bad header name {name:?}")));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let framing = if let Some(encoding) = find("transfer-encoding") {
        if !encoding.eq_ignore_ascii_case("chunked") {
            return Err(HttpError::UnsupportedEncoding(encoding));
        }
        BodyFraming::Chunked
    } else if let Some(length) = find("content-length") {
        let n: usize = length
            .parse()
            .map_err(|_| HttpError::Malformed(format!("bad Content-Length {length:?}")))?;
        if n > MAX_BODY_BYTES {
            return Err(HttpError::BodyTooLarge);
        }
        BodyFraming::Length(n)
    } else if method == "POST" || method == "PUT" || method == "PATCH" {
        return Err(HttpError::LengthRequired);
    } else {
        BodyFraming::None
    };
    let path = target.split('?').next().unwrap_or(target).to_owned();
    Ok(Head {
        method: method.to_owned(),
        path,
        headers,
        framing,
    })
}

/// Reads one request. `Ok(None)` when the client closed the connection between requests.
/// Answers `Expect: 100-continue` on `writer` before reading the body.
///
/// # Errors
///
/// Any [`HttpError`]; the caller answers with its status where there is one and closes.
pub async fn read_request<R, W>(
    reader: &mut R,
    writer: &mut W,
) -> Result<Option<Request>, HttpError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader
            .take((MAX_HEAD_BYTES + 1 - head.len()) as u64)
            .read_until(b'\n', &mut head)
            .await?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(HttpError::Truncated)
            };
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err(HttpError::HeadTooLarge);
        }
        // Tolerate stray blank lines before a request (RFC 9112 §2.2).
        if before == 0 && (head == b"\r\n" || head == b"\n") {
            head.clear();
            continue;
        }
        if head.ends_with(b"\r\n\r\n") {
            head.truncate(head.len() - 4);
            break;
        }
    }
    let text = String::from_utf8(head)
        .map_err(|_| HttpError::Malformed("request head is not UTF-8".into()))?;
    let head = parse_head(&text)?;
    let expects_continue = head
        .headers
        .iter()
        .any(|(n, v)| n == "expect" && v.eq_ignore_ascii_case("100-continue"));
    if expects_continue && head.framing != BodyFraming::None {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        writer.flush().await?;
    }
    let body = match head.framing {
        BodyFraming::None => Vec::new(),
        BodyFraming::Length(n) => {
            let mut body = vec![0; n];
            reader
                .read_exact(&mut body)
                .await
                .map_err(eof_is_truncated)?;
            body
        }
        BodyFraming::Chunked => read_chunked(reader).await?,
    };
    Ok(Some(Request {
        method: head.method,
        path: head.path,
        headers: head.headers,
        body,
    }))
}

fn eof_is_truncated(e: std::io::Error) -> HttpError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        HttpError::Truncated
    } else {
        HttpError::Io(e)
    }
}

/// Reads a chunked body: `<hex size>[;ext]\r\n<data>\r\n` … `0\r\n` trailers `\r\n`.
async fn read_chunked<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader).await?;
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed(format!("bad chunk size {size_text:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line.
            while !read_line(reader).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(HttpError::BodyTooLarge);
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .await
            .map_err(eof_is_truncated)?;
        if !read_line(reader).await?.is_empty() {
            return Err(HttpError::Malformed("chunk not followed by CRLF".into()));
        }
    }
}

/// One CRLF-terminated line of a chunked body, without the line end (bounded).
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<String, HttpError> {
    let mut line = Vec::new();
    let n = reader.take(4096).read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(HttpError::Truncated);
    }
    if !line.ends_with(b"\r\n") {
        return Err(HttpError::Malformed("chunk line without CRLF".into()));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| HttpError::Malformed("chunk line is not UTF-8".into()))
}

/// The reason phrase of the statuses this server sends.
#[must_use]
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        _ => "Unknown",
    }
}

/// Writes a response with a `Content-Length` (the connection may stay open). For `HEAD`, pass
/// `head_only` so the body is left out while the length still describes it.
///
/// # Errors
///
/// The socket failed.
pub async fn write_sized<W: AsyncWrite + Unpin>(
    writer: &mut W,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
    close: bool,
) -> std::io::Result<()> {
    let connection = if close { "close" } else { "keep-alive" };
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {connection}\r\n\r\n",
        reason(status),
        body.len()
    );
    writer.write_all(head.as_bytes()).await?;
    if !head_only {
        writer.write_all(body).await?;
    }
    writer.flush().await
}

/// Writes an event stream whose end is the end of the connection (`Connection: close`, no
/// length), which every HTTP/1.1 client reads to EOF. The caller closes afterwards.
///
/// # Errors
///
/// The socket failed.
pub async fn write_stream<W: AsyncWrite + Unpin>(
    writer: &mut W,
    body: &str,
) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    writer.write_all(head.as_bytes()).await?;
    writer.write_all(body.as_bytes()).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> Result<Option<Request>, HttpError> {
        let mut reader = tokio::io::BufReader::new(bytes);
        let mut sink = Vec::new();
        read_request(&mut reader, &mut sink).await
    }

    #[test]
    fn parses_a_post_head() {
        let head = parse_head(
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nX-A:  b ",
        )
        .unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.path, "/v1/messages");
        assert_eq!(head.framing, BodyFraming::Length(12));
        assert_eq!(head.headers[2], ("x-a".into(), "b".into()));
    }

    #[test]
    fn rejects_malformed_heads_with_their_status() {
        let status = |text: &str| parse_head(text).err().and_then(|e| e.status());
        assert_eq!(status("GARBAGE"), Some(400));
        assert_eq!(status("get / HTTP/1.1"), Some(400));
        assert_eq!(status("GET nothing HTTP/1.1"), Some(400));
        assert_eq!(status("GET / HTTP/2"), Some(400));
        assert_eq!(status("GET / HTTP/1.1\r\nno colon"), Some(400));
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: -1"), Some(400));
        assert_eq!(status("POST / HTTP/1.1"), Some(411));
        assert_eq!(
            status("POST / HTTP/1.1\r\nContent-Length: 99999999999"),
            Some(413)
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip"),
            Some(501)
        );
        assert_eq!(
            parse_head("GET / HTTP/1.1").unwrap().framing,
            BodyFraming::None
        );
    }

    #[tokio::test]
    async fn reads_length_and_chunked_bodies() {
        let r = read(b"\r\nPOST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.body, b"abc");
        let r = read(b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\n")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.body, b"abcde");
        assert!(read(b"").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn truncated_and_oversized_requests_are_errors() {
        assert!(matches!(
            read(b"POST /a HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc").await,
            Err(HttpError::Truncated)
        ));
        assert!(matches!(read(b"GET / HT").await, Err(HttpError::Truncated)));
        assert!(matches!(
            read(b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").await,
            Err(HttpError::Malformed(_))
        ));
        let huge = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert!(matches!(
            read(huge.as_bytes()).await,
            Err(HttpError::HeadTooLarge)
        ));
    }

    #[tokio::test]
    async fn answers_expect_continue_before_the_body() {
        let mut reader = tokio::io::BufReader::new(
            &b"POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"[..],
        );
        let mut sink = Vec::new();
        let r = read_request(&mut reader, &mut sink).await.unwrap().unwrap();
        assert_eq!(r.body, b"x");
        assert_eq!(sink, b"HTTP/1.1 100 Continue\r\n\r\n");
    }
}
