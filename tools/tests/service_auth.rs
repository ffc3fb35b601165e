//! Services under `[shoal_auth]`: a protected service's server answers only clients whose authenticated
//! registration announced them from the connection's address. A shoal client with the key is served; one with
//! another key, a raw connection that registration never announced and an eCAL 6.1.1 client are not (counted).

mod support;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use shoal::{Node, TypeInfo};
use support::{ecal_peer, topic, write_ini};

const KEY_1: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const KEY_2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn auth_text(key: &str) -> String {
    format!("[shoal_auth]\nkey_hex = {key}\nprotected_topics = svc_auth_.*\n")
}

fn call(ini: &str, service: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args([
            "service",
            "call",
            service,
            "echo",
            "--data",
            "x",
            "--json",
            "--wait-ms",
            "3000",
            "--timeout-ms",
            "3000",
        ])
        .env("ECAL_INI", ini)
        .output()
        .expect("run shoal service call")
}

#[test]
fn a_protected_service_answers_authenticated_clients_only() {
    let cfg = shoal::Config::parse_str(&auth_text(KEY_1), "/test/ecal.ini").expect("config");
    let node = Node::init_with_config("service_auth_test", cfg).expect("init");
    let name = format!("svc_auth_{}", topic("echo"));
    let raw = TypeInfo::raw("");
    let server =
        node.service_server(&name).method("echo", raw.clone(), raw, |r: &[u8]| Ok(r.to_vec())).build().unwrap();

    // A shoal client with the key: served.
    let same = call(&write_ini("svc_auth_same", &auth_text(KEY_1)), &name);
    let out = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success() && out.contains("\"executed\""), "{out}\n{}", String::from_utf8_lossy(&same.stderr));

    // Another key: its registration is refused, so the server never admits its connection; and it never sees the
    // server's sealed registration, so it finds no server at all.
    let other = call(&write_ini("svc_auth_other", &auth_text(KEY_2)), &name);
    assert!(!other.status.success(), "{}", String::from_utf8_lossy(&other.stdout));

    // A raw connection nobody announced: the handshake is never answered; closed at the handshake deadline, counted.
    let before = node.snapshot().service_counts.unauthenticated;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    std::io::Write::write_all(&mut s, &[0, 0, 0, 2, 1, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut buf = Vec::new();
    let t0 = Instant::now();
    let _ = s.read_to_end(&mut buf);
    assert!(buf.is_empty(), "the handshake was answered: {buf:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(node.snapshot().service_counts.unauthenticated > before);

    // eCAL cannot authenticate: it does not see the protected server.
    let ecal =
        ecal_peer("svc_client.py", "svc_client.py", &["--service", &name, "--method", "echo", "--wait-ms", "3000"]);
    let lines = ecal.until("no_server", Duration::from_secs(20));
    assert!(lines.iter().all(|l| l["event"] != "response"), "{}", ecal.report());
}
