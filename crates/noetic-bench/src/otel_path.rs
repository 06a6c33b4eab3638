//! The cost of exporting traces: the same tool-calling turn as `tool_call_us`, with a `tracing` subscriber and
//! an OTLP/HTTP exporter batching to a local receiver that reads each request and discards it. (With no
//! subscriber the spans are compiled in and cost one level check each: that is the plain `tool_call_us`.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;

use crate::BenchResult;

/// Answers every OTLP request with an empty success, keeping nothing. Runs until the process ends.
fn discarding_receiver() -> BenchResult<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/v1/traces", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    Ok(url)
}

/// Serves one keep-alive connection: each request's body is read whole, then dropped.
fn serve(stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        if std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink()).is_err() {
            return;
        }
        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// An exporter batching to a discarding receiver (the CLI's setup, default batch settings).
pub fn provider() -> BenchResult<SdkTracerProvider> {
    let exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(discarding_receiver()?).build()?;
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).build())
}

/// A subscriber that sends the runtime's spans to `provider`.
pub fn subscriber(provider: &SdkTracerProvider) -> impl tracing::Subscriber + Send + Sync + 'static {
    tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("noetic-bench")))
}
