//! A service server: its methods and handlers, its listener, and what a handler thread does with a request.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use prost::Message;

use crate::io::Command;
use crate::registration::{LocalService, MethodInfo, ServiceRole};
use crate::sync::lock;
use crate::types::TypeInfo;
use crate::wire::pb;
use crate::wire::service::{MessageType, encode_header, split_bytes_field};

use super::{Context, Entity, Services, bump};

/// What a handler returns when it fails: the caller gets a failed response with its text.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What a handler returns: the response payload, or an error.
pub type HandlerResult = Result<Vec<u8>, HandlerError>;

type Handler = Arc<dyn Fn(&[u8]) -> HandlerResult + Send + Sync>;

struct Method {
    request: TypeInfo,
    response: TypeInfo,
    handler: Handler,
    calls: AtomicI64,
}

/// Why a server could not be built.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The listening socket could not be opened.
    #[error("cannot open the service's TCP listener: {0}")]
    Listen(#[source] std::io::Error),
    /// The service name is empty.
    #[error("a service needs a name")]
    EmptyName,
}

/// The part of a server the I/O thread and the handler threads share.
pub(crate) struct ServerCore {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) port: u16,
    host_name: String,
    methods: RwLock<BTreeMap<String, Method>>,
    /// Taken by the I/O thread.
    pub(crate) listener: Mutex<Option<std::net::TcpListener>>,
    /// The server was dropped: the I/O thread closes its listener and connections.
    pub(crate) closed: AtomicBool,
}

impl ServerCore {
    pub(crate) fn call_counts(&self) -> Vec<(String, i64)> {
        read(&self.methods).iter().map(|(n, m)| (n.clone(), m.calls.load(Ordering::Relaxed))).collect()
    }

    fn registration(&self) -> LocalService {
        let methods = read(&self.methods)
            .iter()
            .map(|(name, m)| MethodInfo {
                name: name.clone(),
                request: m.request.clone(),
                response: m.response.clone(),
                call_count: m.calls.load(Ordering::Relaxed),
            })
            .collect();
        LocalService {
            id: self.id,
            role: ServiceRole::Server,
            service_name: self.name.clone(),
            methods,
            tcp_port: self.port,
        }
    }

    /// Runs on a handler thread: decodes `request` (an `eCAL.pb.Request`), calls the method's handler and returns
    /// the framed `eCAL.pb.Response` (header and payload), as eCAL 6.1.1's server answers.
    pub(crate) fn serve(&self, services: &Services, request: Vec<u8>) -> Vec<u8> {
        let mut header = pb::ServiceHeader {
            host_name: self.host_name.clone(),
            service_name: self.name.clone(),
            service_id: self.id.to_string(),
            ..Default::default()
        };
        let failed = |mut header: pb::ServiceHeader, error: String| {
            bump(&services.counters.calls_failed);
            header.state = pb::service_header::ECallState::Failed as i32;
            header.error = error;
            pb::Response { header: Some(header), response: Vec::new(), ret_state: 0 }
        };
        // The request payload stays where the frame was read to (a large one is not copied again).
        let decoded = split_bytes_field(request, 2).map_err(|e| e.to_string()).and_then(|split| {
            let mut req = pb::Request::decode(split.rest.as_slice()).map_err(|e| e.to_string())?;
            req.request = split.field;
            Ok(req)
        });
        let response = match decoded {
            Err(e) => {
                bump(&services.counters.bad_requests);
                failed(header, format!("Service '{}': failed to parse request message: {e}", self.name))
            }
            Ok(req) => {
                let method_name = req.header.map(|h| h.method_name).unwrap_or_default();
                header.method_name = method_name.clone();
                let handler = read(&self.methods).get(&method_name).map(|m| {
                    m.calls.fetch_add(1, Ordering::Relaxed);
                    Arc::clone(&m.handler)
                });
                match handler {
                    None => failed(header, format!("Service '{}' has no method named '{method_name}'", self.name)),
                    Some(h) => {
                        let payload = req.request;
                        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&payload))) {
                            Ok(Ok(out)) if out.len() <= services.config.max_response_bytes => {
                                bump(&services.counters.calls_served);
                                header.state = pb::service_header::ECallState::Executed as i32;
                                pb::Response { header: Some(header), response: out, ret_state: 0 }
                            }
                            Ok(Ok(out)) => failed(
                                header,
                                format!(
                                    "response of {} bytes is larger than the server's max_response ({} bytes)",
                                    out.len(),
                                    services.config.max_response_bytes
                                ),
                            ),
                            Ok(Err(e)) => failed(header, e.to_string()),
                            Err(_) => failed(header, format!("the handler of '{method_name}' panicked")),
                        }
                    }
                }
            }
        };
        frame_response(&response)
    }
}

