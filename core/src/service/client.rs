//! A service client: which servers it calls, its connections, and a call's socket I/O on the calling thread (a
//! `mio::Poll` of the call's own, over one connection per server called).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use prost::Message;

use crate::io::Command;
use crate::registration::{EntityKey, LocalService, MethodInfo, RemoteService, ServiceRole};
use crate::sync::lock;
use crate::types::TypeInfo;
use crate::wire::pb;
use crate::wire::service::{
    FrameDecoder, MessageType, handshake_request, request_frame, request_len, split_bytes_field,
};

use super::{Context, Entity, bump};

thread_local! {
    /// What a call reads its connections' bytes into: one per calling thread, not zeroed again for every read.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 64 * 1024]);
}

/// Idle connections kept per server for the next call.
const IDLE_PER_SERVER: usize = 4;
/// The lowest server port a client connects to (a forged registration cannot aim it at a system service).
const MIN_PORT: u16 = 1024;

/// A server, as a response names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId {
    /// Its host name.
    pub host_name: String,
    /// Its process id.
    pub pid: u32,
    /// Its entity id (eCAL's `service_id`).
    pub entity_id: u64,
    /// Its process's executable.
    pub process_name: String,
    /// Its process's unit name.
    pub unit_name: String,
}

impl ServerId {
    fn of(s: &RemoteService) -> ServerId {
        ServerId {
            host_name: s.key.host_name.clone(),
            pid: s.key.pid,
            entity_id: s.key.entity_id,
            process_name: s.process_name.clone(),
            unit_name: s.unit_name.clone(),
        }
    }
}

/// How one server's part of a call ended.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallStatus {
    /// The server ran the method; the payload is its response.
    Executed,
    /// The server answered that the call failed (unknown method, the handler's error), with its message.
    Failed(String),
    /// No answer within the call's timeout.
    TimedOut,
    /// The connection failed before an answer (refused, closed, a malformed response), with what happened.
    Broken(String),
}

/// One server's response to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceResponse {
    /// Who answered (or did not).
    pub server: ServerId,
    /// The method called.
    pub method: String,
    /// How the call ended.
    pub status: CallStatus,
    /// The method's return state as the server sent it (eCAL callbacks return an int; shoal's handlers 0).
    pub ret_state: i64,
    /// The response payload (empty unless executed).
    pub payload: Vec<u8>,
}

impl ServiceResponse {
    /// Whether the server executed the method.
    pub fn is_ok(&self) -> bool {
        self.status == CallStatus::Executed
    }

    /// The response as a message of type `M` (what generated service clients return).
    pub fn into_typed<M: crate::types::Message>(self) -> TypedResponse<M> {
        let response = match self.status {
            CallStatus::Executed => M::decode(&self.payload).map_err(ResponseError::Decode),
            CallStatus::Failed(m) => Err(ResponseError::Failed(m)),
            CallStatus::TimedOut => Err(ResponseError::TimedOut),
            CallStatus::Broken(m) => Err(ResponseError::Broken(m)),
        };
        TypedResponse { server: self.server, ret_state: self.ret_state, response }
    }
}

/// One server's answer to a typed call: the decoded response, or why there is none.
#[derive(Debug)]
pub struct TypedResponse<M> {
    /// Who answered (or did not).
    pub server: ServerId,
    /// The method's return state as the server sent it.
    pub ret_state: i64,
    /// The response message.
    pub response: Result<M, ResponseError>,
}

/// Why a typed call has no response message from a server.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ResponseError {
    /// The server answered that the call failed, with its message.
    #[error("the server failed the call: {0}")]
    Failed(String),
    /// No answer within the call's timeout.
    #[error("no answer within the timeout")]
    TimedOut,
    /// The connection failed before an answer.
    #[error("the connection failed: {0}")]
    Broken(String),
    /// The response is not a message of the expected type.
    #[error(transparent)]
    Decode(crate::types::DecodeError),
}

