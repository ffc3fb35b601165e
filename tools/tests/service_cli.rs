//! `shoal service list / info / call` against a shoal server whose methods announce protobuf types (the request built
//! from `--data` JSON with the announced descriptor, the response decoded with it) and against eCAL 6.1.1's Python
//! server (raw methods: `--data` is the request text, the response printed as text); exit codes.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Field};
use serde_json::Value;
use shoal::{Node, TypeInfo};
use support::{ecal_peer, topic};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

fn shoal(args: &[&str]) -> Output {
    Command::new(SHOAL).args(args).output().expect("run shoal")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PROTO: &str = r#"
syntax = "proto3";
package calc;
message AddRequest { int64 a = 1; int64 b = 2; }
message AddResponse { int64 sum = 1; string note = 2; }
"#;

/// The `FileDescriptorSet` of `PROTO` and its pool.
fn calc_types() -> (Vec<u8>, DescriptorPool) {
    let dir = format!("{}/service_cli_{}", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/calc.proto"), PROTO).unwrap();
    let fds = protox::compile(["calc.proto"], [&dir]).expect("compile calc.proto");
    let bytes = fds.encode_to_vec();
    (bytes.clone(), DescriptorPool::decode(bytes.as_slice()).unwrap())
}

#[test]
fn calls_build_requests_from_json_and_decode_responses_with_the_announced_types() {
    let node = Node::init_with_config("service_cli_test", shoal::Config::default()).expect("init");
    let name = topic("svc_cli_calc");
    let (set, pool) = calc_types();
    let req_desc = pool.get_message_by_name("calc.AddRequest").unwrap();
    let resp_desc = pool.get_message_by_name("calc.AddResponse").unwrap();
    let _server = node
        .service_server(&name)
        .method(
            "add",
            TypeInfo::new("calc.AddRequest", "proto", set.clone()),
            TypeInfo::new("calc.AddResponse", "proto", set.clone()),
            move |req: &[u8]| {
                let m = DynamicMessage::decode(req_desc.clone(), req)?;
                let get = |f: &str| m.get_field_by_name(f).and_then(|v| v.as_i64()).unwrap_or(0);
                let mut out = DynamicMessage::new(resp_desc.clone());
                out.set_field_by_name("sum", Field::I64(get("a") + get("b")));
                out.set_field_by_name("note", Field::String("added by shoal".into()));
                Ok(out.encode_to_vec())
            },
        )
        .build()
        .expect("server");

    let o = shoal(&["service", "call", &name, "add", "--data", r#"{"a": 2, "b": 40}"#, "--json"]);
    assert!(o.status.success(), "{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(r["status"], "executed", "{r}");
    assert_eq!(r["response"]["sum"], 42, "{r}");
    assert_eq!(r["response"]["note"], "added by shoal");
    assert_eq!(r["pid"], std::process::id());

    // Text form.
    let o = shoal(&["service", "call", &name, "add", "--data", r#"{"a": 1, "b": 1}"#]);
    assert!(stdout(&o).contains("[executed]") && stdout(&o).contains("\"sum\":2"), "{}", stdout(&o));
    // --data that is not the announced request type: a usage error (2).
    let o = shoal(&["service", "call", &name, "add", "--data", r#"{"c": 1}"#]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    // An unknown method: the server answers failed, the call exits with 1.
    let o = shoal(&["service", "call", &name, "sub", "--data", "{}"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("[failed]") && stdout(&o).contains("no method named 'sub'"), "{}", stdout(&o));
    // A service nobody serves: not found (3).
    let o = shoal(&["service", "call", &format!("{name}_none"), "add", "--wait-ms", "300"]);
    assert_eq!(o.status.code(), Some(3));
    // --server picks one by pid; a pid that serves nothing is not found.
    let pid = std::process::id().to_string();
    let o = shoal(&["service", "call", &name, "add", "--data", "{}", "--server", &pid, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = shoal(&["service", "call", &name, "add", "--data", "{}", "--server", "1"]);
    assert_eq!(o.status.code(), Some(3));

    // list and info show the server with its method and types.
    let o = shoal(&["service", "list", "--json"]);
    let mine: Vec<Value> = stdout(&o)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["service"] == name.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{}", stdout(&o));
    assert_eq!(mine[0]["role"], "server");
    assert_eq!(mine[0]["methods"][0]["request"]["name"], "calc.AddRequest");
    let o = shoal(&["service", "info", &name]);
    assert!(stdout(&o).contains("proto:calc.AddResponse"), "{}", stdout(&o));
    let o = shoal(&["service", "info", &format!("{name}_none"), "--wait-ms", "300"]);
    assert_eq!(o.status.code(), Some(3));
}

#[test]
fn calls_of_an_ecal_server_send_text_and_print_text() {
    let name = topic("svc_cli_ecal");
    let server = ecal_peer("svc_server.py", "svc_server.py", &["--service", &name, "--seconds", "30"]);
    server.expect("ready", Duration::from_secs(20));
    let o = shoal(&["service", "call", &name, "echo", "--data", "plain text", "--wait-ms", "5000"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("[executed] echo:plain text"), "{}", stdout(&o));
    let o = shoal(&["service", "list"]);
    assert!(stdout(&o).contains(&name) && stdout(&o).contains("echo,fail"), "{}", stdout(&o));
    server.signal(libc::SIGTERM);
}
