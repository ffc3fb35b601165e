//! `shoal service list`, `shoal service info NAME`, `shoal service call NAME METHOD`: the servers and clients of every
//! process (shoal's and eCAL's) as registration announces them, and calls of their methods. A request is built from
//! the method's announced request descriptor (`--data '{json}'`, protobuf JSON) or, for a method announced without
//! one, is `--data`'s text as is; a response is decoded with the announced response descriptor, else printed as text
//! when it is UTF-8, else as hex.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use shoal::monitor::{MethodInfo, ServiceEntry, ServiceRole, Snapshot, printable};
use shoal::{CallStatus, ServiceResponse, TypeInfo};

use crate::common::{Table, json_line, observe, start_node};
use crate::inspect::ListArgs;
use crate::{descriptors, exit};

/// `shoal service ...`
#[derive(Debug, Subcommand)]
pub(crate) enum ServiceCommand {
    /// Every service server and client: process, methods, port.
    List(ListArgs),
    /// One service: its servers and clients, each method with its request and response types and call counts.
    Info(InfoArgs),
    /// Call a method of a service on every server (or one: --server) and print the responses.
    Call(CallArgs),
}

/// Arguments of `shoal service info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// The service name.
    service: String,
    #[command(flatten)]
    list: ListArgs,
}

/// Arguments of `shoal service call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The service name.
    service: String,
    /// The method.
    method: String,
    /// The request: protobuf JSON of the method's announced request type, or, for a method announced without a
    /// protobuf descriptor, the request's bytes as text.
    #[arg(long, default_value = "")]
    data: String,
    /// Call only this server: its process id or its entity id (from `shoal service info`). Default: every server
    /// (eCAL's semantics: one response per server).
    #[arg(long)]
    server: Option<u64>,
    /// Call every server (the default; for symmetry with --server).
    #[arg(long, conflicts_with = "server")]
    all: bool,
    /// How long to wait for the responses, in ms.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// How long to wait for a server to be announced, in ms.
    #[arg(long, default_value_t = 2000)]
    wait_ms: u64,
    /// One JSON object per response.
    #[arg(long)]
    json: bool,
}

/// Runs a `shoal service` subcommand.
pub(crate) fn run(cmd: ServiceCommand) -> Result<()> {
    match cmd {
        ServiceCommand::List(a) => list(&a),
        ServiceCommand::Info(a) => info(&a),
        ServiceCommand::Call(a) => call(&a),
    }
}

fn role(s: &ServiceEntry) -> &'static str {
    match s.role {
        ServiceRole::Server => "server",
        ServiceRole::Client => "client",
    }
}

fn type_json(t: &TypeInfo) -> Value {
    json!({"name": t.name, "encoding": t.encoding, "descriptor_bytes": t.descriptor.len()})
}

fn method_json(m: &MethodInfo) -> Value {
    json!({"name": m.name, "request": type_json(&m.request), "response": type_json(&m.response),
           "call_count": m.call_count})
}

fn entry_json(s: &ServiceEntry) -> Value {
    json!({
        "service": s.service_name, "role": role(s), "host": s.host_name, "pid": s.pid, "entity_id": s.entity_id,
        "process": s.process_name, "unit": s.unit_name, "tcp_port": s.tcp_port, "version": s.version,
        "methods": s.methods.iter().map(method_json).collect::<Vec<_>>(),
        "registration_age_ms": s.registration_age.as_millis() as u64,
    })
}

fn type_text(t: &TypeInfo) -> String {
    match (t.name.is_empty(), t.encoding.is_empty()) {
        (true, true) => "-".into(),
        (false, true) => t.name.clone(),
        (true, false) => format!("({})", t.encoding),
        (false, false) => format!("{}:{}", t.encoding, t.name),
    }
}

fn list(a: &ListArgs) -> Result<()> {
    let node = start_node("shoal_service")?;
    let snap = observe(&node, a.wait_ms);
    let mut out = std::io::stdout().lock();
    if a.json {
        for s in &snap.services {
            json_line(&mut out, &entry_json(s))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&["SERVICE", "ROLE", "HOST", "PID", "UNIT", "PORT", "METHODS"]);
    for s in &snap.services {
        let methods: Vec<&str> = s.methods.iter().map(|m| m.name.as_str()).collect();
        t.row(vec![
            s.service_name.clone(),
            role(s).into(),
            s.host_name.clone(),
            s.pid.to_string(),
            s.unit_name.clone(),
            if s.role == ServiceRole::Server { s.tcp_port.to_string() } else { "-".into() },
            methods.join(","),
        ]);
    }
    t.write(&mut out)
}

fn info(a: &InfoArgs) -> Result<()> {
    let node = start_node("shoal_service")?;
    let snap = observe(&node, a.list.wait_ms);
    let entries: Vec<&ServiceEntry> = snap.services.iter().filter(|s| s.service_name == a.service).collect();
    if entries.is_empty() {
        return Err(exit::not_found(format!("no server or client of service {:?} is announced", a.service)));
    }
    let mut out = std::io::stdout().lock();
    if a.list.json {
        for s in entries {
            json_line(&mut out, &entry_json(s))?;
        }
        return Ok(());
    }
    for s in entries {
        writeln!(
            out,
            "{} {} pid {} on {} (unit {}, entity {}){}",
            printable(&s.service_name),
            role(s),
            s.pid,
            printable(&s.host_name),
            printable(&s.unit_name),
            s.entity_id,
            if s.role == ServiceRole::Server { format!(", port {}", s.tcp_port) } else { String::new() },
        )?;
        let mut t = Table::new(&["  METHOD", "REQUEST", "RESPONSE", "CALLS"]);
        for m in &s.methods {
            t.row(vec![
                format!("  {}", m.name),
                type_text(&m.request),
                type_text(&m.response),
                m.call_count.to_string(),
            ]);
        }
        t.write(&mut out)?;
    }
    Ok(())
}

/// The method as the servers of `service` announce it (the first that announces it with a protobuf descriptor).
fn announced_method<'a>(snap: &'a Snapshot, service: &str, method: &str) -> Option<&'a MethodInfo> {
    let of_servers = || {
        snap.services
            .iter()
            .filter(move |s| s.service_name == service && s.role == ServiceRole::Server)
            .flat_map(|s| s.methods.iter())
            .filter(move |m| m.name == method)
    };
    of_servers()
        .find(|m| m.request.encoding == "proto" && !m.request.descriptor.is_empty())
        .or_else(|| of_servers().next())
}