/// Why a call was not made.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Registration announces no server of this service (or none this client may call).
    #[error("no server of service {service:?} is known")]
    NoServer {
        /// The service name.
        service: String,
    },
    /// The server named is not (or no longer) announced.
    #[error("server {server:?} of service {service:?} is not known")]
    UnknownServer {
        /// The service name.
        service: String,
        /// The server asked for.
        server: ServerId,
    },
    /// The request is larger than `[shoal_service] max_request`.
    #[error("request of {len} bytes is larger than [shoal_service] max_request ({max} bytes)")]
    RequestTooLarge {
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The call's poller could not be made.
    #[error("cannot poll the call's connections: {0}")]
    Poll(#[source] io::Error),
}

/// Why waiting for servers ended without enough of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{found} of {wanted} servers of service {service:?} announced within {timeout:?}")]
pub struct WaitError {
    /// The service name.
    pub service: String,
    /// Servers wanted.
    pub wanted: usize,
    /// Servers announced when the time was up.
    pub found: usize,
    /// The time waited.
    pub timeout: Duration,
}

/// One kept connection to a server, past its handshake.
struct Conn {
    stream: TcpStream,
    /// The server's port when it was made (a server that announces another port is connected anew).
    port: u16,
}

/// A declared method: request type, response type, calls made.
type Declared = (TypeInfo, TypeInfo, Arc<AtomicI64>);

/// The part of a client registration reads (its call counts).
pub(crate) struct ClientCore {
    pub(crate) id: u64,
    name: String,
    methods: Mutex<BTreeMap<String, Declared>>,
}

impl ClientCore {
    pub(crate) fn call_counts(&self) -> Vec<(String, i64)> {
        lock(&self.methods).iter().map(|(n, (_, _, c))| (n.clone(), c.load(Ordering::Relaxed))).collect()
    }

    fn registration(&self) -> LocalService {
        let methods = lock(&self.methods)
            .iter()
            .map(|(name, (req, resp, calls))| MethodInfo {
                name: name.clone(),
                request: req.clone(),
                response: resp.clone(),
                call_count: calls.load(Ordering::Relaxed),
            })
            .collect();
        LocalService { id: self.id, role: ServiceRole::Client, service_name: self.name.clone(), methods, tcp_port: 0 }
    }

    /// The counter of `method`; a method not declared is added (announced with empty types), as eCAL's client
    /// announces the methods it called.
    fn counter(&self, method: &str) -> (Arc<AtomicI64>, bool) {
        let mut m = lock(&self.methods);
        match m.get(method) {
            Some((_, _, c)) => (Arc::clone(c), false),
            None => {
                let c = Arc::new(AtomicI64::new(0));
                m.insert(method.to_owned(), (TypeInfo::default(), TypeInfo::default(), Arc::clone(&c)));
                (c, true)
            }
        }
    }
}

/// Builds a [`ServiceClient`]: `node.service_client("name").build()`.
#[must_use]
pub struct ClientBuilder {
    ctx: Context,
    name: String,
    methods: BTreeMap<String, Declared>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ClientBuilder {
    pub(crate) fn new(ctx: Context, name: &str) -> ClientBuilder {
        ClientBuilder { ctx, name: name.to_owned(), methods: BTreeMap::new() }
    }

    /// Declares a method this client calls, with its request and response types (announced in registration, as
    /// eCAL's clients announce theirs). Calling a method not declared works too.
    pub fn method(mut self, name: &str, request: TypeInfo, response: TypeInfo) -> Self {
        self.methods.insert(name.to_owned(), (request, response, Arc::new(AtomicI64::new(0))));
        self
    }

    /// Announces the client.
    pub fn build(self) -> ServiceClient {
        let core = Arc::new(ClientCore { id: self.ctx.id, name: self.name, methods: Mutex::new(self.methods) });
        lock(&self.ctx.services.entities).push(Entity::Client(Arc::downgrade(&core)));
        (self.ctx.send)(Command::AddService(core.registration()));
        ServiceClient { core, ctx: self.ctx, idle: Mutex::new(HashMap::new()) }
    }
}

/// A service client (see the [module docs](crate::service)). Dropping it unregisters it (cmd 16) and closes its
/// connections.
pub struct ServiceClient {
    core: Arc<ClientCore>,
    ctx: Context,
    idle: Mutex<HashMap<EntityKey, Vec<Conn>>>,
}

impl std::fmt::Debug for ServiceClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceClient").field("name", &self.core.name).finish_non_exhaustive()
    }
}

