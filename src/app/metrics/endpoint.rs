//! The HTTP endpoint: `GET /metrics` answers [`super::render`] of a fresh
//! [`Snapshot`]; anything else is 404 (or 405 for other methods).
//!
//! `tiny_http` accepts and parses on its own threads; one `metrics` thread
//! answers requests in order, calling the snapshot source once per scrape.
//! [`Endpoint::stop`] unblocks and joins that thread, which drops the source
//! (so a source holding an `Arc` of the pipeline releases it).

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{CONTENT_TYPE, Snapshot, render};

/// Where a scrape's numbers come from: a snapshot, or why there is none now
/// (answered 503).
pub type Source = Box<dyn Fn() -> Result<Snapshot, String> + Send>;

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot serve metrics on {addr} (metrics.listen): {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error("cannot start the metrics thread: {0}")]
    Spawn(std::io::Error),
}

/// A running endpoint; stop it with [`Endpoint::stop`] (dropping it also stops it).
pub struct Endpoint {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Endpoint {
    /// Listens on `addr` and answers scrapes from `source`.
    pub fn start(addr: SocketAddr, source: Source) -> Result<Endpoint, Error> {
        let server = tiny_http::Server::http(addr).map_err(|e| Error::Bind {
            addr,
            reason: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let thread = {
            let server = Arc::clone(&server);
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || serve(&server, &source))
                .map_err(Error::Spawn)?
        };
        tracing::info!(addr = %bound, "Serving metrics at /metrics.");
        Ok(Endpoint {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address bound (the real port when `listen` asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops answering and joins the thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("The metrics thread panicked.");
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.halt();
    }
}

fn serve(server: &tiny_http::Server, source: &Source) {
    use tiny_http::{Header, Method, Response};
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or_default();
        let reply = match (req.method(), path) {
            (Method::Get | Method::Head, "/metrics") => match source() {
                Ok(snap) => Response::from_string(render(&snap)).with_header(
                    Header::from_bytes("Content-Type", CONTENT_TYPE).expect("static header"),
                ),
                Err(why) => {
                    Response::from_string(format!("no metrics now: {why}\n")).with_status_code(503)
                }
            },
            (Method::Get | Method::Head, _) => {
                Response::from_string("not found; metrics are at /metrics\n").with_status_code(404)
            }
            _ => Response::from_string("only GET /metrics\n").with_status_code(405),
        };
        // A scraper that hung up is not our problem.
        let _ = req.respond(reply);
    }
}