/// The type information of a method's request or response with its full protobuf name: eCAL's protobuf servers
/// announce the message's short name (`AddRequest`), shoal's the full one (`math.AddRequest`); the descriptor
/// names it in full either way, and a short name that one message of the set has is taken as that one.
fn resolved(t: &TypeInfo) -> Option<TypeInfo> {
    if t.encoding != "proto" || t.descriptor.is_empty() {
        return None;
    }
    if shoal::dynamic::DynamicDecoder::new(t).is_ok() {
        return Some(t.clone());
    }
    let pool = prost_reflect::DescriptorPool::decode(t.descriptor.as_slice()).ok()?;
    let mut named = pool.all_messages().filter(|m| m.name() == t.name);
    let only = named.next()?;
    if named.next().is_some() {
        return None;
    }
    Some(TypeInfo::new(only.full_name(), "proto", t.descriptor.clone()))
}

fn message_of(t: &TypeInfo) -> Option<prost_reflect::MessageDescriptor> {
    shoal::dynamic::DynamicDecoder::new(&resolved(t)?).ok()?.message_descriptor().cloned()
}

/// The response payload as JSON: decoded with the announced descriptor, else text, else hex.
fn payload_json(method: Option<&MethodInfo>, payload: &[u8]) -> Value {
    if let Some(t) = method.and_then(|m| resolved(&m.response))
        && let Ok(v) = shoal::dynamic::decode_to_json(&t, payload)
    {
        return v;
    }
    match std::str::from_utf8(payload) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({"hex": payload.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
    }
}

fn status_json(s: &CallStatus) -> (&'static str, Option<&str>) {
    match s {
        CallStatus::Executed => ("executed", None),
        CallStatus::Failed(m) => ("failed", Some(m.as_str())),
        CallStatus::TimedOut => ("timed_out", None),
        CallStatus::Broken(m) => ("broken", Some(m.as_str())),
        _ => ("unknown", None),
    }
}

fn call(a: &CallArgs) -> Result<()> {
    let node = start_node("shoal_service")?;
    let client = node.service_client(&a.service).build();
    let wait = Duration::from_millis(a.wait_ms);
    if client.wait_for_servers(1, wait).is_err() {
        return Err(exit::not_found(format!(
            "no server of service {:?} announced within {} ms (`shoal service list` shows the services)",
            a.service, a.wait_ms
        )));
    }
    // The method's types as the servers announce them (their registration may lag the port by one refresh).
    let snap = node.snapshot();
    let method = announced_method(&snap, &a.service, &a.method);
    let request = match method.and_then(|m| message_of(&m.request)) {
        Some(desc) => descriptors::encode_json(&desc, if a.data.is_empty() { "{}" } else { &a.data })
            .map_err(|e| exit::usage(e.to_string()))?,
        None => a.data.as_bytes().to_vec(),
    };
    let timeout = Duration::from_millis(a.timeout_ms);
    let responses: Vec<ServiceResponse> = match a.server {
        Some(sel) => {
            let Some(server) = client.servers().into_iter().find(|s| u64::from(s.pid) == sel || s.entity_id == sel)
            else {
                return Err(exit::not_found(format!("no server of {:?} has pid or entity id {sel}", a.service)));
            };
            vec![client.call_server(&server, &a.method, &request, timeout)?]
        }
        None => client.call(&a.method, &request, timeout)?,
    };
    let mut out = std::io::stdout().lock();
    let mut executed = 0;
    for r in &responses {
        let (status, error) = status_json(&r.status);
        executed += usize::from(r.is_ok());
        if a.json {
            json_line(
                &mut out,
                &json!({
                    "service": a.service, "method": a.method, "host": r.server.host_name, "pid": r.server.pid,
                    "entity_id": r.server.entity_id, "status": status, "error": error, "ret_state": r.ret_state,
                    "response": payload_json(method, &r.payload),
                }),
            )?;
        } else {
            let body = match (&r.status, payload_json(method, &r.payload)) {
                (CallStatus::Executed, Value::String(s)) => s,
                (CallStatus::Executed, v) => v.to_string(),
                (_, _) => error.unwrap_or_default().to_owned(),
            };
            let body = printable(&body);
            writeln!(out, "{} pid {} [{status}] {body}", printable(&r.server.host_name), r.server.pid)?;
        }
    }
    if executed == 0 {
        return Err(exit::coded(exit::FAILURE, format!("no server executed {}::{}", a.service, a.method)));
    }
    Ok(())
}