/// Where a server is reached: on this host at loopback; else at the address its registration came from (its
/// address in this network namespace, asking no resolver); without one, a host name that is an address literal.
fn server_address(s: &RemoteService, this_host: &str) -> Option<SocketAddr> {
    if s.tcp_port < MIN_PORT {
        return None;
    }
    let ip = if s.key.host_name == this_host || s.source.is_some_and(|a| a.is_loopback()) {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else if let Some(a) = s.source {
        a
    } else {
        s.key.host_name.parse().ok()?
    };
    Some(SocketAddr::new(ip, s.tcp_port))
}

/// A server of service `name` a client may call.
fn callable(s: &RemoteService, name: &str) -> bool {
    s.role == ServiceRole::Server && s.service_name == name && s.tcp_port >= MIN_PORT
}

impl ServiceClient {
    /// The service name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    fn servers_now(&self) -> Vec<RemoteService> {
        let all = self.ctx.services.directory.entries();
        all.iter().filter(|s| callable(s, &self.core.name)).cloned().collect()
    }

    /// The servers of this service registration announces now.
    pub fn servers(&self) -> Vec<ServerId> {
        self.servers_now().iter().map(ServerId::of).collect()
    }

    /// Waits until at least `n` servers of this service are announced; returns how many there are.
    pub fn wait_for_servers(&self, n: usize, timeout: Duration) -> Result<usize, WaitError> {
        let name = &self.core.name;
        let count = |t: &[RemoteService]| t.iter().filter(|s| callable(s, name)).count();
        let (table, ok) = self.ctx.services.directory.wait_until(Instant::now() + timeout, |t| count(t) >= n);
        let found = count(&table);
        if ok { Ok(found) } else { Err(WaitError { service: name.clone(), wanted: n, found, timeout }) }
    }

    /// Calls `method` with `request` on every server of this service; returns one response per server, each
    /// executed, failed, timed out or broken. Returns when every server answered or `timeout` passed.
    pub fn call(&self, method: &str, request: &[u8], timeout: Duration) -> Result<Vec<ServiceResponse>, CallError> {
        let servers = self.servers_now();
        // Connections kept for servers that are no longer announced (gone, restarted under a new id) are closed, so
        // what a client holds follows the servers there are, not every server it ever called.
        lock(&self.idle).retain(|key, _| servers.iter().any(|s| &s.key == key));
        if servers.is_empty() {
            return Err(CallError::NoServer { service: self.core.name.clone() });
        }
        self.call_servers(&servers, method, request, timeout)
    }

    /// Calls `method` on one server (one of [`servers`](Self::servers)).
    pub fn call_server(
        &self,
        server: &ServerId,
        method: &str,
        request: &[u8],
        timeout: Duration,
    ) -> Result<ServiceResponse, CallError> {
        let found: Vec<RemoteService> = self
            .servers_now()
            .into_iter()
            .filter(|s| {
                s.key.host_name == server.host_name && s.key.pid == server.pid && s.key.entity_id == server.entity_id
            })
            .collect();
        if found.is_empty() {
            return Err(CallError::UnknownServer { service: self.core.name.clone(), server: server.clone() });
        }
        let mut r = self.call_servers(&found, method, request, timeout)?;
        Ok(r.remove(0))
    }

    /// Calls `method` on every server on a thread of the asynchronous calls and hands the result to `callback`
    /// there (when `[shoal_service] max_pending` calls wait already, the call is made on this thread).
    pub fn call_async(
        self: &Arc<Self>,
        method: &str,
        request: Vec<u8>,
        timeout: Duration,
        callback: impl FnOnce(Result<Vec<ServiceResponse>, CallError>) + Send + 'static,
    ) {
        let me = Arc::clone(self);
        let method = method.to_owned();
        let job = Box::new(move || callback(me.call(&method, &request, timeout)));
        if let Err(job) = self.ctx.services.call_pool.submit(job) {
            // No room on the handler threads: made on this thread instead, so the callback always runs.
            job();
        }
    }

    fn call_servers(
        &self,
        servers: &[RemoteService],
        method: &str,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<ServiceResponse>, CallError> {
        let max = self.ctx.services.config.max_request_bytes;
        let header = pb::ServiceHeader { method_name: method.to_owned(), ..Default::default() };
        if request_len(&header, request) > max {
            return Err(CallError::RequestTooLarge { len: request.len(), max });
        }
        let frame = request_frame(&header, request);

        let (counter, new_method) = self.core.counter(method);
        if new_method {
            (self.ctx.send)(Command::AddService(self.core.registration()));
        }
        let deadline = Instant::now() + timeout;
        let mut poll = Poll::new().map_err(CallError::Poll)?;
        let mut calls: Vec<OneCall> =
            servers.iter().enumerate().map(|(i, s)| OneCall::start(self, i, s, &mut poll)).collect();
        let counters = &self.ctx.services.counters;
        for _ in &calls {
            bump(&counters.calls_made);
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let mut events = Events::with_capacity(64);
        while calls.iter().any(|c| c.result.is_none()) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if let Err(e) = poll.poll(&mut events, Some(deadline - now)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                for c in calls.iter_mut().filter(|c| c.result.is_none()) {
                    c.result = Some(Err(format!("poll: {e}")));
                }
                break;
            }
            for ev in events.iter() {
                if let Some(c) = calls.get_mut(ev.token().0) {
                    c.drive(&mut poll, &frame);
                }
            }
        }
        let mut out = Vec::with_capacity(calls.len());
        for mut c in calls {
            let status_payload = match c.result.take() {
                None => {
                    bump(&counters.calls_timed_out);
                    (CallStatus::TimedOut, 0, Vec::new())
                }
                Some(Err(e)) => {
                    bump(&counters.calls_broken);
                    (CallStatus::Broken(e), 0, Vec::new())
                }
                Some(Ok(resp)) => {
                    bump(&counters.calls_answered);
                    // The connection is kept for the next call.
                    if let Some(mut conn) = c.conn.take() {
                        let _ = poll.registry().deregister(&mut conn.stream);
                        let mut idle = lock(&self.idle);
                        let list = idle.entry(c.key.clone()).or_default();
                        if list.len() < IDLE_PER_SERVER {
                            list.push(conn);
                        }
                    }
                    let header = resp.header.unwrap_or_default();
                    if header.state == pb::service_header::ECallState::Executed as i32 {
                        (CallStatus::Executed, resp.ret_state, resp.response)
                    } else {
                        let msg = if header.error.is_empty() { "call failed".to_owned() } else { header.error };
                        (CallStatus::Failed(msg), resp.ret_state, Vec::new())
                    }
                }
            };
            let (status, ret_state, payload) = status_payload;
            out.push(ServiceResponse { server: c.server, method: method.to_owned(), status, ret_state, payload });
        }
        Ok(out)
    }

    fn take_idle(&self, key: &EntityKey, port: u16) -> Option<Conn> {
        let mut idle = lock(&self.idle);
        let list = idle.get_mut(key)?;
        while let Some(c) = list.pop() {
            // A connection the server closed meanwhile (its idle deadline) has the end of its stream waiting.
            if c.port == port && matches!(c.stream.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            {
                return Some(c);
            }
        }
        None
    }
}

impl Drop for ServiceClient {
    fn drop(&mut self) {
        (self.ctx.send)(Command::RemoveService(self.core.id));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Connecting, or writing the handshake and the request.
    Writing,
    /// Waiting for the handshake response (a new connection).
    Handshake,
    /// Waiting for the response.
    Response,
}

/// One server's part of a call.
struct OneCall {
    key: EntityKey,
    server: ServerId,
    addr: Option<SocketAddr>,
    conn: Option<Conn>,
    /// The connection was kept from an earlier call (a failure before any answer is retried once anew).
    reused: bool,
    /// Bytes of an answer arrived on this connection.
    answered: bool,
    /// The server reset the connection before any answer: its socket was closed when the request reached it
    /// (a kept connection it closed for being idle), so it never read the request.
    reset_unanswered: bool,
    step: Step,
    /// The handshake request (a new connection), written before the call's frame.
    handshake: Vec<u8>,
    /// Bytes of the handshake and the frame written.
    out_at: usize,
    max_response: usize,
    decoder: FrameDecoder,
    token: Token,
    result: Option<Result<pb::Response, String>>,
}

impl OneCall {
    /// Starts the call of server `s` (token `index` in the call's `poll`): a kept connection or a new one.
    fn start(client: &ServiceClient, index: usize, s: &RemoteService, poll: &mut Poll) -> OneCall {
        let max_response = client.ctx.services.config.max_response_bytes;
        let mut c = OneCall {
            key: s.key.clone(),
            server: ServerId::of(s),
            addr: server_address(s, &client.ctx.services.host_name),
            conn: None,
            reused: false,
            answered: false,
            reset_unanswered: false,
            step: Step::Writing,
            handshake: Vec::new(),
            out_at: 0,
            max_response,
            decoder: FrameDecoder::new(max_response),
            token: Token(index),
            result: None,
        };
        match client.take_idle(&s.key, s.tcp_port) {
            Some(conn) => {
                c.conn = Some(conn);
                c.reused = true;
            }
            None => c.connect(),
        }
        c.begin(poll);
        c
    }

    /// A new connection (non-blocking connect); the handshake goes first.
    fn connect(&mut self) {
        self.reused = false;
        self.answered = false;
        self.reset_unanswered = false;
        let Some(addr) = self.addr else {
            self.result = Some(Err("no address to reach the server at".into()));
            return;
        };
        match TcpStream::connect(addr) {
            Ok(stream) => self.conn = Some(Conn { stream, port: addr.port() }),
            Err(e) => self.result = Some(Err(format!("connect to {addr}: {e}"))),
        }
    }

    /// Queues what to write (the handshake if the connection is new, then the request) and polls the connection.
    fn begin(&mut self, poll: &mut Poll) {
        if self.result.is_some() {
            return;
        }
        self.out_at = 0;
        // The request follows the handshake at once: eCAL's server reads it after answering the handshake.
        self.handshake = if self.reused { Vec::new() } else { handshake_request() };
        self.step = Step::Writing;
        self.decoder = FrameDecoder::new(self.max_response);
        let token = self.token;
        if let Some(conn) = &mut self.conn
            && let Err(e) = poll.registry().register(&mut conn.stream, token, Interest::READABLE | Interest::WRITABLE)
        {
            self.result = Some(Err(format!("poll: {e}")));
        }
    }

    /// Handles readiness: writes what is left, reads what arrived. A kept connection that fails before the
    /// request was written whole, or that the server reset before any answer (it had closed the connection for
    /// being idle as the request went out: a reset says its socket was closed, so it never read the request), is
    /// replaced by a new one, once; after any other failure the server may have run the request, and it is not
    /// sent again.
    fn drive(&mut self, poll: &mut Poll, frame: &[u8]) {
        if self.result.is_some() {
            return;
        }
        if let Err(e) = self.try_drive(frame) {
            if self.reused && (self.step == Step::Writing || self.reset_unanswered) {
                self.drop_conn(poll);
                self.connect();
                self.begin(poll);
            } else {
                self.drop_conn(poll);
                self.result = Some(Err(e));
            }
        }
    }

    fn drop_conn(&mut self, poll: &mut Poll) {
        if let Some(mut c) = self.conn.take() {
            let _ = poll.registry().deregister(&mut c.stream);
        }
    }

    fn try_drive(&mut self, frame: &[u8]) -> Result<(), String> {
        let Some(conn) = &mut self.conn else { return Err("no connection".into()) };
        if let Ok(Some(e)) | Err(e) = conn.stream.take_error() {
            self.reset_unanswered = e.kind() == io::ErrorKind::ConnectionReset && !self.answered;
            return Err(format!("connection: {e}"));
        }
        let hs = self.handshake.len();
        while self.out_at < hs + frame.len() {
            let written = if self.out_at < hs {
                conn.stream.write_vectored(&[IoSlice::new(&self.handshake[self.out_at..]), IoSlice::new(frame)])
            } else {
                conn.stream.write(&frame[self.out_at - hs..])
            };
            match written {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                // Not connected yet: writable comes when it is.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        if self.step == Step::Writing {
            self.step = if self.reused { Step::Response } else { Step::Handshake };
        }
        READ_BUF.with_borrow_mut(|buf| self.read_frames(buf))
    }

    /// Reads what arrived (into `buf`) and handles the frames it completes.
    fn read_frames(&mut self, buf: &mut [u8]) -> Result<(), String> {
        let Some(conn) = &mut self.conn else { return Err("no connection".into()) };
        loop {
            let n = match conn.stream.read(buf) {
                Ok(0) => return Err("closed by the server".into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.reset_unanswered = e.kind() == io::ErrorKind::ConnectionReset && !self.answered;
                    return Err(format!("read: {e}"));
                }
            };
            self.answered = true;
            let mut input = &buf[..n];
            while !input.is_empty() {
                let Some(f) = self.decoder.decode(&mut input).map_err(|e| e.to_string())? else { break };
                match (self.step, MessageType::from_u8(f.header.message_type)) {
                    (Step::Handshake, Some(MessageType::HandshakeResponse)) => {
                        if f.payload.first() != Some(&crate::wire::service::PROTOCOL_VERSION) {
                            return Err(format!("the server chose protocol version {:?}", f.payload.first()));
                        }
                        self.step = Step::Response;
                    }
                    (Step::Response, Some(MessageType::Response)) => {
                        // The payload stays where the frame was read to (a large one is not copied again).
                        let split =
                            split_bytes_field(f.payload, 2).map_err(|e| format!("response does not decode: {e}"))?;
                        let mut resp = pb::Response::decode(split.rest.as_slice())
                            .map_err(|e| format!("response does not decode: {e}"))?;
                        resp.response = split.field;
                        if !input.is_empty() {
                            return Err("the server sent more than one response".into());
                        }
                        self.result = Some(Ok(resp));
                        return Ok(());
                    }
                    (_, _) => return Err(format!("unexpected message type {}", f.header.message_type)),
                }
            }
        }
    }
}
