//! A small key-value store over TCP: [`StoreServer`] on the rank-0 host, [`StoreClient`] on
//! every rank. Keys are strings, values bytes; a `get` waits (up to a deadline) until the key
//! is set. Standard library only.
//!
//! Wire format, all integers big-endian. A connection opens with the client sending the
//! 8-byte [`MAGIC`] and the server echoing it (so a port held by another service is detected).
//! Then requests, each answered before the next:
//!
//! | request | bytes | answer |
//! |---|---|---|
//! | set | `b'S'`, key length `u32`, key, value length `u32`, value | `0` |
//! | get | `b'G'`, key length `u32`, key, wait in ms `u64` | `0`, length `u32`, value; or `1` (not set in time) |
//!
//! A malformed request is answered with `2` and the connection closed.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::RendezvousError;

/// First bytes of every connection: protocol name and version.
pub const MAGIC: [u8; 8] = *b"RCRDZV\x00\x01";
/// The longest key accepted, in bytes.
pub const MAX_KEY: usize = 1024;
/// The largest value accepted, in bytes.
pub const MAX_VALUE: usize = 1 << 20;

const OK: u8 = 0;
const NOT_FOUND: u8 = 1;
const BAD_REQUEST: u8 = 2;
/// How often idle server threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// How long the rest of a message may take once its first byte has arrived.
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(30);

struct Shared {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stop: AtomicBool,
}

/// The store's server: a listening socket and a thread per connection. Stops (and closes its
/// connections within 50 ms) when dropped.
pub struct StoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl StoreServer {
    /// Listens on `addr` (port 0 picks a free port; see [`StoreServer::local_addr`]).
    pub fn bind(addr: SocketAddr) -> Result<StoreServer, RendezvousError> {
        let bind_err = |e: std::io::Error| RendezvousError::Bind {
            addr: addr.to_string(),
            error: e.to_string(),
        };
        let listener = TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        let shared = Arc::new(Shared {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("rendezvous-store".into())
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(bind_err)?
        };
        Ok(StoreServer {
            addr: local,
            shared,
            accept: Some(accept),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(t) = self.accept.take() {
            // The accept loop polls the flag every POLL; a panic there has nothing to report.
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((conn, _)) => {
                let shared = shared.clone();
                // A connection whose thread cannot start is dropped; its client sees an I/O
                // error and retries or reports it.
                let _ = std::thread::Builder::new()
                    .name("rendezvous-conn".into())
                    .spawn(move || serve(conn, &shared));
            }
            Err(_) => std::thread::sleep(POLL / 5),
        }
    }
}

/// Serves one connection until the client closes it, it misbehaves, or the server stops.
fn serve(mut conn: TcpStream, shared: &Shared) {
    let setup = conn
        .set_nonblocking(false)
        .and_then(|()| conn.set_read_timeout(Some(MESSAGE_TIMEOUT)))
        .and_then(|()| conn.set_nodelay(true));
    if setup.is_err() {
        return;
    }
    let mut magic = [0u8; 8];
    if conn.read_exact(&mut magic).is_err() || magic != MAGIC {
        return;
    }
    if conn.write_all(&MAGIC).is_err() {
        return;
    }
    loop {
        // Wait for the first byte of a request, looking at the stop flag between polls.
        if conn.set_read_timeout(Some(POLL)).is_err() {
            return;
        }
        let mut op = [0u8; 1];
        match conn.read(&mut op) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            Err(_) => return,
        }
        if conn.set_read_timeout(Some(MESSAGE_TIMEOUT)).is_err() {
            return;
        }
        let answer = match handle(op[0], &mut conn, shared) {
            Ok(a) => a,
            Err(_) => vec![BAD_REQUEST],
        };
        if conn.write_all(&answer).is_err() || answer == [BAD_REQUEST] {
            return;
        }
    }
}

fn handle(op: u8, conn: &mut TcpStream, shared: &Shared) -> std::io::Result<Vec<u8>> {
    let key = read_key(conn)?;
    match op {
        b'S' => {
            let value = read_blob(conn, MAX_VALUE)?;
            shared.map.lock().insert(key, value);
            shared.changed.notify_all();
            Ok(vec![OK])
        }
        b'G' => {
            let mut wait = [0u8; 8];
            conn.read_exact(&mut wait)?;
            let deadline = Instant::now() + Duration::from_millis(u64::from_be_bytes(wait));
            let mut map = shared.map.lock();
            loop {
                if let Some(v) = map.get(&key) {
                    let mut out = Vec::with_capacity(5 + v.len());
                    out.push(OK);
                    out.extend_from_slice(&len_u32(v.len()).to_be_bytes());
                    out.extend_from_slice(v);
                    return Ok(out);
                }
                if shared.stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
                    return Ok(vec![NOT_FOUND]);
                }
                shared.changed.wait_until(&mut map, deadline);
            }
        }
        _ => Err(ErrorKind::InvalidData.into()),
    }
}

fn read_key(conn: &mut TcpStream) -> std::io::Result<String> {
    String::from_utf8(read_blob(conn, MAX_KEY)?).map_err(|_| ErrorKind::InvalidData.into())
}

fn read_blob(conn: &mut TcpStream, max: usize) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len)?;
    let len = usize::try_from(u32::from_be_bytes(len)).map_err(|_| ErrorKind::InvalidData)?;
    if len > max {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut buf = vec![0u8; len];
    conn.read_exact(&mut buf)?;
    Ok(buf)
}