/// A response message with its protocol header.
pub(crate) fn frame_response(response: &pb::Response) -> Vec<u8> {
    let len = response.encoded_len();
    let mut out = Vec::with_capacity(crate::wire::service::HEADER_LEN + len);
    out.extend_from_slice(&encode_header(MessageType::Response, u32::try_from(len).unwrap_or(u32::MAX)));
    response.encode(&mut out).expect("a Vec grows as needed");
    out
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds a [`ServiceServer`]: `node.service_server("name").method(...).build()`.
#[must_use]
pub struct ServerBuilder {
    ctx: Context,
    name: String,
    methods: BTreeMap<String, Method>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ServerBuilder {
    pub(crate) fn new(ctx: Context, name: &str) -> ServerBuilder {
        ServerBuilder { ctx, name: name.to_owned(), methods: BTreeMap::new() }
    }

    /// Adds method `name`, announced with the request and response type information given (what eCAL tools and
    /// `shoal service call` build requests and decode responses with), served by `handler`. The handler runs on
    /// a handler thread with the request payload; what it returns is the response, an error a failed call.
    pub fn method(
        mut self,
        name: &str,
        request: TypeInfo,
        response: TypeInfo,
        handler: impl Fn(&[u8]) -> HandlerResult + Send + Sync + 'static,
    ) -> Self {
        self.methods.insert(
            name.to_owned(),
            Method { request, response, handler: Arc::new(handler), calls: AtomicI64::new(0) },
        );
        self
    }

    /// Opens the listener and announces the server.
    pub fn build(self) -> Result<ServiceServer, BuildError> {
        if self.name.is_empty() {
            return Err(BuildError::EmptyName);
        }
        let services = &self.ctx.services;
        let listener = bind_listener(services.local_only).map_err(BuildError::Listen)?;
        let port = listener.local_addr().map_err(BuildError::Listen)?.port();
        let core = Arc::new(ServerCore {
            id: self.ctx.id,
            name: self.name,
            port,
            host_name: services.host_name.clone(),
            methods: RwLock::new(self.methods),
            listener: Mutex::new(Some(listener)),
            closed: AtomicBool::new(false),
        });
        lock(&services.new_servers).push(Arc::clone(&core));
        lock(&services.entities).push(Entity::Server(Arc::downgrade(&core)));
        (self.ctx.send)(Command::AddService(core.registration()));
        tracing::debug!("service {}: server listening on port {port}", core.name);
        Ok(ServiceServer { core, ctx: self.ctx })
    }
}

/// A listener: in local mode on the loopback interface ([`crate::transport::bind_loopback`]), else on every address
/// (`[::]`, dual stack, or `0.0.0.0`).
fn bind_listener(local_only: bool) -> std::io::Result<std::net::TcpListener> {
    let l = if local_only {
        crate::transport::bind_loopback()?
    } else {
        std::net::TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
            .or_else(|_| std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))))?
    };
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A service server (see the [module docs](crate::service)). Dropping it unregisters it (cmd 15) and closes its
/// listener and connections.
pub struct ServiceServer {
    core: Arc<ServerCore>,
    ctx: Context,
}

impl std::fmt::Debug for ServiceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceServer").field("name", &self.core.name).field("port", &self.core.port).finish()
    }
}

impl ServiceServer {
    /// The service name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The TCP port it listens on (announced in registration).
    pub fn port(&self) -> u16 {
        self.core.port
    }

    /// Its entity id (eCAL's `service_id`).
    pub fn id(&self) -> u64 {
        self.core.id
    }

    /// Adds or replaces method `name` on the running server and announces it at once.
    pub fn add_method(
        &self,
        name: &str,
        request: TypeInfo,
        response: TypeInfo,
        handler: impl Fn(&[u8]) -> HandlerResult + Send + Sync + 'static,
    ) {
        write(&self.core.methods).insert(
            name.to_owned(),
            Method { request, response, handler: Arc::new(handler), calls: AtomicI64::new(0) },
        );
        (self.ctx.send)(Command::AddService(self.core.registration()));
    }

    /// Removes method `name`; calls of it fail from now on. True when it existed.
    pub fn remove_method(&self, name: &str) -> bool {
        let existed = write(&self.core.methods).remove(name).is_some();
        if existed {
            (self.ctx.send)(Command::AddService(self.core.registration()));
        }
        existed
    }

    /// Calls of each method served so far (failed calls of a known method included).
    pub fn call_counts(&self) -> Vec<(String, i64)> {
        self.core.call_counts()
    }
}

impl Drop for ServiceServer {
    fn drop(&mut self) {
        self.core.closed.store(true, Ordering::Release);
        (self.ctx.send)(Command::RemoveService(self.core.id));
    }
}