/// Lengths are checked against MAX_KEY / MAX_VALUE (both far below u32::MAX) before this.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A connection to a [`StoreServer`].
pub struct StoreClient {
    conn: TcpStream,
    addr: String,
}

impl StoreClient {
    /// Connects to the store at `addr` (`host:port`), retrying until `timeout` passes: the
    /// server's rank may start later than this one.
    pub fn connect(addr: &str, timeout: Duration) -> Result<StoreClient, RendezvousError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut last_error;
        loop {
            last_error = match Self::try_connect(addr, timeout.saturating_sub(start.elapsed())) {
                Ok(client) => return Ok(client),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e)) => e,
            };
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(RendezvousError::Connect {
                    addr: addr.to_string(),
                    waited,
                    error: last_error,
                });
            }
            std::thread::sleep(pause.min(timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    fn try_connect(addr: &str, left: Duration) -> Result<StoreClient, Attempt> {
        let resolved: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| Attempt::Retry(format!("cannot resolve {addr}: {e}")))?
            .collect();
        let mut error = format!("{addr} resolves to no address");
        for sa in resolved {
            let per_try = left.clamp(Duration::from_millis(1), Duration::from_secs(2));
            match TcpStream::connect_timeout(&sa, per_try) {
                Ok(conn) => return Self::handshake(conn, addr, per_try),
                Err(e) => error = format!("{sa}: {e}"),
            }
        }
        Err(Attempt::Retry(error))
    }

    /// Greets the server; `patience` bounds the wait for its answer (a port held by a
    /// silent service must not outlast the caller's timeout by much).
    fn handshake(
        mut conn: TcpStream,
        addr: &str,
        patience: Duration,
    ) -> Result<StoreClient, Attempt> {
        let io = |e: std::io::Error| Attempt::Retry(format!("{addr}: {e}"));
        conn.set_nodelay(true).map_err(io)?;
        conn.set_read_timeout(Some(patience)).map_err(io)?;
        conn.set_write_timeout(Some(MESSAGE_TIMEOUT)).map_err(io)?;
        conn.write_all(&MAGIC).map_err(io)?;
        let mut echo = [0u8; 8];
        match conn.read_exact(&mut echo) {
            Ok(()) if echo == MAGIC => {
                conn.set_read_timeout(Some(MESSAGE_TIMEOUT)).map_err(io)?;
                Ok(StoreClient {
                    conn,
                    addr: addr.to_string(),
                })
            }
            Ok(()) => Err(Attempt::Fatal(RendezvousError::Protocol {
                addr: addr.to_string(),
                detail: format!("it answered {echo:?} to the greeting"),
            })),
            // A server that is starting, or a service that closes on unknown input.
            Err(e) => Err(io(e)),
        }
    }

    /// Sets `key` to `value` (replacing an earlier value).
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), RendezvousError> {
        check_len("key", key.len(), MAX_KEY)?;
        check_len("value", value.len(), MAX_VALUE)?;
        let mut msg = Vec::with_capacity(9 + key.len() + value.len());
        msg.push(b'S');
        put_blob(&mut msg, key.as_bytes());
        put_blob(&mut msg, value);
        self.send(&msg, "set")?;
        match self.read_status("set", None)? {
            OK => Ok(()),
            other => Err(self.protocol(format!("answer {other} to a set"))),
        }
    }

    /// Gets `key`, waiting up to `wait` for some rank to set it.
    pub fn get(&mut self, key: &str, wait: Duration) -> Result<Vec<u8>, RendezvousError> {
        check_len("key", key.len(), MAX_KEY)?;
        let mut msg = Vec::with_capacity(13 + key.len());
        msg.push(b'G');
        put_blob(&mut msg, key.as_bytes());
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        msg.extend_from_slice(&ms.to_be_bytes());
        self.send(&msg, "get")?;
        match self.read_status("get", Some(wait))? {
            OK => {
                let mut len = [0u8; 4];
                self.read(&mut len, "get")?;
                let len = u32::from_be_bytes(len) as usize;
                if len > MAX_VALUE {
                    return Err(self.protocol(format!("a value of {len} bytes")));
                }
                let mut value = vec![0u8; len];
                self.read(&mut value, "get")?;
                Ok(value)
            }
            NOT_FOUND => Err(RendezvousError::Timeout {
                key: key.to_string(),
                waited: wait,
            }),
            other => Err(self.protocol(format!("answer {other} to a get"))),
        }
    }

    fn send(&mut self, msg: &[u8], op: &'static str) -> Result<(), RendezvousError> {
        self.conn.write_all(msg).map_err(|e| self.io(op, &e))
    }

    fn read_status(
        &mut self,
        op: &'static str,
        wait: Option<Duration>,
    ) -> Result<u8, RendezvousError> {
        // The server answers a get when the key appears or `wait` passes: allow for that.
        let timeout = wait.map_or(MESSAGE_TIMEOUT, |w| w.saturating_add(MESSAGE_TIMEOUT));
        self.conn
            .set_read_timeout(Some(timeout))
            .map_err(|e| self.io(op, &e))?;
        let mut status = [0u8; 1];
        self.read(&mut status, op)?;
        self.conn
            .set_read_timeout(Some(MESSAGE_TIMEOUT))
            .map_err(|e| self.io(op, &e))?;
        Ok(status[0])
    }

    fn read(&mut self, buf: &mut [u8], op: &'static str) -> Result<(), RendezvousError> {
        self.conn.read_exact(buf).map_err(|e| self.io(op, &e))
    }

    fn io(&self, op: &'static str, e: &std::io::Error) -> RendezvousError {
        RendezvousError::Io {
            op,
            addr: self.addr.clone(),
            error: e.to_string(),
        }
    }

    fn protocol(&self, detail: String) -> RendezvousError {
        RendezvousError::Protocol {
            addr: self.addr.clone(),
            detail,
        }
    }
}

enum Attempt {
    Retry(String),
    Fatal(RendezvousError),
}

fn put_blob(msg: &mut Vec<u8>, blob: &[u8]) {
    msg.extend_from_slice(&len_u32(blob.len()).to_be_bytes());
    msg.extend_from_slice(blob);
}

fn check_len(what: &'static str, len: usize, max: usize) -> Result<(), RendezvousError> {
    if len > max {
        return Err(RendezvousError::TooLarge { what, len, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn local_server() -> (StoreServer, String) {
        let server = StoreServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().to_string();
        (server, addr)
    }

    #[test]
    fn set_then_get_and_get_waits_for_a_later_set() {
        let (_server, addr) = local_server();
        let mut a = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        a.set("k", b"value").unwrap();
        assert_eq!(a.get("k", Duration::ZERO).unwrap(), b"value");
        let waiter = {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut b = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
                b.get("later", Duration::from_secs(10)).unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        a.set("later", &[7u8; 300]).unwrap();
        assert_eq!(waiter.join().unwrap(), vec![7u8; 300]);
        // An empty value is a value.
        a.set("empty", b"").unwrap();
        assert_eq!(a.get("empty", Duration::ZERO).unwrap(), b"");
    }

    #[test]
    fn a_missing_key_times_out_with_its_name() {
        let (_server, addr) = local_server();
        let mut c = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        let start = Instant::now();
        let e = c.get("never", Duration::from_millis(200)).unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(
            matches!(&e, RendezvousError::Timeout { key, .. } if key == "never"),
            "{e}"
        );
        // The connection stays usable after a timeout.
        c.set("x", b"1").unwrap();
        assert_eq!(c.get("x", Duration::ZERO).unwrap(), b"1");
    }

    #[test]
    fn oversized_keys_and_values_are_refused_before_sending() {
        let (_server, addr) = local_server();
        let mut c = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        let long = "k".repeat(MAX_KEY + 1);
        assert!(matches!(
            c.set(&long, b""),
            Err(RendezvousError::TooLarge { what: "key", .. })
        ));
        assert!(matches!(
            c.set("k", &vec![0; MAX_VALUE + 1]),
            Err(RendezvousError::TooLarge { what: "value", .. })
        ));
        c.set("k", b"still fine").unwrap();
    }

    #[test]
    fn nobody_listening_is_a_connect_error_after_the_timeout() {
        // Bind then drop a listener to find a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let start = Instant::now();
        let e = StoreClient::connect(&addr, Duration::from_millis(300))
            .err()
            .expect("connected to nothing");
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(matches!(e, RendezvousError::Connect { .. }), "{e}");
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn a_foreign_service_is_a_protocol_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let fake = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut greeting = [0u8; 8];
            conn.read_exact(&mut greeting).unwrap();
            conn.write_all(b"HTTP/1.1").unwrap();
        });
        let e = StoreClient::connect(&addr, Duration::from_secs(5))
            .err()
            .expect("accepted a foreign service");
        assert!(matches!(e, RendezvousError::Protocol { .. }), "{e}");
        fake.join().unwrap();
    }

    #[test]
    fn a_silent_service_does_not_outlast_the_timeout() {
        // Accepts connections (the kernel's backlog does) but never answers the greeting.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let start = Instant::now();
        let e = StoreClient::connect(&addr, Duration::from_millis(500))
            .err()
            .expect("a silent service passed the handshake");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(e, RendezvousError::Connect { .. }), "{e}");
        drop(listener);
    }

    #[test]
    fn a_server_that_goes_away_is_an_io_error() {
        let (server, addr) = local_server();
        let mut c = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        drop(server);
        // The connection thread notices the stop flag within POLL and closes.
        std::thread::sleep(POLL * 3);
        let e = c.get("k", Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, RendezvousError::Io { .. }), "{e}");
    }
}
